"""numpy's elementwise math beyond the IR's own ops, composed from them: inverse
trigonometric and hyperbolic functions (on atan2, log1p, sqrt), rounding (rint rounds
half to even, exactly), NaN/inf tests, logaddexp, copysign, isclose... All elementwise:
every split passes through with no communication. Results follow numpy's dtypes:
integer and bool inputs to float functions give float64, float32 stays float32 (NEP 50:
Python scalars are weak)."""
from __future__ import annotations

import numpy as np

from ...errors import ShapeError
from .. import numpy_api as A
from ..trace import Tracer, user_loc


def _sample(x):
    """What numpy's type resolution should see of x: a 0-d array of its dtype (strong),
    or a Python scalar (weak, NEP 50)."""
    if isinstance(x, Tracer):
        if x.weak:
            return {"bool": False, "int64": 0, "int32": 0}.get(x.value.dtype, 0.0)
        return np.zeros((), x.dtype)
    if isinstance(x, (bool, int, float)):
        return x
    return np.zeros((), np.asarray(x).dtype)


def ufunc_dtype(ufunc, *xs):
    """The dtype numpy's ufunc gives for these operands; a TypeError where spmd has no such
    dtype (float16 for bool inputs)."""
    with np.errstate(all="ignore"):
        dt = np.asarray(ufunc(*[_sample(x) for x in xs])).dtype
    if dt.name not in A.dtypes.DTYPES:
        raise TypeError(f"np.{ufunc.__name__} of {', '.join(str(np.asarray(_sample(x)).dtype) for x in xs)} "
                        f"gives {dt.name} in numpy, which spmd does not support; convert to float32 or "
                        f"float64 first (at {user_loc()})")
    return dt.name


def _f(x, ufunc):
    """x as a Tracer of numpy's float result dtype for one-argument float function `ufunc`
    (None: a numpy Python function, which converts to float64 first)."""
    x = A.asarray(x)
    return A.astype(x, ufunc_dtype(ufunc, x) if ufunc is not None else A._float_dtype(x))


def _f2(x, y, op):
    return A._promote(x, y, dtype=ufunc_dtype(getattr(np, op), x, y), op=op)


def halfs_in_f32(ufunc):
    """numpy computes its float16 loops in float32 and rounds once: a function composed of
    several ops does the same for 2-byte floats (each op would otherwise round to float16)."""
    def deco(f):
        def g(*xs):
            dt = ufunc_dtype(ufunc, *xs)
            if dt not in A.dtypes.HALFS:
                return f(*xs)
            ys = [x if isinstance(x, (bool, int, float)) else A.astype(A.asarray(x), "float32") for x in xs]
            return A.astype(f(*ys), dt)
        g.__name__, g.__doc__ = f.__name__, f.__doc__
        return g
    return deco


def _ufunc(f, name, nargs=1):
    def g(*args, **kw):
        A._no_extra(name, args[nargs:], kw)
        return f(*args[:nargs])
    g.__name__ = name
    return g


# ---------------------------------------------------------------------------- NaN and inf
def isnan(x):
    x = A.asarray(x)
    if x.dtype.kind not in "fc":
        return A.full_like(x, False, dtype="bool")
    return A.not_equal(x, x)


def isinf(x):
    x = A.asarray(x)
    if x.dtype.kind not in "fc":
        return A.full_like(x, False, dtype="bool")
    return A.equal(A.absolute(x), np.inf)


def isfinite(x):
    x = A.asarray(x)
    if x.dtype.kind not in "fc":
        return A.full_like(x, True, dtype="bool")
    # x - x is 0 for finite x, NaN for inf and NaN
    return A.equal(A.subtract(x, x), 0.0)


def _no_complex(x, name):
    if x.dtype.kind == "c":
        raise TypeError(f"np.{name} is not defined for complex numbers (at {user_loc()})")


def isposinf(x):
    x = A.asarray(x)
    _no_complex(x, "isposinf")
    return A.equal(x, np.inf) if x.dtype.kind == "f" else A.full_like(x, False, dtype="bool")


def isneginf(x):
    x = A.asarray(x)
    _no_complex(x, "isneginf")
    return A.equal(x, -np.inf) if x.dtype.kind == "f" else A.full_like(x, False, dtype="bool")


def nan_to_num(x, copy=True, nan=0.0, posinf=None, neginf=None):
    x = A.asarray(x)
    if x.dtype.kind == "c":         # numpy: the real and imaginary parts on their own
        parts = [nan_to_num(p, copy, nan, posinf, neginf) for p in (A.real(x), A.imag(x))]
        return A.add(A.astype(parts[0], x.dtype.name), A.multiply(parts[1], np.asarray(1j, x.dtype)))
    if x.dtype.kind != "f":
        return x
    info = np.finfo(x.dtype)
    hi = info.max if posinf is None else posinf
    lo = info.min if neginf is None else neginf
    y = A.where(isnan(x), A.asarray(np.asarray(nan, x.dtype), t=x._tr) if not isinstance(nan, Tracer) else nan, x)
    y = A.where(A.equal(x, np.inf), np.asarray(hi, x.dtype) if not isinstance(hi, Tracer) else hi, y)
    y = A.where(A.equal(x, -np.inf), np.asarray(lo, x.dtype) if not isinstance(lo, Tracer) else lo, y)
    return A.astype(y, x.dtype)


def signbit(x):
    x = A.asarray(x)
    if x.dtype.kind in "b":
        return A.full_like(x, False, dtype="bool")
    if x.dtype.kind in "iu":
        return A.less(x, 0)
    # -0.0 is the one negative zero: 1 / -0.0 is -inf (the sign of a NaN is not visible here)
    neg_zero = A.logical_and(A.equal(x, 0), A.less(A.true_divide(1, A.where(A.equal(x, 0), x, 1)), 0))
    return A.logical_or(A.less(x, 0), neg_zero)


def copysign(x1, x2):
    a, b = _f2(x1, x2, "copysign")
    mag = A.absolute(a)
    return A.where(signbit(b), A.negative(mag), mag)


# ---------------------------------------------------------------------------- trigonometry
def arctan2(x1, x2):
    a, b = _f2(x1, x2, "arctan2")
    return A._emit(a._tr, "atan2", a, b)


@halfs_in_f32(np.arctan)
def arctan(x):
    x = _f(x, np.arctan)
    return A._emit(x._tr, "atan2", x, A.ones_like(x))


@halfs_in_f32(np.arcsin)
def arcsin(x):
    x = _f(x, np.arcsin)
    # asin x = atan2(x, sqrt((1 - x)(1 + x))): accurate near +-1; NaN outside [-1, 1]
    return arctan2(x, A.sqrt(A.multiply(A.subtract(1, x), A.add(1, x))))


@halfs_in_f32(np.arccos)
def arccos(x):
    x = _f(x, np.arccos)
    # acos x = 2 atan2(sqrt(1 - x), sqrt(1 + x)); NaN outside [-1, 1]
    r = arctan2(A.sqrt(A.subtract(1, x)), A.sqrt(A.add(1, x)))
    return A.add(r, r)


@halfs_in_f32(np.hypot)
def hypot(x1, x2):
    a, b = _f2(x1, x2, "hypot")
    a, b = A.absolute(a), A.absolute(b)
    big, small = A.maximum(a, b), A.minimum(a, b)
    safe = A.where(A.equal(big, 0), A.ones_like(big), big)
    r = A.multiply(big, A.sqrt(A.add(1, A.square(A.true_divide(small, safe)))))
    r = A.where(A.equal(big, 0), A.zeros_like(big), r)
    # hypot(inf, anything) is inf, even with NaN
    return A.where(A.logical_or(isinf(a), isinf(b)), A.full_like(r, np.inf), r)


@halfs_in_f32(np.deg2rad)
def deg2rad(x):
    x = _f(x, np.deg2rad)
    return A.multiply(x, float(np.pi / 180.0))


@halfs_in_f32(np.rad2deg)
def rad2deg(x):
    x = _f(x, np.rad2deg)
    return A.multiply(x, float(180.0 / np.pi))


def sinc(x):
    x = _f(x, None)
    y = A.multiply(x, float(np.pi))
    zero = A.equal(y, 0)
    safe = A.where(zero, A.full_like(y, 1e-20), y)
    return A.where(zero, A.ones_like(y), A.true_divide(A.sin(safe), safe))


# ---------------------------------------------------------------------------- hyperbolic
@halfs_in_f32(np.arcsinh)
def arcsinh(x):
    x = _f(x, np.arcsinh)
    ax = A.absolute(x)
    big = A.greater(ax, 1e150 if x.dtype == np.float64 else 1e18)
    safe = A.where(big, A.ones_like(ax), ax)
    # log1p(|x| + x^2 / (1 + sqrt(1 + x^2))) is accurate near 0; log(2|x|) where x^2 overflows
    small = A.log1p(A.add(safe, A.true_divide(A.square(safe), A.add(1, A.sqrt(A.add(1, A.square(safe)))))))
    r = A.where(big, A.add(A.log(ax), float(np.log(2.0))), small)
    return A.where(signbit(x), A.negative(r), r)


@halfs_in_f32(np.arccosh)
def arccosh(x):
    x = _f(x, np.arccosh)
    big = A.greater(x, 1e150 if x.dtype == np.float64 else 1e18)
    safe = A.where(big, A.ones_like(x), x)
    t = A.subtract(safe, 1)
    # log1p(t + sqrt(2t + t^2)), t = x - 1: accurate near 1; NaN below 1
    r = A.log1p(A.add(t, A.sqrt(A.add(A.add(t, t), A.square(t)))))
    r = A.where(A.less(x, 1), np.nan, r)           # (2t + t^2 is positive again below x = -1)
    return A.where(big, A.add(A.log(x), float(np.log(2.0))), r)


@halfs_in_f32(np.arctanh)
def arctanh(x):
    x = _f(x, np.arctanh)
    # atanh x = log1p(2x / (1 - x)) / 2
    return A.multiply(A.log1p(A.true_divide(A.add(x, x), A.subtract(1, x))), 0.5)


@halfs_in_f32(np.exp2)
def exp2(x):
    x = _f(x, np.exp2)
    return A.power(A.asarray(np.asarray(2.0, x.dtype), t=x._tr), x)


@halfs_in_f32(np.cbrt)
def cbrt(x):
    x = _f(x, np.cbrt)
    ax = A.absolute(x)
    r = A.power(ax, A.asarray(np.asarray(1.0 / 3.0, x.dtype), t=x._tr))
    # one Newton step makes exact cubes exact: r -= (r^3 - a) / (3 r^2)
    rs = A.where(A.equal(r, 0), A.ones_like(r), r)
    step = A.true_divide(A.subtract(A.multiply(A.square(rs), rs), ax), A.multiply(A.square(rs), 3.0))
    r = A.where(A.logical_or(A.equal(r, 0), isinf(r)), r, A.subtract(r, step))
    return A.where(signbit(x), A.negative(r), r)


# ---------------------------------------------------------------------------- rounding
def trunc(x):
    x = A.asarray(x)
    if x.dtype.kind in "iub":
        return x
    f = A.floor(A.absolute(x))
    return A.where(signbit(x), A.negative(f), f)


def fix(x):
    return trunc(x)


def rint(x):
    x = A.asarray(x)
    dt = ufunc_dtype(np.rint, x)           # bool: float16; integers: float64
    if x.dtype.kind in "iub":
        return A.astype(x, dt)
    fl = A.floor(x)
    d = A.subtract(x, fl)              # exact
    odd = A.equal(A.subtract(fl, A.multiply(A.floor(A.multiply(fl, 0.5)), 2.0)), 1.0)
    up = A.logical_or(A.greater(d, 0.5), A.logical_and(A.equal(d, 0.5), odd))
    r = A.where(up, A.add(fl, 1.0), fl)
    # keep -0.0 for negative inputs that round to zero, as numpy does
    return A.where(A.logical_and(A.equal(r, 0), signbit(x)), A.negative(A.zeros_like(r)), r)


def round_(a, decimals=0, out=None):
    A._no_extra("round", (), {"out": out})
    x = A.asarray(a)
    if isinstance(decimals, Tracer):
        raise NotImplementedError(f"np.round with traced decimals (at {user_loc()})")
    decimals = int(decimals)
    if x.dtype.kind == "b":
        raise TypeError(f"np.round of bool gives float16 (or fails) in numpy, which spmd does not support "
                        f"(at {user_loc()})")
    if x.dtype.kind in "iu":
        if decimals >= 0:
            return x
        m = 10 ** (-decimals)
        r = rint(A.true_divide(A.astype(x, "float64"), float(m)))
        return A.astype(A.multiply(r, float(m)), x.dtype)
    if decimals == 0:
        return rint(x)
    if decimals > 0:
        s = float(10.0 ** decimals)
        return A.true_divide(rint(A.multiply(x, s)), s)
    s = float(10.0 ** -decimals)
    return A.multiply(rint(A.true_divide(x, s)), s)


def fmod(x1, x2):
    a, b = A._promote(x1, x2, op="fmod")
    if a.dtype == np.bool_:
        a, b = A.astype(a, "int8"), A.astype(b, "int8")
    return A._emit(a._tr, "remainder", a, b)


def divmod_(x1, x2):
    return A.floor_divide(x1, x2), A.mod(x1, x2)


# ---------------------------------------------------------------------------- log-sum
def _logaddexp(x1, x2, base2):
    a, b = _f2(x1, x2, "logaddexp2" if base2 else "logaddexp")
    m = A.maximum(a, b)
    d = A.negative(A.absolute(A.subtract(a, b)))
    if base2:
        r = A.add(m, A.true_divide(A.log1p(exp2(d)), float(np.log(2.0))))
    else:
        r = A.add(m, A.log1p(A.exp(d)))
    # equal infinities: x - y is NaN, numpy gives the infinity
    return A.where(A.logical_and(A.equal(a, b), isinf(a)), a, r)


@halfs_in_f32(np.logaddexp)
def logaddexp(x1, x2):
    return _logaddexp(x1, x2, False)


@halfs_in_f32(np.logaddexp2)
def logaddexp2(x1, x2):
    return _logaddexp(x1, x2, True)


def heaviside(x1, x2):
    a, b = _f2(x1, x2, "heaviside")
    r = A.where(A.less(a, 0), A.zeros_like(a), A.where(A.greater(a, 0), A.ones_like(a), b))
    return A.where(isnan(a), a, r)


# ---------------------------------------------------------------------------- closeness
def isclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    t = A._trace(a, b)
    dt = A.result_dtype(a, b, 1.0)
    x, y = A._promote(A.asarray(a, t=t), A.asarray(b, t=t), dtype=dt, op="isclose")
    close = A.less_equal(A.absolute(A.subtract(x, y)), A.add(atol, A.multiply(rtol, A.absolute(y))))
    fin = A.logical_and(isfinite(x), isfinite(y))
    r = A.logical_or(A.logical_and(fin, close), A.logical_and(A.logical_not(fin), A.equal(x, y)))
    if equal_nan:
        r = A.logical_or(r, A.logical_and(isnan(x), isnan(y)))
    return r


def allclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    return A.all(isclose(a, b, rtol, atol, equal_nan))


def array_equal(a1, a2, equal_nan=False):
    t = A._trace(a1, a2)
    x, y = A.asarray(a1, t=t), A.asarray(a2, t=t)
    if x.shape != y.shape:
        return A.asarray(False, t=t)
    eq = A.equal(x, y)
    if equal_nan:
        eq = A.logical_or(eq, A.logical_and(isnan(x), isnan(y)))
    return A.all(eq)


# ---------------------------------------------------------------------------- select
def select(condlist, choicelist, default=0):
    condlist, choicelist = list(condlist), list(choicelist)
    if len(condlist) != len(choicelist):
        raise ValueError(f"select: list of cases must be same length as list of conditions (at {user_loc()})")
    if not condlist:
        raise ValueError(f"select with an empty condition list is not possible (at {user_loc()})")
    t = A._trace(*condlist, *choicelist, default)
    for c in condlist:
        c = A.asarray(c, t=t)
        if c.dtype != np.bool_:
            raise TypeError(f"select: invalid entry in condlist: should be boolean ndarray (at {user_loc()})")
    dt = A.result_dtype(*choicelist, default)
    out = A.asarray(default, dt, t)
    for c, v in reversed(list(zip(condlist, choicelist))):
        out = A.where(c, A.asarray(v, dt, t), out)
    shape = np.broadcast_shapes(*[A.asarray(c, t=t).shape for c in condlist], *[A.asarray(v, t=t).shape
                                                                            for v in choicelist])
    return A.broadcast_to(out, np.broadcast_shapes(shape, out.shape))


__all__ = ["ShapeError"]
