"""dot_general: batch dims, contracting dims, free dims (StableHLO). The result's dims
are batch, then lhs free, then rhs free, each in operand order."""
import math

import numpy as np

from ..factors import einsum_rule, letters
from .elementwise import aval
from .names import DOT_GENERAL, TRANSPOSE
from .registry import OpDef, check, register


def dims(lhs_ndim, rhs_ndim, lhs_batch, rhs_batch, lhs_contract, rhs_contract):
    lf = [d for d in range(lhs_ndim) if d not in lhs_batch and d not in lhs_contract]
    rf = [d for d in range(rhs_ndim) if d not in rhs_batch and d not in rhs_contract]
    return lf, rf


def _infer(lhs, rhs, lhs_batch, rhs_batch, lhs_contract, rhs_contract):
    check(lhs.dtype == rhs.dtype, f"operand dtypes differ: {lhs.dtype} vs {rhs.dtype}")
    check(lhs.dtype != "bool", "dot_general of bool: convert first")
    check(len(lhs_batch) == len(rhs_batch) and len(lhs_contract) == len(rhs_contract),
          "batch and contracting dims must pair up")
    for a, nd, side in ((lhs_batch + lhs_contract, len(lhs.shape), "lhs"),
                        (rhs_batch + rhs_contract, len(rhs.shape), "rhs")):
        check(len(set(a)) == len(a) and all(0 <= d < nd for d in a), f"{side} dims {list(a)} invalid for rank {nd}")
    for a, b in zip(lhs_batch, rhs_batch):
        check(lhs.shape[a] == rhs.shape[b], f"batch dims differ: lhs dim {a} is {lhs.shape[a]}, "
                                            f"rhs dim {b} is {rhs.shape[b]}")
    for a, b in zip(lhs_contract, rhs_contract):
        check(lhs.shape[a] == rhs.shape[b], f"contracting dims differ: lhs dim {a} is {lhs.shape[a]}, "
                                            f"rhs dim {b} is {rhs.shape[b]}")
    lf, rf = dims(len(lhs.shape), len(rhs.shape), lhs_batch, rhs_batch, lhs_contract, rhs_contract)
    shape = [lhs.shape[d] for d in lhs_batch] + [lhs.shape[d] for d in lf] + [rhs.shape[d] for d in rf]
    return aval(shape, lhs.dtype)


def _prod(xs):
    return math.prod(int(x) for x in xs)


def _ref(lhs, rhs, lhs_batch, rhs_batch, lhs_contract, rhs_contract):
    lf, rf = dims(lhs.ndim, rhs.ndim, lhs_batch, rhs_batch, lhs_contract, rhs_contract)
    bs = [lhs.shape[d] for d in lhs_batch]
    ms, ns = [lhs.shape[d] for d in lf], [rhs.shape[d] for d in rf]
    k = _prod([lhs.shape[d] for d in lhs_contract])
    a = np.transpose(lhs, list(lhs_batch) + lf + list(lhs_contract)).reshape(_prod(bs), _prod(ms), k)
    b = np.transpose(rhs, list(rhs_batch) + list(rhs_contract) + rf).reshape(_prod(bs), k, _prod(ns))
    if lhs.dtype.name in ("float16", "bfloat16"):
        # 2-byte floats multiply in float32 (BLAS has no half gemm) and round once
        a, b = a.astype(np.float32), b.astype(np.float32)
    return np.matmul(a, b).reshape(bs + ms + ns).astype(lhs.dtype, copy=False)


def _vjp(g, op, ct):
    lhs, rhs = op.operands
    lb, rb, lc, rc = (op.attrs[k] for k in ("lhs_batch", "rhs_batch", "lhs_contract", "rhs_contract"))
    lf, rf = dims(lhs.ndim, rhs.ndim, lb, rb, lc, rc)
    nb, nl, nr = len(lb), len(lf), len(rf)
    ct_b = tuple(range(nb))
    ct_l = tuple(range(nb, nb + nl))
    ct_r = tuple(range(nb + nl, nb + nl + nr))
    # d rhs first: in x @ w (numpy's layout, weights on the right) it is the weight's
    # gradient, the last read of the activation x, which is then free before d lhs (the
    # size of x) is made; the other order holds both at once
    t = g.emit(DOT_GENERAL, ct, lhs, lhs_batch=ct_b, rhs_batch=lb, lhs_contract=ct_l, rhs_contract=tuple(lf))
    order = list(rb) + rf + [rc[k] for k in np.argsort(lc)]
    dr = t if order == list(range(rhs.ndim)) else g.emit(TRANSPOSE, t, permutation=tuple(np.argsort(order)))
    # d lhs: contract ct's rhs-free dims with rhs's free dims
    t = g.emit(DOT_GENERAL, ct, rhs, lhs_batch=ct_b, rhs_batch=rb, lhs_contract=ct_r, rhs_contract=tuple(rf))
    order = list(lb) + lf + [lc[k] for k in np.argsort(rc)]
    dl = t if order == list(range(lhs.ndim)) else g.emit(TRANSPOSE, t, permutation=tuple(np.argsort(order)))
    return dl, dr


def _factors(ins, outs, attrs):
    lhs, rhs = ins
    lb, rb, lc, rc = (attrs[k] for k in ("lhs_batch", "rhs_batch", "lhs_contract", "rhs_contract"))
    lf, rf = dims(len(lhs.shape), len(rhs.shape), lb, rb, lc, rc)
    pool = iter(letters(26))
    L, R = [""] * len(lhs.shape), [""] * len(rhs.shape)
    out = ""
    for a, b in zip(lb, rb):
        L[a] = R[b] = c = next(pool)
        out += c
    for a, b in zip(lc, rc):
        L[a] = R[b] = next(pool)
    red = "".join(L[a] for a in lc)
    for a in lf:
        L[a] = c = next(pool)
        out += c
    for b in rf:
        R[b] = c = next(pool)
        out += c
    return einsum_rule(f"{''.join(L)},{''.join(R)}->{out}", ins, outs, reduction=red)


def _flops(ins, out, attrs):
    k = _prod([ins[0].shape[d] for d in attrs["lhs_contract"]])
    return 2 * k * _prod(out.shape)


register(OpDef("dot_general", family="dot", infer=_infer, ref=_ref, vjp=_vjp, factors=_factors, flops=_flops,
               dtypes=("float32", "float64", "int32", "int64", "float16", "bfloat16", "complex64", "complex128"),
               priority=1, linear=((0,), (1,)),
               reduction_kind=lambda attrs: "sum", lowering="matmul"))
