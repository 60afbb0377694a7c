"""reduce: sum, max, min or prod over a set of axes. The result keeps the operand's
dtype; numpy's promotion of integer sums is done by the tracer with a convert."""
import math

import numpy as np

from ..factors import einsum_rule, letters
from .elementwise import aval
from .names import (
    AND, BROADCAST_IN_DIM, COMPARE, CONVERT, CUMULATIVE, DIVIDE, MULTIPLY, REDUCE, SELECT
)
from .registry import OpDef, check, register

HALFS = ("float16", "bfloat16")

KINDS = ("sum", "max", "min", "prod")


def _infer(x, kind, axes):
    check(kind in KINDS, f"unknown reduction {kind!r} (takes {', '.join(KINDS)})")
    check(list(axes) == sorted(set(axes)) and all(0 <= a < len(x.shape) for a in axes),
          f"axes {list(axes)} must be increasing and < rank {len(x.shape)}")
    check(not (x.dtype == "bool" and kind in ("sum", "prod")), f"{kind} of bool: convert first")
    check(not (x.dtype.startswith("complex") and kind in ("max", "min")),
          f"{kind} of {x.dtype}: complex numbers have no order")
    return aval(tuple(s for d, s in enumerate(x.shape) if d not in axes), x.dtype)


def identity(kind, dtype):
    """The value a reduction of nothing gives (StableHLO's init value)."""
    dt = np.dtype(dtype)
    if kind == "sum":
        return dt.type(0)
    if kind == "prod":
        return dt.type(1)
    if dt == np.bool_:
        return np.bool_(kind == "min")
    if dt.kind == "f" or dt.name == "bfloat16":
        return dt.type(-np.inf if kind == "max" else np.inf)
    info = np.iinfo(dt)
    return dt.type(info.min if kind == "max" else info.max)


def _ref(x, kind, axes):
    f = {"sum": np.sum, "max": np.max, "min": np.min, "prod": np.prod}[kind]
    if x.dtype.name in HALFS and kind in ("sum", "prod"):
        # 2-byte floats accumulate in float32 (numpy's float16 sum adds in float16), as the
        # native kernels and XLA do, and round once at the end
        return np.asarray(f(x, axis=tuple(axes), dtype=np.float32)).astype(x.dtype)
    kw = {"dtype": x.dtype} if kind in ("sum", "prod") else {"initial": identity(kind, x.dtype)}
    return np.asarray(f(x, axis=tuple(axes), **kw), dtype=x.dtype)


def _vjp(g, op, ct):
    x = op.operands[0]
    kind, axes = op.attrs["kind"], op.attrs["axes"]
    kept = tuple(d for d in range(x.ndim) if d not in axes)

    def back(v):
        return g.emit(BROADCAST_IN_DIM, v, shape=x.shape, broadcast_dimensions=kept)

    if kind == "sum":
        return (back(ct),)
    if kind == "prod":
        return (g.emit(MULTIPLY, back(ct), _prod_others(g, x, axes, back)),)
    # max / min: to the elements equal to the result, split evenly among ties
    mask = g.emit(CONVERT, g.emit(COMPARE, x, back(op.result), direction="EQ"), dtype=x.dtype)
    count = g.emit(REDUCE, mask, kind="sum", axes=axes)
    return (g.emit(MULTIPLY, back(g.emit(DIVIDE, ct, count)), mask),)


def _prod_others(g, x, axes, back):
    """d prod / d x_i = the product of the other elements, also where x has zeros: with
    no zero it is prod / x_i; with one zero it is the product of the non-zeros at the
    zero and 0 elsewhere; with two or more zeros it is 0."""
    from .elementwise import const_like
    zero = g.emit(COMPARE, x, const_like(g, x, 0), direction="EQ")
    safe = g.emit(SELECT, zero, const_like(g, x, 1), x)
    prod_nz = back(g.emit(REDUCE, safe, kind="prod", axes=axes))
    n_zero = back(g.emit(REDUCE, g.emit(CONVERT, zero, dtype=x.dtype), kind="sum", axes=axes))
    no_zero = g.emit(COMPARE, n_zero, const_like(g, x, 0), direction="EQ")
    one_zero = g.emit(COMPARE, n_zero, const_like(g, x, 1), direction="EQ")
    at_the_zero = g.emit(AND, one_zero, zero)
    other = g.emit(SELECT, at_the_zero, prod_nz, const_like(g, x, 0))
    return g.emit(SELECT, no_zero, g.emit(DIVIDE, prod_nz, safe), other)


def _factors(ins, outs, attrs):
    a = letters(len(ins[0].shape))
    axes = attrs["axes"]
    return einsum_rule(a + "->" + "".join(c for d, c in enumerate(a) if d not in axes), ins, outs,
                       reduction="".join(a[d] for d in axes))


register(OpDef("reduce", family="reduce", infer=_infer, ref=_ref, vjp=_vjp, factors=_factors,
               flops=lambda ins, out, attrs: math.prod(int(d) for d in ins[0].shape),
               dtypes=("float32", "float64", "int32", "int64", "bool", "float16", "bfloat16", "complex64", "complex128"),
               priority=1, fusion="reduction", lowering="accumulate",
               linear=lambda op: [(0,)] if op.attrs["kind"] == "sum" else [],
               reduction_kind=lambda attrs: attrs["kind"],
               simplify=lambda rb, op, ops, uses: ops[0] if not op.attrs["axes"] else None))


# -- cumulative: inclusive prefix (or, reversed, suffix) reductions along one axis ------------
_ACCUMULATE = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}


def _cum_infer(x, kind, axis, reverse):
    check(kind in KINDS, f"unknown reduction {kind!r} (takes {', '.join(KINDS)})")
    check(0 <= axis < len(x.shape), f"axis {axis} out of range for rank {len(x.shape)}")
    check(x.dtype != "bool", f"cumulative {kind} of bool: convert first")
    return aval(x.shape, x.dtype)


def _cum_ref(x, kind, axis, reverse):
    f = _ACCUMULATE[kind].accumulate
    with np.errstate(all="ignore"):
        if reverse:
            return np.flip(f(np.flip(x, axis), axis=axis, dtype=x.dtype), axis).copy()
        return np.asarray(f(x, axis=axis, dtype=x.dtype), dtype=x.dtype)


def _cum_vjp(g, op, ct):
    # y_i = sum_{j<=i} x_j, so dx_j = sum_{i>=j} ct_i: the same scan run the other way.
    # (cumprod/cummax/cummin have no VJP here: autodiff says so rather than guess.)
    a = op.attrs
    if a["kind"] != "sum":
        from ...errors import TraceError
        raise TraceError(f"grad of a cumulative {a['kind']} at {op.loc} is not supported "
                         f"(only cumsum's is)")
    return (g.emit(CUMULATIVE, ct, kind="sum", axis=a["axis"], reverse=not a["reverse"]),)


def _cum_factors(ins, outs, attrs):
    # every dim passes through; a split scan axis is its partition rule's business
    # (sharding/partition_rules/reduce.py)
    a = letters(len(ins[0].shape))
    return einsum_rule(f"{a}->{a}", ins, outs)


register(OpDef("cumulative", family="reduce", infer=_cum_infer, ref=_cum_ref, vjp=_cum_vjp, factors=_cum_factors,
               flops=lambda ins, out, attrs: math.prod(int(d) for d in out.shape),
               dtypes=("float32", "float64", "int32", "int64", "float16", "bfloat16"), priority=0,
               linear=lambda op: [(0,)] if op.attrs["kind"] == "sum" else [], lowering="prefix_scan"))
