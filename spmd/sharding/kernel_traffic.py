"""What a program's fused kernels move through memory, for the cost model of a whole
partitioned program (auto/program_cost.py): which values a kernel stores for readers in
other kernels (fused_kernels), and which of a kernel's bytes the cache holds (their reuse
distance). KernelTraffic puts them together per op.

The search prices ops one at a time before partitioning (auto/problem.py, with
cost_model.moved_values); these need the whole per-device graph: its collectives decide
where kernels end.
"""
from __future__ import annotations

import numpy as np

from ..ir import RECOMPUTE_LIMIT, recomputed_ops
from .cost_model import first_fused_reads, fuses


def nbytes(v) -> float:
    return float(v.size) * np.dtype(v.dtype).itemsize


def positional_ops(graph) -> set:
    """Fused ops computed from element positions and scalars alone (a stencil's
    boundary masks: iota, compares and ands of them)."""
    outputs = set(graph.outputs)
    out = set()
    for op in graph.ops:
        if fuses(op) and len(op.results) == 1 and op.results[0] not in outputs \
                and op.opdef.reindex.index_pieces is None \
                and all(o.ndim == 0 or o.producer in out for o in op.operands):
            out.add(op)
    return out


def fused_kernels(graph) -> set:
    """The values computed by fused ops (not mere re-indexings) that only fused ops read,
    yet that are stored to memory and read back (see kernels)."""
    return kernels(graph, positional_ops(graph))[0]


def kernels(graph, positional) -> tuple:
    """(the values fused_kernels says, {fused op: the number of the kernel it runs in},
    the re-indexings that are views, in no kernel: _view), `positional` its
    positional_ops. A re-indexing or positional op copied into several kernels counts in the first of them, where its bytes are
    read; one no fused op reads is a kernel of its own, but for a view.

    A kernel takes in its producers where all their readers are in it (the LLVM
    backend's fuser, producer into consumer, a program output too, which the kernel
    writes as well: Adam's new m and v, read by the parameter's update); a value some
    reader of which is outside it
    (an unfused op, or a view an unfused op reads: a stencil's edge row sent by a
    collective_permute) or that readers in several kernels read is stored. A Jacobi
    sweep's new grid is one: its edges go to the neighbours, and the next sweep, which
    needs them back, is another kernel. Re-indexings and positional values (iota, the
    masks a stencil computes from it) are not stored: each kernel that reads one
    computes it itself (the code generator decides most masks per region of the loop
    nest, at no cost an element)."""
    users = {}
    for op in graph.ops:
        for o in op.operands:
            users.setdefault(o, []).append(op)
    outputs = set(graph.outputs)
    member, alone, stored, count = {}, set(), set(), 0   # op -> numbers of the kernels it is in
    for op in reversed(graph.ops):
        if not fuses(op) or len(op.results) != 1:
            alone.add(op)
            continue
        r = op.results[0]
        ids, outside = set(), False
        for u in users.get(r, ()):
            outside |= u in alone
            ids |= member.get(u, set())
        if op.opdef.fusion == "reindex" or op in positional:     # (copied into every kernel that reads it)
            member[op] = ids
            if outside or r in outputs:
                alone.add(op)
            continue
        # (a program output too: the kernel writes it on the way; not a value the kernel
        # would compute again at several places it reads it)
        if len(ids) == 1 and not outside and recomputed_ops(r, users, positional) <= RECOMPUTE_LIMIT:
            member[op] = ids
            continue
        member[op] = {count}
        count += 1
        if ids:
            stored.add(r)
    of, views = {}, set()
    for op in graph.ops:
        if op in member:
            if not member[op] and _view(op, users, member):
                views.add(op)
                continue
            if not member[op]:
                member[op] = {count}
                count += 1
            of[op] = min(member[op])
    return stored, of, views


def _view(op, users, member) -> bool:
    """Is `op`, a re-indexing no fused kernel reads, free: a view (a slice) its unfused
    readers read in place (a stencil's edge row a collective sends), or a pad or
    concatenation only such views read (a ghost-layered block whose edge column a
    collective sends: the view is a small kernel reading the pieces, the block never
    made)? A view of such a block is that small kernel, not free."""
    if op.opdef.fusion != "reindex":
        return False
    readers = users.get(op.results[0], ())
    if readers and all(u.opdef.fusion == "reindex" and u in member and not member[u] for u in readers):
        return True
    src = op.operands[0].producer if op.operands else None
    made_elsewhere = src is None or src not in member or bool(member[src])
    return op.opdef.reindex.view and made_elsewhere


class KernelTraffic:
    """The bytes each op of `graph` moves through memory, and which of them the cache
    holds. An op that does not fuse reads and writes all its operands and results.
    Fused ops: a kernel reads each value in memory it uses once, at the first fused op
    that reads it (cost_model.first_fused_reads: p * ap, x + alpha * p and r + beta * p
    read p once between them), a stored value as an argument; and writes the results
    that leave it: read by an op that does not fuse, a program output, or stored for
    another kernel (fused_kernels).

    A value read is in the cache when it was last touched (made or read) within the last
    `cache_bytes` the program moved, in program order (its reuse distance: from the
    start of the op that last touched it, whose bytes stream in and out together, to the
    end of the value's own read): a stencil's grid of a third of the cache, stored by one
    sweep and read by the next; not one of more than half, which the next sweep reads
    after a grid's bytes more (the sweep wrote it while reading the grid it replaces);
    nor a training step's activations, made by the forward pass and read back by the
    backward pass after the rest of the forward pass moved many times the cache. A value
    written is in the cache when it fits it.
    The arguments of the graph count as touched at its start."""

    def __init__(self, graph, cache_bytes=0.0):
        self.read_by_unfused = {o for op in graph.ops if not fuses(op) for o in op.operands}
        self.outputs = set(graph.outputs)
        self.positional = positional_ops(graph)
        self.stored, self.kernel, self.views = kernels(graph, self.positional)
        # (a stored value counts at its first fused reader, as an argument; not at a view,
        # which its unfused reader reads in place)
        self.first = first_fused_reads(graph, self.stored, self.views)
        self.split = {}                  # op -> (bytes in the cache, bytes from memory)
        moved, touched = 0.0, {}         # bytes moved so far; value -> `moved` when last touched
        for op in graph.ops:
            ins, outs = self.values(op)
            near = far = 0.0
            for v in ins:
                b = nbytes(v)
                if moved - touched.get(v, 0.0) + b <= cache_bytes:
                    near += b
                else:
                    far += b
            for v in outs:
                b = nbytes(v)
                if b <= cache_bytes:
                    near += b
                else:
                    far += b
            self.split[op] = (near, far)
            # (from the op's start: its bytes stream in and out together)
            for v in list(ins) + list(outs):
                touched[v] = moved
            moved += near + far

    def values(self, op) -> tuple:
        """(values `op` reads from memory, values it writes there)."""
        if not fuses(op):
            return list(dict.fromkeys(op.operands)), list(op.results)
        outs = [r for r in op.results if r in self.read_by_unfused or r in self.outputs or r in self.stored]
        return list(dict.fromkeys(o for o in op.operands if self.first.get(o) is op)), outs
