"""numpy's elementwise math of real numbers beyond the IR's own ops, composed from them
(complex arguments: complex_math.py): expm1, log2,
sinh and cosh (accurate near 0), inverse trigonometric and hyperbolic functions (on
atan2, log1p, sqrt), rounding (rint rounds half to even, exactly), NaN/inf tests,
logaddexp, isclose... All elementwise:
every split passes through with no communication. Results follow numpy's dtypes:
integer and bool inputs to float functions give float64, float32 stays float32 (NEP 50:
Python scalars are weak)."""
from __future__ import annotations

import numpy as np

from ...errors import user_loc
from ...ir import dtypes
from ...ir.ops.names import ATAN2, REMAINDER
from .. import core, reductions as red
from .. import elementwise as ew
from ..trace import Tracer


def _f(x, ufunc):
    """x as a Tracer of numpy's float result dtype for one-argument float function `ufunc`
    (None: a numpy Python function, which converts to float64 first)."""
    x = core.asarray(x)
    return core.astype(x, core.ufunc_dtype(ufunc, x) if ufunc is not None else core.float_dtype(x))


def _f2(x, y, op):
    return core.promote(x, y, dtype=core.ufunc_dtype(getattr(np, op), x, y), op=op)


def halfs_in_f32(ufunc):
    """numpy computes its float16 loops in float32 and rounds once: a function composed of
    several ops does the same for 2-byte floats (each op would otherwise round to float16)."""
    def deco(f):
        def g(*xs):
            dt = core.ufunc_dtype(ufunc, *xs)
            if dt not in dtypes.HALFS:
                return f(*xs)
            ys = [x if isinstance(x, (bool, int, float)) else core.astype(core.asarray(x), "float32") for x in xs]
            return core.astype(f(*ys), dt)
        g.__name__, g.__doc__ = f.__name__, f.__doc__
        return g
    return deco


def _ufunc(f, name, nargs=1):
    def g(*args, **kw):
        core.no_extra(name, args[nargs:], kw)
        return f(*args[:nargs])
    g.__name__ = name
    return g


# ---------------------------------------------------------------------------- NaN and inf
def isnan(x):
    x = core.asarray(x)
    if x.dtype.kind not in "fc":
        return core.full_like(x, False, dtype="bool")
    return ew.not_equal(x, x)


def isinf(x):
    x = core.asarray(x)
    if x.dtype.kind not in "fc":
        return core.full_like(x, False, dtype="bool")
    return ew.equal(ew.absolute(x), np.inf)


def isfinite(x):
    x = core.asarray(x)
    if x.dtype.kind not in "fc":
        return core.full_like(x, True, dtype="bool")
    # x - x is 0 for finite x, NaN for inf and NaN
    return ew.equal(ew.subtract(x, x), 0.0)


def _no_complex(x, name):
    if x.dtype.kind == "c":
        raise TypeError(f"np.{name} is not defined for complex numbers (at {user_loc()})")


def isposinf(x):
    x = core.asarray(x)
    _no_complex(x, "isposinf")
    return ew.equal(x, np.inf) if x.dtype.kind == "f" else core.full_like(x, False, dtype="bool")


def isneginf(x):
    x = core.asarray(x)
    _no_complex(x, "isneginf")
    return ew.equal(x, -np.inf) if x.dtype.kind == "f" else core.full_like(x, False, dtype="bool")


def nan_to_num(x, copy=True, nan=0.0, posinf=None, neginf=None):
    x = core.asarray(x)
    if x.dtype.kind == "c":         # numpy: the real and imaginary parts on their own
        parts = [nan_to_num(p, copy, nan, posinf, neginf) for p in (ew.real(x), ew.imag(x))]
        return ew.add(core.astype(parts[0], x.dtype.name), ew.multiply(parts[1], np.asarray(1j, x.dtype)))
    if x.dtype.kind != "f":
        return x
    info = np.finfo(x.dtype)
    hi = info.max if posinf is None else posinf
    lo = info.min if neginf is None else neginf
    y = ew.where(isnan(x), core.asarray(np.asarray(nan, x.dtype), t=x._tr) if not isinstance(nan, Tracer) else nan, x)
    y = ew.where(ew.equal(x, np.inf), np.asarray(hi, x.dtype) if not isinstance(hi, Tracer) else hi, y)
    y = ew.where(ew.equal(x, -np.inf), np.asarray(lo, x.dtype) if not isinstance(lo, Tracer) else lo, y)
    return core.astype(y, x.dtype)


# ---------------------------------------------------------------------------- exp, log and hyperbolic
def expm1(x):
    """exp(x) - 1, accurate near 0 (Kahan: (u - 1) * x / log(u), u = exp(x)), where a plain
    exp(x) - 1 loses every digit (expm1(1e-20) is 1e-20, not 0)."""
    x = core.asarray(x)
    if core.ufunc_float_dtype(x) in dtypes.HALFS:       # numpy: in float32, rounded once
        return core.astype(expm1(core.astype(x, "float32")), core.ufunc_float_dtype(x))
    x = core.asarray(x, core.ufunc_float_dtype(x))
    u = ew.exp(x)
    um1 = ew.subtract(u, 1)
    # the formula where it is well defined; elsewhere it runs on a harmless x (0.5), so its
    # gradient there is finite and the select's zero cotangent stays zero (0 * inf is NaN)
    good = ew.logical_and(ew.logical_and(ew.not_equal(u, 1), ew.not_equal(um1, -1)), isfinite(u))
    xs = ew.where(good, x, 0.5)
    us = ew.exp(xs)
    r = ew.multiply(ew.subtract(us, 1), ew.true_divide(xs, ew.log(us)))
    # |x| tiny: x itself (keeps -0.0); x very negative: -1; inf, nan: exp(x) - 1 is exact
    return ew.where(good, r, ew.where(ew.equal(u, 1), x, um1))


@halfs_in_f32(np.log2)
def log2(x): return ew.true_divide(ew.log(x), float(np.log(2.0)))     # a Python float stays weak


@halfs_in_f32(np.log10)
def log10(x): return ew.true_divide(ew.log(x), float(np.log(10.0)))


@halfs_in_f32(np.tan)
def tan(x): return ew.true_divide(ew.sin(x), ew.cos(x))


def sinh(x):
    """(e^x - e^-x) / 2 from expm1, so it is accurate near 0 (sinh(1e-20) is 1e-20, -0.0
    stays -0.0); the float conversion comes first (negating INT_MIN would wrap)."""
    x = core.asarray(x)
    if core.ufunc_float_dtype(x) in dtypes.HALFS:       # numpy: in float32, rounded once
        return core.astype(sinh(core.astype(x, "float32")), core.ufunc_float_dtype(x))
    x = core.asarray(x, core.ufunc_float_dtype(x))
    big = big_hyperbolic(x)
    xs = ew.where(big, 0.0, x)                 # (finite gradients in the branch not taken)
    r = ew.true_divide(ew.subtract(expm1(xs), expm1(ew.negative(xs))), 2)
    return ew.where(big, ew.copysign(half_exp(x), x), r)


def big_hyperbolic(x):
    """|x| where e^-|x| is below half an ulp of e^|x| (and NaN): sinh and cosh are
    e^|x| / 2 there."""
    return ew.logical_not(ew.less_equal(ew.absolute(x), 20.0 if x.dtype == np.float64 else 9.0))


def half_exp(x):
    """e^|x| / 2 as t * (t / 2), t = e^(|x|/2): finite up to the largest float (e^710 / 2
    is, though e^710 overflows)."""
    t = ew.exp(ew.multiply(ew.absolute(x), 0.5))
    return ew.multiply(t, ew.multiply(t, 0.5))


def cosh(x):
    x = core.asarray(x)
    if core.ufunc_float_dtype(x) in dtypes.HALFS:       # numpy: in float32, rounded once
        return core.astype(cosh(core.astype(x, "float32")), core.ufunc_float_dtype(x))
    x = core.asarray(x, core.ufunc_float_dtype(x))
    big = big_hyperbolic(x)
    xs = ew.where(big, 0.0, x)
    r = ew.true_divide(ew.add(ew.exp(xs), ew.exp(ew.negative(xs))), 2)
    return ew.where(big, half_exp(x), r)


# ---------------------------------------------------------------------------- trigonometry
def arctan2(x1, x2):
    a, b = _f2(x1, x2, "arctan2")
    return core.emit(a._tr, ATAN2, a, b)


@halfs_in_f32(np.arctan)
def arctan(x):
    x = _f(x, np.arctan)
    return core.emit(x._tr, ATAN2, x, core.ones_like(x))


@halfs_in_f32(np.arcsin)
def arcsin(x):
    x = _f(x, np.arcsin)
    # asin x = atan2(x, sqrt((1 - x)(1 + x))): accurate near +-1; NaN outside [-1, 1]
    return arctan2(x, ew.sqrt(ew.multiply(ew.subtract(1, x), ew.add(1, x))))


@halfs_in_f32(np.arccos)
def arccos(x):
    x = _f(x, np.arccos)
    # acos x = 2 atan2(sqrt(1 - x), sqrt(1 + x)); NaN outside [-1, 1]
    r = arctan2(ew.sqrt(ew.subtract(1, x)), ew.sqrt(ew.add(1, x)))
    return ew.add(r, r)


@halfs_in_f32(np.hypot)
def hypot(x1, x2):
    a, b = _f2(x1, x2, "hypot")
    a, b = ew.absolute(a), ew.absolute(b)
    big, small = ew.maximum(a, b), ew.minimum(a, b)
    safe = ew.where(ew.equal(big, 0), core.ones_like(big), big)
    r = ew.multiply(big, ew.sqrt(ew.add(1, ew.square(ew.true_divide(small, safe)))))
    r = ew.where(ew.equal(big, 0), core.zeros_like(big), r)
    # hypot(inf, anything) is inf, even with NaN
    return ew.where(ew.logical_or(isinf(a), isinf(b)), core.full_like(r, np.inf), r)


@halfs_in_f32(np.deg2rad)
def deg2rad(x):
    x = _f(x, np.deg2rad)
    return ew.multiply(x, float(np.pi / 180.0))


@halfs_in_f32(np.rad2deg)
def rad2deg(x):
    x = _f(x, np.rad2deg)
    return ew.multiply(x, float(180.0 / np.pi))


def sinc(x):
    x = _f(x, None)
    y = ew.multiply(x, float(np.pi))
    zero = ew.equal(y, 0)
    safe = ew.where(zero, core.full_like(y, 1e-20), y)
    return ew.where(zero, core.ones_like(y), ew.true_divide(ew.sin(safe), safe))


# ---------------------------------------------------------------------------- hyperbolic
@halfs_in_f32(np.arcsinh)
def arcsinh(x):
    x = _f(x, np.arcsinh)
    ax = ew.absolute(x)
    big = ew.greater(ax, 1e150 if x.dtype == np.float64 else 1e18)
    safe = ew.where(big, core.ones_like(ax), ax)
    # log1p(|x| + x^2 / (1 + sqrt(1 + x^2))) is accurate near 0; log(2|x|) where x^2 overflows
    small = ew.log1p(ew.add(safe, ew.true_divide(ew.square(safe), ew.add(1, ew.sqrt(ew.add(1, ew.square(safe)))))))
    r = ew.where(big, ew.add(ew.log(ax), float(np.log(2.0))), small)
    return ew.where(ew.signbit(x), ew.negative(r), r)


@halfs_in_f32(np.arccosh)
def arccosh(x):
    x = _f(x, np.arccosh)
    big = ew.greater(x, 1e150 if x.dtype == np.float64 else 1e18)
    safe = ew.where(big, core.ones_like(x), x)
    t = ew.subtract(safe, 1)
    # log1p(t + sqrt(2t + t^2)), t = x - 1: accurate near 1; NaN below 1
    r = ew.log1p(ew.add(t, ew.sqrt(ew.add(ew.add(t, t), ew.square(t)))))
    r = ew.where(ew.less(x, 1), np.nan, r)           # (2t + t^2 is positive again below x = -1)
    return ew.where(big, ew.add(ew.log(x), float(np.log(2.0))), r)


@halfs_in_f32(np.arctanh)
def arctanh(x):
    x = _f(x, np.arctanh)
    # atanh x = log1p(2x / (1 - x)) / 2
    return ew.multiply(ew.log1p(ew.true_divide(ew.add(x, x), ew.subtract(1, x))), 0.5)


@halfs_in_f32(np.exp2)
def exp2(x):
    x = _f(x, np.exp2)
    return ew.power(core.asarray(np.asarray(2.0, x.dtype), t=x._tr), x)


@halfs_in_f32(np.cbrt)
def cbrt(x):
    x = _f(x, np.cbrt)
    ax = ew.absolute(x)
    r = ew.power(ax, core.asarray(np.asarray(1.0 / 3.0, x.dtype), t=x._tr))
    # one Newton step makes exact cubes exact: r -= (r^3 - a) / (3 r^2)
    rs = ew.where(ew.equal(r, 0), core.ones_like(r), r)
    step = ew.true_divide(ew.subtract(ew.multiply(ew.square(rs), rs), ax), ew.multiply(ew.square(rs), 3.0))
    r = ew.where(ew.logical_or(ew.equal(r, 0), isinf(r)), r, ew.subtract(r, step))
    return ew.where(ew.signbit(x), ew.negative(r), r)


# ---------------------------------------------------------------------------- rounding
def trunc(x):
    x = core.asarray(x)
    if x.dtype.kind in "iub":
        return x
    f = ew.floor(ew.absolute(x))
    return ew.where(ew.signbit(x), ew.negative(f), f)


def fix(x):
    return trunc(x)


def rint(x):
    x = core.asarray(x)
    dt = core.ufunc_dtype(np.rint, x)           # bool: float16; integers: float64
    if x.dtype.kind in "iub":
        return core.astype(x, dt)
    fl = ew.floor(x)
    d = ew.subtract(x, fl)              # exact
    odd = ew.equal(ew.subtract(fl, ew.multiply(ew.floor(ew.multiply(fl, 0.5)), 2.0)), 1.0)
    up = ew.logical_or(ew.greater(d, 0.5), ew.logical_and(ew.equal(d, 0.5), odd))
    r = ew.where(up, ew.add(fl, 1.0), fl)
    # keep -0.0 for negative inputs that round to zero, as numpy does
    return ew.where(ew.logical_and(ew.equal(r, 0), ew.signbit(x)), ew.negative(core.zeros_like(r)), r)


def round_(a, decimals=0, out=None):
    core.no_extra("round", (), {"out": out})
    x = core.asarray(a)
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
        r = rint(ew.true_divide(core.astype(x, "float64"), float(m)))
        return core.astype(ew.multiply(r, float(m)), x.dtype)
    if decimals == 0:
        return rint(x)
    if decimals > 0:
        s = float(10.0 ** decimals)
        return ew.true_divide(rint(ew.multiply(x, s)), s)
    s = float(10.0 ** -decimals)
    return ew.multiply(rint(ew.true_divide(x, s)), s)


def fmod(x1, x2):
    a, b = core.promote(x1, x2, op="fmod")
    if a.dtype == np.bool_:
        a, b = core.astype(a, "int8"), core.astype(b, "int8")
    return core.emit(a._tr, REMAINDER, a, b)


def divmod_(x1, x2):
    return ew.floor_divide(x1, x2), ew.mod(x1, x2)


# ---------------------------------------------------------------------------- log-sum
def _logaddexp(x1, x2, base2):
    a, b = _f2(x1, x2, "logaddexp2" if base2 else "logaddexp")
    m = ew.maximum(a, b)
    d = ew.negative(ew.absolute(ew.subtract(a, b)))
    if base2:
        r = ew.add(m, ew.true_divide(ew.log1p(exp2(d)), float(np.log(2.0))))
    else:
        r = ew.add(m, ew.log1p(ew.exp(d)))
    # equal infinities: x - y is NaN, numpy gives the infinity
    return ew.where(ew.logical_and(ew.equal(a, b), isinf(a)), a, r)


@halfs_in_f32(np.logaddexp)
def logaddexp(x1, x2):
    return _logaddexp(x1, x2, False)


@halfs_in_f32(np.logaddexp2)
def logaddexp2(x1, x2):
    return _logaddexp(x1, x2, True)


def heaviside(x1, x2):
    a, b = _f2(x1, x2, "heaviside")
    r = ew.where(ew.less(a, 0), core.zeros_like(a), ew.where(ew.greater(a, 0), core.ones_like(a), b))
    return ew.where(isnan(a), a, r)


# ---------------------------------------------------------------------------- closeness
def isclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    t = core.trace_of(a, b)
    dt = core.result_dtype(a, b, 1.0)
    x, y = core.promote(core.asarray(a, t=t), core.asarray(b, t=t), dtype=dt, op="isclose")
    close = ew.less_equal(ew.absolute(ew.subtract(x, y)), ew.add(atol, ew.multiply(rtol, ew.absolute(y))))
    fin = ew.logical_and(isfinite(x), isfinite(y))
    r = ew.logical_or(ew.logical_and(fin, close), ew.logical_and(ew.logical_not(fin), ew.equal(x, y)))
    if equal_nan:
        r = ew.logical_or(r, ew.logical_and(isnan(x), isnan(y)))
    return r


def allclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    return red.all(isclose(a, b, rtol, atol, equal_nan))


def array_equal(a1, a2, equal_nan=False):
    t = core.trace_of(a1, a2)
    x, y = core.asarray(a1, t=t), core.asarray(a2, t=t)
    if x.shape != y.shape:
        return core.asarray(False, t=t)
    eq = ew.equal(x, y)
    if equal_nan:
        eq = ew.logical_or(eq, ew.logical_and(isnan(x), isnan(y)))
    return red.all(eq)


# numpy returns these as Python bools: eager mode reads the value (replicated, a local read);
# while tracing it is a 0-d bool array, not known until the program runs
allclose.python_result = array_equal.python_result = bool


# ---------------------------------------------------------------------------- select
def select(condlist, choicelist, default=0):
    condlist, choicelist = list(condlist), list(choicelist)
    if len(condlist) != len(choicelist):
        raise ValueError(f"select: list of cases must be same length as list of conditions (at {user_loc()})")
    if not condlist:
        raise ValueError(f"select with an empty condition list is not possible (at {user_loc()})")
    t = core.trace_of(*condlist, *choicelist, default)
    for c in condlist:
        c = core.asarray(c, t=t)
        if c.dtype != np.bool_:
            raise TypeError(f"select: invalid entry in condlist: should be boolean ndarray (at {user_loc()})")
    dt = core.result_dtype(*choicelist, default)
    out = core.asarray(default, dt, t)
    for c, v in reversed(list(zip(condlist, choicelist))):
        out = ew.where(c, core.asarray(v, dt, t), out)
    shape = np.broadcast_shapes(*[core.asarray(c, t=t).shape for c in condlist], *[core.asarray(v, t=t).shape
                                                                            for v in choicelist])
    return core.broadcast_to(out, np.broadcast_shapes(shape, out.shape))
