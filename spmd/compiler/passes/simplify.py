"""Algebraic simplification and constant folding.

- constant folding: an op whose operands are all constants and whose result is small is
  replaced by its value (computed by the op's numpy reference);
- identities: x+0, 0+x, x-0, x*1, 1*x, x/1, --x, select(p, x, x), a select on a constant
  predicate, x**1, x**2 -> x*x, x**3 -> x*x*x, x**-1 -> 1/x;
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
from ...ir.ops.dot import dims as dot_dims
from .fuse import splat
from .rewrite import Rebuild

FOLD_LIMIT = 64          # fold only results this small (bigger constants cost memory)


def _is(v, c):
    s = splat(v)
    if s is None:
        return False
    with np.errstate(all="ignore"):
        return bool(s == c)


def _fold(op, operands):
    if op.opdef.needs_comm or len(op.results) != 1 or op.name == "constant":
        return None
    if op.result.size > FOLD_LIMIT or not all(o.producer is not None and o.producer.name == "constant"
                                              for o in operands):
        return None
    with np.errstate(all="ignore"):
        val = op.opdef.ref(*[o.producer.attrs["value"] for o in operands], **op.attrs)
    val = np.array(val, dtype=op.result.dtype)
    return val if val.shape == op.result.shape else None


def _dot_swap(rb, op, x):
    """transpose(dot(a, b)) -> dot(b, a) when the permutation swaps the lhs-free and
    rhs-free blocks of a dot without batch dims."""
    lb, rb_, lc, rc = (x.producer.attrs[k] for k in ("lhs_batch", "rhs_batch", "lhs_contract", "rhs_contract"))
    if lb:
        return None
    a, b = x.producer.operands
    lf, rf = dot_dims(a.ndim, b.ndim, lb, rb_, lc, rc)
    nl, nr = len(lf), len(rf)
    if tuple(op.attrs["permutation"]) != tuple(range(nl, nl + nr)) + tuple(range(nl)):
        return None
    return rb.emit("dot_general", b, a, loc=x.producer.loc, sharding=op.result.sharding,
                   lhs_batch=(), rhs_batch=(), lhs_contract=tuple(rc), rhs_contract=tuple(lc))


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
        return rb.emit("constant", loc=op.loc, sharding=r.sharding, value=val)
    name, a = op.name, op.attrs
    x = ops[0] if ops else None
    same = x is not None and x.shape == r.shape and x.dtype == r.dtype
    if name == "add":
        if _is(ops[1], 0):
            return x
        if _is(x, 0):
            return ops[1]
    elif name == "subtract" and _is(ops[1], 0):
        return x
    elif name == "multiply":
        if _is(ops[1], 1):
            return x
        if _is(x, 1):
            return ops[1]
    elif name == "divide" and _is(ops[1], 1):
        return x
    elif name == "power" and r.dtype in ("float32", "float64"):
        e = splat(ops[1])
        if e is not None:
            e = float(e)
            mul = lambda p, q: rb.emit("multiply", p, q, loc=op.loc, sharding=r.sharding)  # noqa: E731
            if e == 1:
                return x
            if e == 2:
                return mul(x, x)
            if e == 3:
                return mul(mul(x, x), x)
            if e == -1:
                one = rb.emit("broadcast_in_dim", rb.emit("constant", value=np.array(1, r.dtype)),
                              shape=r.shape, broadcast_dimensions=())
                return rb.emit("divide", one, x, loc=op.loc, sharding=r.sharding)
    elif name == "negate" and x.producer is not None and x.producer.name == "negate":
        return x.producer.operands[0]
    elif name == "select":
        if ops[1] is ops[2]:
            return ops[1]
        p = splat(x)
        if p is not None:
            return ops[1] if p else ops[2]
    elif name == "convert" and same:
        return x
    elif name == "reshape":
        if same:
            return x
        if x.producer is not None and x.producer.name == "reshape":
            inner = x.producer.operands[0]
            if inner.shape == r.shape:
                return inner
            return rb.emit("reshape", x.producer.operands[0], loc=op.loc, sharding=r.sharding, shape=r.shape)
    elif name == "transpose":
        perm = tuple(a["permutation"])
        if perm == tuple(range(len(perm))):
            return x
        if x.producer is not None and x.producer.name == "transpose":
            inner = x.producer.attrs["permutation"]
            composed = tuple(inner[p] for p in perm)
            if composed == tuple(range(len(perm))):
                return x.producer.operands[0]
            return rb.emit("transpose", x.producer.operands[0], loc=op.loc, sharding=r.sharding,
                           permutation=composed)
        if x.producer is not None and x.producer.name == "dot_general" and uses[op.operands[0]] == 1:
            return _dot_swap(rb, op, x)
    elif name == "broadcast_in_dim":
        if same and tuple(a["broadcast_dimensions"]) == tuple(range(x.ndim)):
            return x
    elif name == "slice":
        if same and all(s == 0 for s in a["start"]) and all(s == 1 for s in a["stride"]):
            return x
    elif name == "reduce" and not a["axes"]:
        return x
    return None
