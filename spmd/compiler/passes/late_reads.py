"""Cheap values made again where they are read late, instead of held until then (what
XLA's fusion does when it duplicates an elementwise producer into a far consumer).

A value made by an elementwise op or a re-index (no more work than its size) whose reads
are split by a gap -- an op between two reads that no kernel fuses with them: a matmul,
a collective, a reduction; in a training step, the rest of the forward pass and the
backward pass up to the read -- is made again before the read after the gap, when what
it is made from is in memory there anyway (read there or later, or an argument), or is
itself cheap to make again (remat.chain). That costs an elementwise pass, which the
backend fuses into the kernel that reads it, and frees the value's buffer across the
gap: the backward pass holds a layer's pre-activation, not also its activation and the
tanh inside a GELU. The copy is the same op on the same operands: the same bits. What
a collective made is held for the copy, never communicated again (a stencil's ghost
layer is made again from its halos, which stay: its exchanges run once a sweep).
Values smaller than MIN_BYTES are left alone.
"""
from __future__ import annotations

from ...ir import Graph
from .remat import Uses, chain, nbytes, recomputable, rematerialize

MIN_BYTES = 1 << 16


def recompute_late_reads(graph: Graph) -> Graph:
    uses = Uses(graph)
    n = len(graph.ops)
    late = {}                         # value -> the reads that come after a gap
    for op in graph.ops:
        if not recomputable(op) or op.opdef.fusion not in ("elementwise", "reindex") or nbytes(op.result) < MIN_BYTES:
            continue
        reads = sorted(set(uses.at.get(op.result, ())))
        after = [q for prev, q in zip(reads, reads[1:])
                 if q < n and any(_gap(graph.ops[j]) for j in range(prev + 1, q))]
        if after:
            late[op.result] = after
    # what a copy is made from: values held anyway, not ones that are themselves made again
    # (reading those would keep them alive until there)
    where = {}
    for v, after in late.items():
        for q in after:
            c = chain(v, q, uses, late.keys(), comm=False)
            for x in c or ():
                where.setdefault(x, [])
                if q not in where[x]:
                    where[x].append(q)
    return rematerialize(graph, where)


def _gap(op) -> bool:
    """An op no kernel fuses with its neighbours: reads on either side of it are apart."""
    return op.opdef.fusion is None or op.opdef.fusion == "reduction"
