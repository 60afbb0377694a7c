"""sort and argsort along one axis (numpy's, stable: equal elements keep their order,
NaN sorts last), and atan2 (the one elementwise function the numpy layer cannot
compose from others: arctan, arcsin and arccos are built on it).

Sharding: the sorted axis is a `replicate` factor -- a device needs the whole axis, so a
split one is gathered first (the partitioner warns, naming the op and the user's line);
every other dim passes through, so sorting rows of a row-split array is local.
"""
import numpy as np

from ..factors import einsum_rule, letters
from .elementwise import FLOAT, NUM, aval, binary, const_like
from .names import (
    ADD, ARGSORT, BROADCAST_IN_DIM, COMPARE, DIVIDE, IOTA, MULTIPLY, NEGATE, REDUCE, SELECT,
    TRANSPOSE
)
from .registry import OpDef, check, register

WHY = "it needs the whole sorted axis on every device"


def _sort_infer(x, axis):
    check(0 <= axis < len(x.shape), f"axis {axis} out of range for rank {len(x.shape)}")
    return aval(x.shape, x.dtype)


def _argsort_infer(x, axis):
    _sort_infer(x, axis)
    return aval(x.shape, "int64")


def _sort_factors(ins, outs, attrs):
    a = letters(len(ins[0].shape))
    return einsum_rule(f"{a}->{a}", ins, outs, replicate=a[attrs["axis"]])


def _nlogn(ins, out, attrs):
    n = ins[0].shape[attrs["axis"]]
    return int(np.prod(ins[0].shape, dtype=np.int64)) * max(1, int(np.ceil(np.log2(max(n, 1)))))


def _sort_vjp(g, op, ct):
    """The cotangent goes back to where each sorted element came from: a one-hot of the
    stable permutation (n^2 per sorted line; fine for the sizes one differentiates)."""
    x = op.operands[0]
    ax = op.attrs["axis"]
    perm = g.emit(ARGSORT, x, axis=ax)                 # sorted position j came from perm[j]
    nd = x.ndim
    n = x.shape[ax]
    # (..., j, ..., i): one-hot[j, i] = perm[j] == i, the new dim i last
    shape = tuple(x.shape) + (n,)
    pb = g.emit(BROADCAST_IN_DIM, perm, shape=shape, broadcast_dimensions=tuple(range(nd)))
    i = g.emit(IOTA, shape=shape, dtype="int64", dimension=nd)
    hot = g.emit(COMPARE, pb, i, direction="EQ")
    cb = g.emit(BROADCAST_IN_DIM, ct, shape=shape, broadcast_dimensions=tuple(range(nd)))
    contrib = g.emit(SELECT, hot, cb, const_like(g, cb, 0))
    s = g.emit(REDUCE, contrib, kind="sum", axes=(ax,))         # (..., i) with axis ax dropped
    # move the trailing i back to position ax
    rest = list(range(nd - 1))
    perm_back = tuple(rest[:ax] + [nd - 1] + rest[ax:])
    return (s if perm_back == tuple(range(nd)) else g.emit(TRANSPOSE, s, permutation=perm_back),)


register(OpDef("sort", family="sort", infer=_sort_infer, ref=lambda x, axis: np.sort(x, axis=axis, kind="stable"),
               vjp=_sort_vjp, factors=_sort_factors, flops=_nlogn, dtypes=NUM + ("bool",), needs_whole=WHY,
               lowering="sorting"))
register(OpDef("argsort", family="sort", infer=_argsort_infer,
               ref=lambda x, axis: np.argsort(x, axis=axis, kind="stable").astype(np.int64),
               factors=_sort_factors, flops=_nlogn, dtypes=NUM + ("bool",), needs_whole=WHY, lowering="sorting"))


def _atan2_vjp(g, op, ct):
    y, x = op.operands
    r2 = g.emit(ADD, g.emit(MULTIPLY, x, x), g.emit(MULTIPLY, y, y))
    return (g.emit(DIVIDE, g.emit(MULTIPLY, ct, x), r2),
            g.emit(NEGATE, g.emit(DIVIDE, g.emit(MULTIPLY, ct, y), r2)))


def _atan2_ref(y, x):
    with np.errstate(all="ignore"):
        return np.asarray(np.arctan2(y, x), dtype=y.dtype)


def _atan2_scalar(b, y, x):
    return b._call("atan2f" if y.dtype == "float32" else "atan2", y.dtype, y, x)


binary("atan2", _atan2_ref, _atan2_vjp, FLOAT, scalar=_atan2_scalar, flops=(1400, 1200))
