"""The optimiser's last pass: annotations whose result is an operand itself (OpDef
`identity_of`: optimization_barrier, ir/ops/remat.py) replaced by that operand. The
barriers kept common-subexpression elimination, simplification and loop hoisting from
merging a checkpoint's recomputation with the forward pass; after those, the backends
see the recomputation as ordinary ops, fused like any others, where the backward pass
needs them."""
from __future__ import annotations

from ...ir import Graph
from .rewrite import Rebuild


def drop_barriers(graph: Graph) -> Graph:
    if not any(op.opdef.identity_of is not None for op in graph.ops):
        return graph
    rb = Rebuild(graph)
    for op in graph.ops:
        i = op.opdef.identity_of
        if i is None:
            rb.copy(op)
        else:
            rb.replace(op.result, rb.value(op.operands[i]))
    return rb.finish()
