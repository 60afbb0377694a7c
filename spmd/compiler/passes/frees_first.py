"""Run first, of a few independent ops in a row, the one that frees memory: an op moves up
past the ops just before it (at most WINDOW of them, none making what it reads) when
the most those ops and it hold at once is lower that way (the most lowered, of the
places it could go).

Which order of a layer's two gradients is better depends on sizes known only per
device: in x @ w the weight's gradient is the activation x's last read, the input's
gradient the weight's. With the weight an argument (held anyway) the weight's gradient
first frees x before the input's gradient is made; with the weight gathered for this
use (FSDP) the input's gradient first frees the gathered weight before the weight's
gradient (its size again) is made. The autodiff rule emits one order; this pass swaps
them where the per-device sizes say the other is lower.

Only ops that compute (no collectives, no effects, no sub-programs) move, and only past
ops they do not read from: every rank runs the same program in the same order of
collectives, and the results are the same bits (the same ops on the same values).
"""
from __future__ import annotations

from ...ir import Graph
from .remat import nbytes
from .rewrite import in_order

WINDOW = 4


def movable(op) -> bool:
    d = op.opdef
    return not d.needs_comm and not d.effect and not d.subgraphs and d.fusion is None and bool(op.results)


def frees_first(graph: Graph) -> Graph:
    ops = list(graph.ops)
    readers = {}
    for op in ops:
        for o in set(op.operands):
            readers.setdefault(o, []).append(op)
    outputs = set(graph.outputs)
    pos = {op: k for k, op in enumerate(ops)}
    changed = False
    for j in range(1, len(ops)):
        b = ops[j]
        if not movable(b):
            continue
        best, gain = j, 0
        reads = set(b.operands)
        for i in range(j - 1, max(-1, j - WINDOW - 1), -1):
            if any(r in reads for r in ops[i].results):
                break
            # what is live before position i is the same either way
            g = _peak(ops[i:j + 1], j, pos, readers, outputs) - _peak([b] + ops[i:j], j, pos, readers, outputs)
            if g > gain:
                best, gain = i, g
        if best != j:
            ops[best:j + 1] = [b] + ops[best:j]
            for k in range(best, j + 1):
                pos[ops[k]] = k
            changed = True
    return in_order(graph, ops) if changed else graph


def _peak(seq, end, pos, readers, outputs) -> int:
    """The most the ops of `seq` (in that order, ending at position `end` of the program)
    hold at once beyond what was live before them: each result from its op on, and a
    value read in `seq` and nowhere after `end` freed after its last read there."""
    last = {}
    for k, op in enumerate(seq):
        for o in set(op.operands):
            if o.producer is not None and o not in outputs and all(pos[r] <= end for r in readers[o]):
                last[o] = k
    live = peak = 0
    for k, op in enumerate(seq):
        live += sum(nbytes(r) for r in op.results)
        peak = max(peak, live)
        live -= sum(nbytes(o) for o, q in last.items() if q == k)
    return peak
