"""Algebraic simplification and constant folding. The identities are each op's own
(`OpDef.simplify`, in ir/ops/); this pass applies them and folds constants:

- constant folding: an op that computes (not one that only re-indexes) whose operands
  are all constants and whose result is small is replaced by its value (computed by the
  op's numpy reference);
- identities: x+0, 0+x, x-0, x*1, 1*x, x/1, --x, select(p, x, x), a select on a constant
  predicate, x**1, x**2 -> x*x, x**-1 -> 1/x (each exactly numpy's value);
- no-op data movement: convert to the same dtype, reshape to the same shape, identity
  transposes and broadcasts, full slices, reductions over no axes; reshape of a reshape
  and transpose of a transpose become one op;
- transpose(dot_general(a, b)) that swaps the two free blocks is dot_general(b, a), so the
  transpose costs nothing (BLAS reads the operands transposed).

Floating-point caveat, as in XLA: x + 0 -> x turns -0.0 + 0.0 (= +0.0) into -0.0.
"""
from __future__ import annotations

from collections import Counter

import numpy as np

from ...ir import Graph
from ...ir.ops.names import CONSTANT
from .rewrite import Rebuild

FOLD_LIMIT = 64          # fold only results this small (bigger constants cost memory)


def _fold(op, operands):
    if op.opdef.needs_comm or len(op.results) != 1 or op.name == "constant" or op.opdef.fusion == "reindex":
        return None                 # (a broadcast or slice of a constant is cheaper as it is)
    if op.result.size > FOLD_LIMIT or not all(o.producer is not None and o.producer.name == "constant"
                                              for o in operands):
        return None
    with np.errstate(all="ignore"):
        val = op.opdef.ref(*[o.producer.attrs["value"] for o in operands], **op.attrs)
    val = np.array(val, dtype=op.result.dtype)
    return val if val.shape == op.result.shape else None


def simplify(graph: Graph) -> Graph:
    uses = Counter(o for op in graph.ops for o in op.operands)
    uses.update(graph.outputs)
    rb = Rebuild(graph)
    changed = False
    for op in graph.ops:
        new = _rule(rb, op, uses)
        if new is None:
            rb.copy(op)
        else:
            rb.replace(op.result, new)
            changed = True
    return rb.finish(changed)


def _rule(rb, op, uses):
    """The simpler value for op's result (in the new graph), or None to keep op."""
    if len(op.results) != 1:
        return None
    ops = [rb.value(o) for o in op.operands]
    r = op.result
    val = _fold(op, ops)
    if val is not None:
        return rb.emit(CONSTANT, loc=op.loc, sharding=r.sharding, value=val)
    rule = op.opdef.simplify
    return rule(rb, op, ops, uses) if rule is not None else None
