"""A collective that lays the blocks it receives side by side along a dim other than the
first (an all_to_all moving a split from rows to columns: the sharded transpose) copies
them out of its receive buffer into the result. Here it lays them along the first dim
instead, where the receive buffer is the result (MPI receives straight into it), and the
blocks are concatenated along the other dim where they are read: a fused kernel reads
each block from the receive buffer at its place (guarded loads, one region per block), so
the unpacking copy is gone. The op says how (OpDef.collective.blocks_along); where the reader is
not a kernel, the concatenation is a copy of its own, the one it replaces.
"""
from __future__ import annotations

from ...ir import Graph
from ...ir.ops.names import CONCATENATE, SLICE
from .rewrite import Rebuild

MAX_BLOCKS = 8           # more blocks than a fused concatenation reads (backends/llvm MAX_PIECES)


def blocks_late(graph: Graph) -> Graph:
    rules = [(op, op.opdef.collective.blocks_along(op.attrs)) for op in graph.ops
             if op.opdef.collective.blocks_along is not None]
    if not any(got is not None and got[2] <= MAX_BLOCKS for _, got in rules):
        return graph
    got_of = dict(rules)
    rb = Rebuild(graph)
    for op in graph.ops:
        got = got_of.get(op)
        if got is None or got[2] > MAX_BLOCKS:
            rb.copy(op)
            continue
        attrs, dim, g = got
        r = op.result
        stacked = rb.emit(op.name, *[rb.value(o) for o in op.operands], loc=op.loc, **attrs)
        n = stacked.shape[0] // g
        blocks = []
        for k in range(g):
            start = (k * n,) + (0,) * (r.ndim - 1)
            limit = ((k + 1) * n,) + tuple(stacked.shape[1:])
            blocks.append(rb.emit(SLICE, stacked, loc=op.loc, start=start, limit=limit, stride=(1,) * r.ndim))
        out = rb.emit(CONCATENATE, *blocks, loc=op.loc, dimension=dim) if g > 1 else blocks[0]
        out.sharding = r.sharding
        rb.replace(r, out)
    return rb.finish()
