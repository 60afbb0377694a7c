"""numpy's API on Tracers: each function here emits IR with numpy's semantics
(broadcasting, NEP 50 dtype promotion, axis conventions). Anything numpy offers that is
not here raises NotImplementedError naming the function and the user's line."""
from __future__ import annotations

import builtins

import numpy as np

from ..errors import ShapeError, TraceError
from ..ir import dtypes
from .trace import Tracer, current_trace, user_loc

# ---------------------------------------------------------------------------- helpers


def _trace(*xs):
    for x in xs:
        if isinstance(x, Tracer):
            return x._tr
    t = current_trace()
    if t is None:
        raise TraceError("spmd numpy function called outside of tracing")
    return t


def _emit(t, name, *tracers, **attrs):
    return Tracer(t.emit(name, *[x.value for x in tracers], **attrs), t)


def _is_array(x):
    return isinstance(x, (Tracer, np.ndarray, np.generic))


def _dtype_token(x):
    """What np.result_type should see of x: dtypes for arrays, Python scalars as weak."""
    if isinstance(x, Tracer):
        if x.weak:
            return {"bool": False, "int64": 0, "int32": 0, "complex128": 0j}.get(x.value.dtype, 0.0)
        return x.dtype
    if isinstance(x, (np.ndarray, np.generic)):
        return x.dtype
    if isinstance(x, (bool, int, float, complex)):
        return x
    if isinstance(x, (list, tuple)):
        return np.asarray(x).dtype
    if hasattr(x, "__array__") and hasattr(x, "dtype") and hasattr(x, "shape"):
        return np.dtype(x.dtype)          # an array-like (an spmd.Array closed over): a constant
    raise TypeError(f"cannot use {type(x).__name__} {x!r} as an array")


def result_dtype(*xs) -> str:
    dt = dtypes.result_type(*[_dtype_token(x) for x in xs])
    return dtypes.canon(dt)


def asarray(x, dtype=None, t=None) -> Tracer:
    """Any array-like -> a Tracer of `dtype` (a constant if it is not traced)."""
    t = t or _trace(x)
    if not isinstance(x, Tracer):
        if isinstance(x, (list, tuple)) and builtins.any(isinstance(e, Tracer) for e in x):
            return stack([asarray(e, dtype, t) for e in x])
        if isinstance(x, int) and not isinstance(x, bool) and dtype is not None \
                and np.dtype(dtype).kind in "iu" and not np.iinfo(dtype).min <= x <= np.iinfo(dtype).max:
            raise OverflowError(f"Python integer {x} out of bounds for {np.dtype(dtype).name} (at {user_loc()})")
        arr = np.asarray(x)
        if dtype is None and isinstance(x, (bool, int, float, complex)):
            arr = np.asarray(x, dtype=result_dtype(x))
        x = t.const(arr if dtype is None else arr.astype(dtype))
    if dtype is not None and x.value.dtype != dtypes.canon(dtype):
        x = _emit(t, "convert", x, dtype=dtypes.canon(dtype))
    return x


def broadcast_to(x, shape):
    x = asarray(x)
    shape = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(s) for s in shape)
    if x.shape == shape:
        return x
    try:
        ok = np.broadcast_shapes(x.shape, shape) == shape
    except ValueError:
        ok = False
    if not ok:
        raise ShapeError(f"broadcast_to at {user_loc()}: cannot broadcast {list(x.shape)} to {list(shape)}")
    n = len(shape) - x.ndim
    return _emit(x._tr, "broadcast_in_dim", x, shape=shape, broadcast_dimensions=tuple(range(n, len(shape))))


def _promote(*xs, dtype=None, op="elementwise op"):
    """numpy's rules: one result dtype (NEP 50), one broadcast shape."""
    t = _trace(*xs)
    dt = dtype or result_dtype(*xs)
    ts = [asarray(x, dt, t) for x in xs]
    try:
        shape = np.broadcast_shapes(*[x.shape for x in ts])
    except ValueError:
        raise ShapeError(f"{op} at {user_loc()}: operands could not be broadcast together, shapes "
                         f"{', '.join(str(list(x.shape)) for x in ts)}") from None
    return [broadcast_to(x, shape) for x in ts]


def _float_dtype(*xs):
    """The inexact dtype numpy computes in: floats and complex stay, the rest -> float64."""
    dt = result_dtype(*xs)
    return dt if dtypes.is_inexact(dt) else "float64"


def _binary(name, x, y, dtype=None):
    a, b = _promote(x, y, dtype=dtype, op=name)
    return _emit(a._tr, name, a, b)


def _ufunc_float_dtype(x):
    """The float dtype numpy's one-argument float ufuncs give x: float16 for bool (numpy's
    smallest float loop), float64 for integers, the float itself otherwise."""
    return "float16" if x.dtype == np.bool_ else _float_dtype(x)


def _unary_float(name):
    def f(x, *args, **kwargs):
        _no_extra(name, args, kwargs)
        x = asarray(x)
        return _emit(x._tr, name, asarray(x, _ufunc_float_dtype(x)))
    f.__name__ = name
    return f


def _no_extra(name, args, kwargs):
    kwargs = {k: v for k, v in kwargs.items() if v is not None and k != "casting"}
    if args or kwargs:
        raise NotImplementedError(f"np.{name} with extra arguments {list(args)} {sorted(kwargs)} "
                                  f"is not supported in spmd (at {user_loc()})")


def _axes(axis, ndim, op="reduction"):
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, (int, np.integer)):
        axis = (axis,)
    out = []
    for a in axis:
        a = int(a)
        if not -ndim <= a < ndim:
            raise ShapeError(f"{op} at {user_loc()}: axis {a} is out of bounds for an array of rank {ndim}")
        out.append(a % ndim)
    if len(set(out)) != len(out):
        raise ShapeError(f"{op} at {user_loc()}: repeated axis in {axis}")
    return tuple(sorted(out))


def _keep(x, r, axes, keepdims):
    if not keepdims:
        return r
    return reshape(r, tuple(1 if d in axes else s for d, s in enumerate(x.shape)))


# ---------------------------------------------------------------------------- elementwise
def add(x, y): return _binary("add", x, y) if result_dtype(x, y) != "bool" else logical_or(x, y)
def subtract(x, y): return _binary("subtract", x, y)
def multiply(x, y): return _binary("multiply", x, y) if result_dtype(x, y) != "bool" else logical_and(x, y)
def _ordered(name, *xs):
    """numpy orders complex numbers lexicographically; spmd does not: say so, never guess."""
    if dtypes.is_complex(result_dtype(*xs)):
        raise TypeError(f"np.{name} of complex numbers is not supported in spmd (numpy orders them "
                        f"lexicographically); compare np.abs(z) or z.real instead (at {user_loc()})")


def maximum(x, y):
    _ordered("maximum", x, y)
    return _binary("maximum", x, y) if result_dtype(x, y) != "bool" else logical_or(x, y)


def minimum(x, y):
    _ordered("minimum", x, y)
    return _binary("minimum", x, y) if result_dtype(x, y) != "bool" else logical_and(x, y)
def true_divide(x, y): return _binary("divide", x, y, dtype=_float_dtype(x, y))


divide = true_divide


def floor_divide(x, y):
    dt = result_dtype(x, y)
    a, b = _promote(x, y, op="floor_divide")
    if dt in dtypes.FLOATS:
        # numpy's npy_floor_divide: exact where floor(a / b) is not (7.0 // 0.1 == 69.0)
        r = _emit(a._tr, "remainder", a, b)
        div = true_divide(subtract(a, r), b)
        div = where(logical_and(not_equal(r, 0), not_equal(less(b, 0), less(r, 0))), subtract(div, 1), div)
        fl = floor(div)
        fl = where(greater(subtract(div, fl), 0.5), add(fl, 1), fl)
        # a zero quotient has the sign of a / b (-0.0 // 2.5 is -0.0, -2.5 // -3e10 is +0.0)
        fl = where(equal(div, 0), MF.copysign(asarray(np.zeros((), dt), t=a._tr), true_divide(a, b)), fl)
        return where(equal(b, 0), true_divide(a, b), fl)
    q = _emit(a._tr, "divide", a, b)            # truncates toward zero
    r = _emit(a._tr, "remainder", a, b)
    fix = logical_and(not_equal(r, 0), not_equal(less(r, 0), less(b, 0)))
    return subtract(q, astype(fix, dt))


def mod(x, y):
    a, b = _promote(x, y, op="remainder")
    r = _emit(a._tr, "remainder", a, b)         # sign of the dividend (C fmod)
    fix = logical_and(not_equal(r, 0), not_equal(less(r, 0), less(b, 0)))
    out = where(fix, add(r, b), r)
    if a.dtype in dtypes.FLOATS:                 # numpy: a zero remainder has the divisor's sign
        out = where(equal(r, 0), MF.copysign(asarray(np.zeros((), a.dtype), t=a._tr), b), out)
    return out


remainder = mod


def power(x, y):
    if result_dtype(x, y) == "bool":
        raise TypeError(f"np.power / ** of bool operands gives int8 in numpy, which spmd does not have; "
                        f"convert to an integer or float dtype first (at {user_loc()})")
    if isinstance(y, int) and not isinstance(y, bool) and y == 2:
        return multiply(*[asarray(x, result_dtype(x, y))] * 2)     # np.power(bool, 2) is int64
    if isinstance(y, (float, np.floating)) and y == 0.5:
        # numpy computes an array to a scalar power 0.5 as np.sqrt (so (-inf) ** 0.5 is nan
        # and (-0.0) ** 0.5 is -0.0, where pow() gives inf and 0.0); an array of exponents
        # goes through pow()
        x = asarray(x)
        if not getattr(x, "weak", False):
            return sqrt(asarray(x, result_dtype(x, y)))
    return _binary("power", x, y)


def _pow_operator(x, y):
    """x ** y: numpy's ndarray.__pow__ computes bool_array ** 2 as np.square, an int8."""
    if isinstance(x, Tracer) and not getattr(x, "weak", False) and x.dtype == np.bool_ \
            and isinstance(y, int) and not isinstance(y, bool) and y == 2:
        raise TypeError(f"bool_array ** 2 gives int8 in numpy (np.square), which spmd does not have; "
                        f"convert to an integer or float dtype first (at {user_loc()})")
    return power(x, y)


def square(x):
    x = asarray(x)
    if x.dtype == np.bool_:
        raise TypeError(f"np.square of bool gives int8 in numpy, which spmd does not have; convert to "
                        f"an integer or float dtype first (at {user_loc()})")
    return multiply(x, x)


def negative(x):
    x = asarray(x)
    return _emit(x._tr, "negate", x)


def absolute(x):
    x = asarray(x)
    return x if x.dtype == np.bool_ else _emit(x._tr, "abs", x)


def sign(x):
    x = asarray(x)
    return _emit(x._tr, "sign", x)


def floor(x):
    x = asarray(x)
    return x if x.dtype.kind in "iub" else _emit(x._tr, "floor", asarray(x, _float_dtype(x)))


def ceil(x):
    return negative(floor(negative(x)))


exp = _unary_float("exp")
log = _unary_float("log")
log1p = _unary_float("log1p")
tanh = _unary_float("tanh")
sqrt = _unary_float("sqrt")
sin = _unary_float("sin")
cos = _unary_float("cos")


def expm1(x):
    """exp(x) - 1, accurate near 0 (Kahan: (u - 1) * x / log(u), u = exp(x)), where a plain
    exp(x) - 1 loses every digit (expm1(1e-20) is 1e-20, not 0)."""
    x = asarray(x)
    if dtypes.is_complex(x.value.dtype):    # the real-line accuracy tricks below order values
        return subtract(exp(x), 1)
    if _ufunc_float_dtype(x) in dtypes.HALFS:       # numpy: in float32, rounded once
        return astype(expm1(astype(x, "float32")), _ufunc_float_dtype(x))
    x = asarray(x, _ufunc_float_dtype(x))
    u = exp(x)
    um1 = subtract(u, 1)
    # the formula where it is well defined; elsewhere it runs on a harmless x (0.5), so its
    # gradient there is finite and the select's zero cotangent stays zero (0 * inf is NaN)
    good = logical_and(logical_and(not_equal(u, 1), not_equal(um1, -1)), MF.isfinite(u))
    xs = where(good, x, 0.5)
    us = exp(xs)
    r = multiply(subtract(us, 1), true_divide(xs, log(us)))
    # |x| tiny: x itself (keeps -0.0); x very negative: -1; inf, nan: exp(x) - 1 is exact
    return where(good, r, where(equal(u, 1), x, um1))


def _halfs_in_f32(f):
    """numpy's float16 loops compute in float32 and round once: so do these compositions."""
    def g(x):
        x = asarray(x)
        dt = _ufunc_float_dtype(x)
        return astype(f(astype(x, "float32")), dt) if dt in dtypes.HALFS else f(x)
    g.__name__ = f.__name__
    return g


@_halfs_in_f32
def log2(x): return true_divide(log(x), float(np.log(2.0)))     # a Python float stays weak
@_halfs_in_f32
def log10(x): return true_divide(log(x), float(np.log(10.0)))
@_halfs_in_f32
def tan(x): return true_divide(sin(x), cos(x))


def sinh(x):
    """(e^x - e^-x) / 2 from expm1, so it is accurate near 0 (sinh(1e-20) is 1e-20, -0.0
    stays -0.0); the float conversion comes first (negating INT_MIN would wrap)."""
    x = asarray(x)
    if dtypes.is_complex(x.value.dtype):
        return true_divide(subtract(exp(x), exp(negative(x))), 2)
    if _ufunc_float_dtype(x) in dtypes.HALFS:       # numpy: in float32, rounded once
        return astype(sinh(astype(x, "float32")), _ufunc_float_dtype(x))
    x = asarray(x, _ufunc_float_dtype(x))
    big = _big_hyperbolic(x)
    xs = where(big, 0.0, x)                 # (finite gradients in the branch not taken)
    r = true_divide(subtract(expm1(xs), expm1(negative(xs))), 2)
    return where(big, MF.copysign(_half_exp(x), x), r)


def _big_hyperbolic(x):
    """|x| where e^-|x| is below half an ulp of e^|x| (and NaN): sinh and cosh are
    e^|x| / 2 there."""
    return logical_not(less_equal(absolute(x), 20.0 if x.dtype == np.float64 else 9.0))


def _half_exp(x):
    """e^|x| / 2 as t * (t / 2), t = e^(|x|/2): finite up to the largest float (e^710 / 2
    is, though e^710 overflows)."""
    t = exp(multiply(absolute(x), 0.5))
    return multiply(t, multiply(t, 0.5))


def cosh(x):
    x = asarray(x)
    if dtypes.is_complex(x.value.dtype):
        return true_divide(add(exp(x), exp(negative(x))), 2)
    if _ufunc_float_dtype(x) in dtypes.HALFS:       # numpy: in float32, rounded once
        return astype(cosh(astype(x, "float32")), _ufunc_float_dtype(x))
    x = asarray(x, _ufunc_float_dtype(x))
    big = _big_hyperbolic(x)
    xs = where(big, 0.0, x)
    r = true_divide(add(exp(xs), exp(negative(xs))), 2)
    return where(big, _half_exp(x), r)


def _compare(direction):
    def f(x, y):
        if direction not in ("EQ", "NE"):
            _ordered({"LT": "less", "LE": "less_equal", "GT": "greater", "GE": "greater_equal"}[direction], x, y)
        a, b = _promote(x, y, op=f"compare {direction}")
        return _emit(a._tr, "compare", a, b, direction=direction)
    return f


equal, not_equal = _compare("EQ"), _compare("NE")
less, less_equal = _compare("LT"), _compare("LE")
greater, greater_equal = _compare("GT"), _compare("GE")


def _logical(name):
    def f(x, y):
        a, b = _promote(asarray(x, "bool") if not _is_bool(x) else x,
                        asarray(y, "bool") if not _is_bool(y) else y, dtype="bool", op=f"logical_{name}")
        return _emit(a._tr, name, a, b)
    return f


def _is_bool(x):
    return isinstance(x, bool) or (hasattr(x, "dtype") and np.dtype(x.dtype) == np.bool_)


def _bitwise(name):
    def f(x, y):
        if result_dtype(x, y) in dtypes.FLOATS:
            raise TypeError(f"np.bitwise_{name} is not defined for floats (at {user_loc()})")
        return _binary(name, x, y)
    return f


logical_and, logical_or, logical_xor = _logical("and"), _logical("or"), _logical("xor")
bitwise_and, bitwise_or, bitwise_xor = _bitwise("and"), _bitwise("or"), _bitwise("xor")


def _shift(name, what):
    def f(x, y):
        dt = result_dtype(x, y)
        if dt not in dtypes.INTS:
            raise TypeError(f"np.{what} is defined for integers, not {dt} (at {user_loc()})"
                            + ("; numpy makes bool << bool an int8, which spmd does not have: "
                               "convert with .astype(np.int32) first" if dt == "bool" else ""))
        return _binary(name, x, y)
    f.__name__ = what
    return f


left_shift, right_shift = _shift("shift_left", "left_shift"), _shift("shift_right", "right_shift")


def reciprocal(x):
    x = asarray(x)
    if x.dtype.kind in "iu":
        # numpy divides in the integer type: 1 and -1 stay, larger magnitudes give 0, and
        # 1 / 0 gives the type's minimum (what numpy's integer division returns for it)
        dt = x.dtype.name
        r = where(equal(x, 1), x, where(equal(x, -1), x, asarray(0, dt)))
        return where(equal(x, 0), asarray(np.iinfo(dt).min, dt), r)
    if x.dtype == np.bool_:
        raise TypeError(f"np.reciprocal of bool is not supported by spmd (numpy gives int8); "
                        f"convert with .astype(np.float32) first (at {user_loc()})")
    return true_divide(1, x)


def logical_not(x):
    x = asarray(x, "bool")
    return _emit(x._tr, "not", x)


def invert(x):
    x = asarray(x)
    if dtypes.is_float(x.value.dtype):
        raise TypeError(f"~ is not defined for floats (at {user_loc()})")
    return _emit(x._tr, "not", x)


def where(cond, x=None, y=None):
    if x is None or y is None:
        raise NotImplementedError(f"np.where with one argument has a data-dependent shape; "
                                  f"not supported in spmd (at {user_loc()})")
    t = _trace(cond, x, y)
    dt = result_dtype(x, y)
    xs = [asarray(x, dt, t), asarray(y, dt, t), asarray(cond, "bool", t)]
    try:
        shape = np.broadcast_shapes(*[v.shape for v in xs])
    except ValueError:
        raise ShapeError(f"where at {user_loc()}: condition, x and y could not be broadcast together, "
                         f"shapes {list(xs[2].shape)}, {list(xs[0].shape)}, {list(xs[1].shape)}") from None
    a, b, c = [broadcast_to(v, shape) for v in xs]
    return _emit(t, "select", c, a, b)


def clip(x, a_min=None, a_max=None, **kw):
    a_min = kw.pop("min", a_min)
    a_max = kw.pop("max", a_max)
    _no_extra("clip", (), kw)
    if a_min is not None:
        x = maximum(x, a_min)
    if a_max is not None:
        x = minimum(x, a_max)
    return x


# ---------------------------------------------------------------------------- complex parts
def real(x):
    x = asarray(x)
    return _emit(x._tr, "real", x) if dtypes.is_complex(x.value.dtype) else x


def imag(x):
    x = asarray(x)
    return _emit(x._tr, "imag", x) if dtypes.is_complex(x.value.dtype) else zeros_like(x)


def conjugate(x):
    x = asarray(x)
    return _emit(x._tr, "conj", x) if dtypes.is_complex(x.value.dtype) else x


def angle(z, deg=False):
    z = asarray(z)
    if dtypes.is_complex(z.value.dtype):
        re, im = real(z), imag(z)
    else:
        re = asarray(z, _float_dtype(z))
        im = zeros_like(re)
    a = _emit(z._tr, "atan2", im, re)
    return multiply(a, 180.0 / np.pi) if deg else a


def iscomplexobj(x):
    return dtypes.is_complex(asarray(x).value.dtype)


def isrealobj(x):
    return not iscomplexobj(x)


def astype(x, dtype):
    x = asarray(x)
    dt = dtypes.canon(dtype)
    return x if x.value.dtype == dt else _emit(x._tr, "convert", x, dtype=dt)


def logistic(x):
    x = asarray(x)
    return _emit(x._tr, "logistic", asarray(x, _float_dtype(x)))


def rsqrt(x):
    x = asarray(x)
    return _emit(x._tr, "rsqrt", asarray(x, _float_dtype(x)))


# ---------------------------------------------------------------------------- reductions
def _sum_dtype(x):
    return "int64" if x.dtype.kind in "bi" else x.value.dtype


def _reduce(kind, x, axis, dtype, keepdims, default_dtype):
    x = asarray(x)
    axes = _axes(axis, x.ndim, kind)
    dt = dtypes.canon(dtype) if dtype is not None else default_dtype(x)
    xin = astype(x, dt)
    r = _emit(x._tr, "reduce", xin, kind=kind, axes=axes) if axes else xin
    return _keep(x, r, axes, keepdims)


def _masked(x, where_, fill):
    """numpy's `where=` on a reduction: the elements where the mask is False count as the
    reduction's identity (or `initial`), the mask broadcast against x."""
    x = asarray(x)
    if where_ is None or where_ is True:
        return x
    return where(where_, x, asarray(fill, x.value.dtype))


def _with_initial(kind, r, initial):
    if initial is None:
        return r
    init = asarray(initial, r.value.dtype)
    return {"sum": add, "prod": multiply, "max": maximum, "min": minimum}[kind](r, init)


def sum(x, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None, **kw):
    _no_extra("sum", (), dict(kw, out=out))
    r = _reduce("sum", _masked(x, where, 0), axis, dtype, keepdims, _sum_dtype)
    return _with_initial("sum", r, initial)


def prod(x, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None, **kw):
    _no_extra("prod", (), dict(kw, out=out))
    r = _reduce("prod", _masked(x, where, 1), axis, dtype, keepdims, _sum_dtype)
    return _with_initial("prod", r, initial)


def _cumulative(kind, x, axis, dtype, default_dtype):
    """np.cumsum / np.cumprod / ufunc.accumulate: axis=None scans the flattened array."""
    x = asarray(x)
    if axis is None:
        x, axis = reshape(x, (-1,)), 0
    ax = _axis(axis, x.ndim, f"cum{kind}")
    dt = dtypes.canon(dtype) if dtype is not None else default_dtype(x)
    return _emit(x._tr, "cumulative", astype(x, dt), kind=kind, axis=ax, reverse=False)


def cumsum(x, axis=None, dtype=None, out=None):
    _no_extra("cumsum", (), {"out": out})
    return _cumulative("sum", x, axis, dtype, _sum_dtype)


def cumprod(x, axis=None, dtype=None, out=None):
    _no_extra("cumprod", (), {"out": out})
    return _cumulative("prod", x, axis, dtype, _sum_dtype)


def _no_identity(name, x, axis):
    """numpy refuses max/min over an empty axis: there is no identity to return."""
    axes = _axes(axis, x.ndim, name)
    if builtins.any(x.shape[a] == 0 for a in axes):
        raise ShapeError(f"{name} at {user_loc()}: zero-size array {list(x.shape)} to a reduction "
                         f"over axes {list(axes)}, which has no identity")


def _extreme(kind, x, axis, keepdims, initial, where_):
    x = asarray(x)
    if where_ is not None and where_ is not True and initial is None:
        name = "maximum" if kind == "max" else "minimum"
        raise ValueError(f"reduction operation '{name}' does not have an identity, so to use a where "
                         f"mask one has to specify 'initial' (at {user_loc()})")
    if initial is None:
        _no_identity(kind, x, axis)
    if x.dtype == np.bool_:
        x = _masked(x, where_, bool(initial))
        r = (any if kind == "max" else all)(x, axis, keepdims=keepdims)
        return r if initial is None else (logical_or if kind == "max" else logical_and)(r, bool(initial))
    r = _reduce(kind, _masked(x, where_, initial), axis, None, keepdims, lambda v: v.value.dtype)
    return _with_initial(kind, r, initial)


def max(x, axis=None, out=None, keepdims=False, initial=None, where=None, **kw):
    _no_extra("max", (), dict(kw, out=out))
    _ordered("max", x)
    return _extreme("max", x, axis, keepdims, initial, where)


def min(x, axis=None, out=None, keepdims=False, initial=None, where=None, **kw):
    _no_extra("min", (), dict(kw, out=out))
    _ordered("min", x)
    return _extreme("min", x, axis, keepdims, initial, where)


amax, amin = max, min


def _count(x, axes):
    return int(np.prod([x.shape[a] for a in axes], dtype=np.int64))


def _where_count(x, axis, where_, keepdims, dt):
    """How many elements a `where=` mask keeps per reduced slice (a traced count)."""
    m = broadcast_to(asarray(where_, "bool"), x.shape)
    return _reduce("sum", astype(m, dt), axis, None, keepdims, lambda v: v.value.dtype)


def mean(x, axis=None, dtype=None, out=None, keepdims=False, *, where=None, **kw):
    _no_extra("mean", (), dict(kw, out=out))
    x = asarray(x)
    if dtype is None and x.value.dtype in dtypes.HALFS:
        # numpy computes a float16 mean in float32 and rounds once (bfloat16 here too)
        return astype(mean(astype(x, "float32"), axis, keepdims=keepdims, where=where), x.value.dtype)
    axes = _axes(axis, x.ndim, "mean")
    dt = dtypes.canon(dtype) if dtype is not None else _float_dtype(x)
    if where is not None and where is not True:
        s = _reduce("sum", astype(_masked(x, where, 0), dt), axis, None, keepdims, lambda v: v.value.dtype)
        return true_divide(s, _where_count(x, axis, where, keepdims, dt))     # 0/0: NaN, as numpy
    s = _reduce("sum", astype(x, dt), axis, None, keepdims, lambda v: v.value.dtype)
    return true_divide(s, np.array(_count(x, axes), dtype=dt)) if _count(x, axes) else \
        true_divide(s, np.array(np.nan, dtype=dt))


def var(x, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=None, **kw):
    _no_extra("var", (), dict(kw, out=out))
    x = asarray(x)
    if dtype is None and x.value.dtype in dtypes.HALFS:         # as mean
        return astype(var(astype(x, "float32"), axis, ddof=ddof, keepdims=keepdims, where=where),
                      x.value.dtype)
    axes = _axes(axis, x.ndim, "var")
    m = mean(x, axis, dtype, keepdims=True, where=where)
    d = subtract(x, m)
    if dtypes.is_complex(d.value.dtype):       # numpy: the mean of |d|^2, a real result
        re, im = real(d), imag(d)
        d2 = add(multiply(re, re), multiply(im, im))
    else:
        d2 = multiply(d, d)
    if where is not None and where is not True:
        s = sum(d2, axis, keepdims=keepdims, where=where)
        n = subtract(_where_count(x, axis, where, keepdims, s.value.dtype), ddof)
        return true_divide(s, maximum(n, asarray(0, s.value.dtype)))
    s = sum(d2, axis, keepdims=keepdims)
    return true_divide(s, np.array(builtins.max(_count(x, axes) - ddof, 0), dtype=s.dtype))


def std(x, axis=None, dtype=None, out=None, ddof=0, keepdims=False, **kw):
    return sqrt(var(x, axis, dtype, out, ddof, keepdims, **kw))


def any(x, axis=None, out=None, keepdims=False, *, where=None, **kw):
    _no_extra("any", (), dict(kw, out=out))
    return _reduce("max", _masked(asarray(x, "bool"), where, False), axis, None, keepdims, lambda v: "bool")


def all(x, axis=None, out=None, keepdims=False, *, where=None, **kw):
    _no_extra("all", (), dict(kw, out=out))
    return _reduce("min", _masked(asarray(x, "bool"), where, True), axis, None, keepdims, lambda v: "bool")


def argmax(x, axis=None, out=None, keepdims=False):
    _no_extra("argmax", (), {"out": out})
    return _arg(x, axis, keepdims, max)


def argmin(x, axis=None, out=None, keepdims=False):
    _no_extra("argmin", (), {"out": out})
    return _arg(x, axis, keepdims, min)


def _arg(x, axis, keepdims, pick):
    """The first index where x equals its max/min (or is NaN, as numpy's argmax returns
    the first NaN): a min-reduction of masked iotas."""
    x = asarray(x)
    shape = x.shape
    if axis is None:
        x, axis = reshape(x, (-1,)), 0
    (ax,) = _axes(axis, x.ndim, f"arg{pick.__name__}")
    if x.shape[ax] == 0:
        raise ShapeError(f"arg{pick.__name__} at {user_loc()}: attempt to get it of an empty sequence "
                         f"{list(shape)}")
    best = pick(x, ax, keepdims=True)
    hit = equal(x, best)
    if dtypes.is_float(x.value.dtype):
        hit = logical_or(hit, not_equal(x, x))
    idx = _emit(x._tr, "iota", shape=x.shape, dtype="int64", dimension=ax)
    big = np.array(x.shape[ax], dtype="int64")
    r = min(where(hit, idx, big), ax, keepdims=keepdims)
    if keepdims and len(shape) != r.ndim:
        r = reshape(r, (1,) * len(shape))
    return r


# ---------------------------------------------------------------------------- shapes
def reshape(x, shape, order="C"):
    if order != "C":
        raise NotImplementedError(f"reshape with order={order!r} (at {user_loc()})")
    x = asarray(x)
    if isinstance(shape, (int, np.integer)):
        shape = (shape,)
    shape = [int(s) for s in shape]
    if shape.count(-1) > 1:
        raise ShapeError(f"reshape at {user_loc()}: only one dimension can be -1, got {shape}")
    if -1 in shape:
        known = int(np.prod([s for s in shape if s != -1], dtype=np.int64))
        if known == 0 or x.size % known:
            raise ShapeError(f"cannot reshape {list(x.shape)} into {shape} (at {user_loc()})")
        shape[shape.index(-1)] = x.size // known
    shape = tuple(shape)
    return x if shape == x.shape else _emit(x._tr, "reshape", x, shape=shape)


def _axis(a, ndim, op):
    """One axis, negative counted from the end, checked like numpy's AxisError."""
    a = int(a)
    if not -ndim <= a < ndim:
        raise ShapeError(f"{op} at {user_loc()}: axis {a} is out of bounds for an array of rank {ndim}")
    return a % ndim


def transpose(x, axes=None):
    x = asarray(x)
    if axes is not None and len(axes) != x.ndim:
        raise ShapeError(f"transpose at {user_loc()}: axes {list(axes)} do not match the {x.ndim} dims "
                         f"of {list(x.shape)}")
    if axes is None:
        perm = tuple(reversed(range(x.ndim)))
    else:
        perm = tuple(_axis(a, x.ndim, "transpose") for a in axes)
    if sorted(perm) != list(range(x.ndim)):
        raise ShapeError(f"axes {axes} do not permute the {x.ndim} dims of {list(x.shape)} (at {user_loc()})")
    return x if perm == tuple(range(x.ndim)) else _emit(x._tr, "transpose", x, permutation=perm)


def swapaxes(x, a, b):
    x = asarray(x)
    p = list(range(x.ndim))
    a, b = _axis(a, x.ndim, "swapaxes"), _axis(b, x.ndim, "swapaxes")
    p[a], p[b] = p[b], p[a]
    return transpose(x, p)


def moveaxis(x, source, destination):
    x = asarray(x)
    src = [_axis(s, x.ndim, "moveaxis") for s in np.atleast_1d(source)]
    dst = [_axis(d, x.ndim, "moveaxis") for d in np.atleast_1d(destination)]
    if len(src) != len(dst) or len(set(src)) != len(src) or len(set(dst)) != len(dst):
        raise ShapeError(f"moveaxis at {user_loc()}: bad source {source} / destination {destination}")
    order = [n for n in range(x.ndim) if n not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return transpose(x, order)


def expand_dims(x, axis):
    x = asarray(x)
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    nd = x.ndim + len(axes)
    axes = sorted(_axis(a, nd, "expand_dims") for a in axes)
    if len(set(axes)) != len(axes):
        raise ShapeError(f"expand_dims at {user_loc()}: repeated axis in {axis}")
    shape, it = [], iter(x.shape)
    for d in range(nd):
        shape.append(1 if d in axes else next(it))
    return reshape(x, shape)


def squeeze(x, axis=None):
    x = asarray(x)
    axes = [d for d, s in enumerate(x.shape) if s == 1] if axis is None else _axes(axis, x.ndim, "squeeze")
    for a in axes:
        if x.shape[a] != 1:
            raise ShapeError(f"cannot squeeze axis {a} of size {x.shape[a]} (at {user_loc()})")
    return reshape(x, [s for d, s in enumerate(x.shape) if d not in axes])


def ravel(x):
    return reshape(x, (-1,))


def atleast_1d(x):
    x = asarray(x)
    return reshape(x, (1,)) if x.ndim == 0 else x


def concatenate(xs, axis=0, dtype=None, **kw):
    _no_extra("concatenate", (), kw)
    xs = list(xs)
    if not xs:
        raise ShapeError(f"need at least one array to concatenate (at {user_loc()})")
    t = _trace(*xs)
    dt = dtypes.canon(dtype) if dtype else result_dtype(*xs)
    ts = [asarray(x, dt, t) for x in xs]
    if axis is None:
        ts, axis = [reshape(x, (-1,)) for x in ts], 0
    nd = ts[0].ndim
    if nd == 0:
        raise ShapeError(f"zero-dimensional arrays cannot be concatenated (at {user_loc()})")
    axis = _axis(axis, nd, "concatenate")
    return _emit(t, "concatenate", *ts, dimension=axis)


def stack(xs, axis=0, **kw):
    _no_extra("stack", (), kw)
    xs = list(xs)
    if not xs:
        raise ShapeError(f"need at least one array to stack (at {user_loc()})")
    xs = [asarray(x, t=_trace(*xs)) for x in xs]
    if len({x.shape for x in xs}) > 1:
        raise ShapeError(f"all input arrays must have the same shape to stack, got "
                         f"{[list(x.shape) for x in xs]} (at {user_loc()})")
    nd = xs[0].ndim + 1
    axis = _axis(axis, nd, "stack")
    return concatenate([expand_dims(x, axis) for x in xs], axis)


def zeros_like(x, dtype=None, **kw):
    return full_like(x, 0, dtype, **kw)


def ones_like(x, dtype=None, **kw):
    return full_like(x, 1, dtype, **kw)


def full_like(x, fill_value, dtype=None, shape=None, **kw):
    _no_extra("full_like", (), kw)
    x = asarray(x)
    dt = dtypes.canon(dtype or x.dtype)
    shape = x.shape if shape is None else tuple(np.atleast_1d(shape))
    if isinstance(fill_value, Tracer):
        return broadcast_to(astype(fill_value, dt), shape)
    return broadcast_to(asarray(np.array(fill_value, dtype=dt), t=x._tr), shape)


def tile(x, reps):
    x = asarray(x)
    reps = (reps,) if isinstance(reps, int) else tuple(reps)
    nd = builtins.max(x.ndim, len(reps))
    x = reshape(x, (1,) * (nd - x.ndim) + x.shape)
    reps = (1,) * (nd - len(reps)) + reps
    # broadcast a new axis before each dim, then merge the pairs
    inter = []
    for r, s in zip(reps, x.shape):
        inter += [r, s]
    y = broadcast_to(reshape(x, [v for s in x.shape for v in (1, s)]), inter)
    return reshape(y, [r * s for r, s in zip(reps, x.shape)])


def take(x, indices, axis=None, out=None, mode=None):
    """np.take. Indices known at trace time are checked like numpy's; traced indices
    cannot raise, so out-of-range ones clamp (mode="raise" behaves as "clip")."""
    x = asarray(x)
    if axis is None:
        x, axis = reshape(x, (-1,)), 0
    axis = _axis(axis, x.ndim, "take")
    n = x.shape[axis]
    if mode not in (None, "raise", "clip", "wrap"):
        raise ValueError(f"take: mode {mode!r} is not one of 'raise', 'wrap', 'clip' (at {user_loc()})")
    if not isinstance(indices, Tracer):
        idx = np.asarray(indices)
        if idx.size == 0:
            idx = idx.astype(np.int64)
        if idx.dtype.kind not in "iu":
            raise TypeError(f"take: indices must be integers, got {idx.dtype} (at {user_loc()})")
        idx = idx.astype(np.int64)
        if mode == "clip":
            idx = np.clip(idx, 0, builtins.max(n - 1, 0))
        elif mode == "wrap" and n:
            idx = idx % n
        elif idx.size and (idx.min() < -n or idx.max() >= n):
            raise IndexError(f"take: index {idx.min() if idx.min() < -n else idx.max()} is out of bounds "
                             f"for axis {axis} with size {n} (at {user_loc()})")
        else:
            idx = np.where(idx < 0, idx + n, idx)
        return _emit(x._tr, "gather", x, asarray(idx, t=x._tr), axis=axis)
    idx = indices
    if idx.dtype.kind not in "iu":
        raise TypeError(f"take: indices must be integers, got {idx.dtype} (at {user_loc()})")
    if mode == "wrap":
        idx = mod(idx, n)
    elif mode != "clip":
        idx = where(less(idx, 0), add(idx, n), idx)   # numpy's negative indices
    return _emit(x._tr, "gather", x, idx, axis=axis)


# ---------------------------------------------------------------------------- contractions
def _dot_general(a, b, lc, rc, lb=(), rb=()):
    dt = result_dtype(a, b)
    if dt == "bool":     # numpy: a logical or of ands, i.e. an integer dot product != 0
        return not_equal(_dot_general(astype(a, "int64"), astype(b, "int64"), lc, rc, lb, rb), 0)
    a, b = asarray(a, dt), asarray(b, dt)
    return _emit(a._tr, "dot_general", a, b, lhs_batch=tuple(lb), rhs_batch=tuple(rb),
                 lhs_contract=tuple(lc), rhs_contract=tuple(rc))


def _check_contract(name, a, b, da, db):
    if a.shape[da] != b.shape[db]:
        raise ShapeError(f"{name} at {user_loc()}: {list(a.shape)} and {list(b.shape)} do not contract "
                         f"(dim {da} is {a.shape[da]}, dim {db} is {b.shape[db]})")


def matmul(a, b):
    a, b = [asarray(v, result_dtype(a, b), _trace(a, b)) for v in (a, b)]
    if a.ndim == 0 or b.ndim == 0:
        raise ShapeError(f"matmul at {user_loc()}: operands must not be 0-d, got {list(a.shape)}, {list(b.shape)}")
    if a.ndim == 1 and b.ndim == 1:
        _check_contract("matmul", a, b, 0, 0)
        return _dot_general(a, b, (0,), (0,))
    if b.ndim <= 2:
        db = 0 if b.ndim == 1 else 0
        _check_contract("matmul", a, b, a.ndim - 1, db)
        return _dot_general(a, b, (a.ndim - 1,), (db,))
    if a.ndim == 1:
        _check_contract("matmul", a, b, 0, b.ndim - 2)
        return _dot_general(a, b, (0,), (b.ndim - 2,))
    _check_contract("matmul", a, b, a.ndim - 1, b.ndim - 2)
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a = broadcast_to(a, batch + a.shape[-2:])
    b = broadcast_to(b, batch + b.shape[-2:])
    nb = len(batch)
    return _dot_general(a, b, (nb + 1,), (nb,), range(nb), range(nb))


def dot(a, b, out=None):
    _no_extra("dot", (), {"out": out})
    a, b = [asarray(v, result_dtype(a, b), _trace(a, b)) for v in (a, b)]
    if a.ndim == 0 or b.ndim == 0:
        return multiply(a, b)
    db = 0 if b.ndim == 1 else b.ndim - 2
    _check_contract("dot", a, b, a.ndim - 1, db)
    return _dot_general(a, b, (a.ndim - 1,), (db,))


def vdot(a, b):
    return dot(ravel(conjugate(a)), ravel(b))     # numpy conjugates the first argument


def inner(a, b):
    a, b = asarray(a), asarray(b)
    if a.ndim == 0 or b.ndim == 0:
        return multiply(a, b)
    _check_contract("inner", a, b, a.ndim - 1, b.ndim - 1)
    return _dot_general(a, b, (a.ndim - 1,), (b.ndim - 1,))


def outer(a, b):
    return multiply(reshape(ravel(a), (-1, 1)), ravel(b))


def tensordot(a, b, axes=2):
    a, b = asarray(a), asarray(b)
    if isinstance(axes, int):
        la, lb_ = list(range(a.ndim - axes, a.ndim)), list(range(axes))
    else:
        la, lb_ = [np.atleast_1d(x).tolist() for x in axes]
    return _dot_general(a, b, [x % a.ndim for x in la], [x % b.ndim for x in lb_])


def einsum(subscripts, *operands, optimize=None, **kw):
    _no_extra("einsum", (), kw)
    if "..." in subscripts:
        raise NotImplementedError(f"einsum with '...' is not supported in spmd (at {user_loc()})")
    subscripts = subscripts.replace(" ", "")
    if "->" in subscripts:
        ins, out = subscripts.split("->")
    else:
        ins = subscripts
        counts = {c: ins.count(c) for c in ins if c != ","}
        out = "".join(sorted(c for c, n in counts.items() if n == 1))
    specs = ins.split(",")
    if len(specs) != len(operands):
        raise ShapeError(f"einsum {subscripts!r} names {len(specs)} operands, got {len(operands)} (at {user_loc()})")
    t = _trace(*operands)
    dt = result_dtype(*operands)
    ts = [asarray(x, dt, t) for x in operands]
    for s, x in zip(specs, ts):
        if len(s) != x.ndim:
            raise ShapeError(f"einsum {subscripts!r}: {s!r} names {len(s)} dims of an operand of "
                             f"shape {list(x.shape)} (at {user_loc()})")
        if len(set(s)) != len(s):
            raise NotImplementedError(f"einsum with a repeated index in {s!r} (a diagonal) is not "
                                      f"supported in spmd (at {user_loc()})")
    # contract left to right; a letter is summed once no later operand or the output needs it
    acc, acc_s = _einsum_sum_unused(ts[0], specs[0], set("".join(specs[1:])) | set(out))
    for k in range(1, len(ts)):
        later = set("".join(specs[k + 1:])) | set(out)
        b, bs = _einsum_sum_unused(ts[k], specs[k], set(acc_s) | later)
        batch = [c for c in acc_s if c in bs and c in later]
        contract = [c for c in acc_s if c in bs and c not in later]
        for c in batch + contract:
            _check_contract("einsum", acc, b, acc_s.index(c), bs.index(c))
        acc = _dot_general(acc, b, [acc_s.index(c) for c in contract], [bs.index(c) for c in contract],
                           [acc_s.index(c) for c in batch], [bs.index(c) for c in batch])
        acc_s = "".join(batch) + "".join(c for c in acc_s if c not in bs) + "".join(c for c in bs if c not in acc_s)
    acc, acc_s = _einsum_sum_unused(acc, acc_s, set(out))
    return transpose(acc, [acc_s.index(c) for c in out])


def _einsum_sum_unused(x, spec, keep):
    drop = [i for i, c in enumerate(spec) if c not in keep]
    if not drop:
        return x, spec
    # einsum sums in the operands' dtype (np.sum would widen int32)
    return sum(x, tuple(drop), dtype=x.dtype), "".join(c for c in spec if c in keep)


# ---------------------------------------------------------------------------- indexing and writes
# numpy's indexing (views, advanced indices) and write semantics live in their own files
from . import functionalize as fz  # noqa: E402
from .indexing import (getitem, setitem, ix_, take_along_axis, put_along_axis, put,  # noqa: E402
                       fill_diagonal, ufunc_at)


def fmax(x, y):
    """numpy's fmax ignores a NaN when the other operand is a number."""
    m = maximum(x, y)
    if result_dtype(x, y) not in dtypes.FLOATS:
        return m
    return where(not_equal(y, y), x, where(not_equal(x, x), y, m))


def fmin(x, y):
    m = minimum(x, y)
    if result_dtype(x, y) not in dtypes.FLOATS:
        return m
    return where(not_equal(y, y), x, where(not_equal(x, x), y, m))


def trace_(x, offset=0, axis1=0, axis2=1, dtype=None, out=None):
    """ndarray.trace: the sum along a diagonal (a masked sum, no gather)."""
    _no_extra("trace", (), {"out": out})
    x = asarray(x)
    a1, a2 = _axis(axis1, x.ndim, "trace"), _axis(axis2, x.ndim, "trace")
    if a1 == a2:
        raise ValueError(f"trace: axis1 and axis2 cannot be the same (at {user_loc()})")
    i = _emit(x._tr, "iota", shape=x.shape, dtype="int64", dimension=a1)
    j = _emit(x._tr, "iota", shape=x.shape, dtype="int64", dimension=a2)
    on = equal(add(i, offset), j)
    return sum(where(on, x, zeros_like(x)), axis=(a1, a2), dtype=dtype)


def empty_like(x, dtype=None, **kw):
    return full_like(x, 0, dtype, **kw)


def fresh_result(r, inputs):
    """numpy returns a new array unless it documents a view: a builder that handed back
    one of its inputs (x + 0 folded, astype to the same dtype, ...) gets a fresh base,
    so a later write to the result does not reach the input."""
    if isinstance(r, Tracer) and builtins.any(r is i for i in inputs):
        return fz.fresh(r)
    return r


# ---------------------------------------------------------------------------- the table
def _reshape_method(x, *shape, order="C"):
    return reshape(x, shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape, order)


def _transpose_method(x, *axes):
    return transpose(x, (axes[0] if len(axes) == 1 and isinstance(axes[0], (tuple, list)) else axes) or None)


def copy(x, order="K", subok=False):
    # a fresh base holding the same (immutable SSA) value
    return fz.fresh(asarray(x))


_view_transpose = fz.as_view(transpose, "transpose")
_view_transpose_method = fz.as_view(_transpose_method, "transpose")
_view_swapaxes = fz.as_view(swapaxes, "transpose")
_view_moveaxis = fz.as_view(moveaxis, "transpose")
_view_reshape = fz.as_view(reshape, "reshape")
_view_reshape_method = fz.as_view(_reshape_method, "reshape")
_view_ravel_c = fz.as_view(lambda x: ravel(x), "ravel")


def _ravel_perm(x, order):
    """The axis order numpy's ravel / flatten(order=) read x's elements in, as a
    permutation (None: C order). "F": first index fastest; "A": F if x is Fortran- and not
    C-contiguous; "K": the order x's elements sit in memory (x is a view's strides)."""
    if order is None or order == "C" or x.ndim < 2:
        if order not in (None, "C", "F", "A", "K"):
            raise ValueError(f"order must be one of 'C', 'F', 'A', or 'K' (got {order!r})")
        return None
    if order == "F":
        return tuple(range(x.ndim))[::-1]
    if order not in ("A", "K"):
        raise ValueError(f"order must be one of 'C', 'F', 'A', or 'K' (got {order!r})")
    lay = fz.layout(x._ensure_buffer(), x._view) if isinstance(x, Tracer) else None
    if lay is None or lay.flags.c_contiguous:
        return None
    if order == "A":
        return tuple(range(x.ndim))[::-1] if lay.flags.f_contiguous else None
    if builtins.any(st < 0 for st in lay.strides):
        raise NotImplementedError(f"ravel / flatten with order='K' of a view with negative strides "
                                  f"(at {user_loc()}); use order='C' or 'F'")
    perm = tuple(sorted(range(x.ndim), key=lambda d: -lay.strides[d]))     # stable: ties keep C order
    return None if perm == tuple(range(x.ndim)) else perm


def _view_ravel(x, order="C"):
    """np.ravel / x.ravel(order): a view where numpy's is (x is contiguous in that order)."""
    x = asarray(x)
    perm = _ravel_perm(x, order)
    if perm is None:
        return _view_ravel_c(x)
    return _view_ravel_c(fz.as_view(transpose, "transpose")(x, perm))


def _flatten(x, order="C"):
    x = asarray(x)
    perm = _ravel_perm(x, order)
    return copy(ravel(x if perm is None else transpose(x, perm)))
_view_squeeze = fz.as_view(squeeze, "reshape")
_view_expand_dims = fz.as_view(expand_dims, "reshape")


from .numpy_lib import fft as FFT, linalg as LA, math_funcs as MF, shape_funcs as SF, stats as ST  # noqa: E402

U, F, M = "ufunc", "function", "method"
# The numpy API spmd traces, one row per numpy name: the builder that emits its IR, where
# numpy users reach it -- a ufunc (np.add(x, y) on a Tracer), a function np.NAME, an
# ndarray method x.NAME(...) (numpy's methods take the function's arguments after the
# array), a method with its own argument form, Python operators (__op__ and, for binary
# ones, the reflected __rop__). trace.py installs the methods and operators from here.
API = (
    # name            builder                       surfaces   operators
    ("add",           add,                          (U,),      ("add",)),
    ("subtract",      subtract,                     (U,),      ("sub",)),
    ("multiply",      multiply,                     (U,),      ("mul",)),
    ("divide",        true_divide,                  (U,),      ()),
    ("true_divide",   true_divide,                  (U,),      ("truediv",)),
    ("floor_divide",  floor_divide,                 (U,),      ("floordiv",)),
    ("remainder",     mod,                          (U,),      ("mod",)),
    ("mod",           mod,                          (U,),      ()),
    ("power",         power,                        (U,),      ("pow",)),
    ("float_power",   lambda x, y: power(asarray(x, "float64"), y), (U,), ()),
    ("maximum",       maximum,                      (U,),      ()),
    ("minimum",       minimum,                      (U,),      ()),
    ("fmax",          fmax,                         (U,),      ()),
    ("fmin",          fmin,                         (U,),      ()),
    ("negative",      negative,                     (U,),      ("-neg",)),
    ("positive",      lambda x: x,                  (U,),      ("-pos",)),
    ("absolute",      absolute,                     (U,),      ("-abs",)),
    ("conjugate",     conjugate,                    (U, M),    ()),
    ("conj",          conjugate,                    (M,),      ()),
    ("real",          real,                         (F,),      ()),
    ("imag",          imag,                         (F,),      ()),
    ("angle",         angle,                        (F,),      ()),
    ("iscomplexobj",  iscomplexobj,                 (F,),      ()),
    ("isrealobj",     isrealobj,                    (F,),      ()),
    ("fabs",          absolute,                     (U,),      ()),
    ("sign",          sign,                         (U,),      ()),
    ("floor",         floor,                        (U,),      ()),
    ("ceil",          ceil,                         (U,),      ()),
    ("reciprocal",    reciprocal,                   (U,),      ()),
    ("exp",           exp,                          (U,),      ()),
    ("expm1",         expm1,                        (U,),      ()),
    ("log",           log,                          (U,),      ()),
    ("log1p",         log1p,                        (U,),      ()),
    ("log2",          log2,                         (U,),      ()),
    ("log10",         log10,                        (U,),      ()),
    ("tanh",          tanh,                         (U,),      ()),
    ("sinh",          sinh,                         (U,),      ()),
    ("cosh",          cosh,                         (U,),      ()),
    ("sqrt",          sqrt,                         (U,),      ()),
    ("square",        square,                       (U,),      ()),
    ("sin",           sin,                          (U,),      ()),
    ("cos",           cos,                          (U,),      ()),
    ("tan",           tan,                          (U,),      ()),
    ("equal",         equal,                        (U,),      ("=eq",)),
    ("not_equal",     not_equal,                    (U,),      ("=ne",)),
    ("less",          less,                         (U,),      ("=lt",)),
    ("less_equal",    less_equal,                   (U,),      ("=le",)),
    ("greater",       greater,                      (U,),      ("=gt",)),
    ("greater_equal", greater_equal,                (U,),      ("=ge",)),
    ("logical_and",   logical_and,                  (U,),      ()),
    ("logical_or",    logical_or,                   (U,),      ()),
    ("logical_xor",   logical_xor,                  (U,),      ()),
    ("logical_not",   logical_not,                  (U,),      ()),
    ("bitwise_and",   bitwise_and,                  (U,),      ("and",)),
    ("bitwise_or",    bitwise_or,                   (U,),      ("or",)),
    ("bitwise_xor",   bitwise_xor,                  (U,),      ("xor",)),
    ("invert",        invert,                       (U,),      ("-invert",)),
    ("left_shift",    left_shift,                   (U,),      ("lshift",)),
    ("right_shift",   right_shift,                  (U,),      ("rshift",)),
    ("matmul",        matmul,                       (U,),      ("matmul",)),
    ("sum",           sum,                          (F, M),    ()),
    ("prod",          prod,                         (F, M),    ()),
    ("mean",          mean,                         (F, M),    ()),
    ("max",           max,                          (F, M),    ()),
    ("min",           min,                          (F, M),    ()),
    ("amax",          max,                          (F,),      ()),
    ("amin",          min,                          (F,),      ()),
    ("var",           var,                          (F, M),    ()),
    ("std",           std,                          (F, M),    ()),
    ("any",           any,                          (F, M),    ()),
    ("all",           all,                          (F, M),    ()),
    ("argmax",        argmax,                       (F, M),    ()),
    ("argmin",        argmin,                       (F, M),    ()),
    ("dot",           dot,                          (F, M),    ()),
    ("vdot",          vdot,                         (F,),      ()),
    ("inner",         inner,                        (F,),      ()),
    ("outer",         outer,                        (F,),      ()),
    ("tensordot",     tensordot,                    (F,),      ()),
    ("einsum",        einsum,                       (F,),      ()),
    ("cumsum",        cumsum,                       (F, M),    ()),
    ("cumprod",       cumprod,                      (F, M),    ()),
    # -- numpy_lib/shape_funcs.py
    ("hstack",        SF.hstack,                    (F,),      ()),
    ("vstack",        SF.vstack,                    (F,),      ()),
    ("dstack",        SF.dstack,                    (F,),      ()),
    ("column_stack",  SF.column_stack,              (F,),      ()),
    ("append",        SF.append,                    (F,),      ()),
    ("split",         SF.split,                     (F,),      ()),
    ("array_split",   SF.array_split,               (F,),      ()),
    ("hsplit",        SF.hsplit,                    (F,),      ()),
    ("vsplit",        SF.vsplit,                    (F,),      ()),
    ("dsplit",        SF.dsplit,                    (F,),      ()),
    ("repeat",        SF.repeat,                    (F, M),    ()),
    ("roll",          SF.roll,                      (F,),      ()),
    ("flip",          SF.flip,                      (F,),      ()),
    ("fliplr",        SF.fliplr,                    (F,),      ()),
    ("flipud",        SF.flipud,                    (F,),      ()),
    ("rot90",         SF.rot90,                     (F,),      ()),
    ("atleast_2d",    SF.atleast_2d,                (F,),      ()),
    ("atleast_3d",    SF.atleast_3d,                (F,),      ()),
    ("broadcast_arrays", SF.broadcast_arrays,       (F,),      ()),
    ("meshgrid",      SF.meshgrid,                  (F,),      ()),
    ("pad",           SF.pad,                       (F,),      ()),
    ("diff",          SF.diff,                      (F,),      ()),
    ("gradient",      SF.gradient,                  (F,),      ()),
    ("tril",          SF.tril,                      (F,),      ()),
    ("triu",          SF.triu,                      (F,),      ()),
    ("diag",          SF.diag,                      (F,),      ()),
    ("diagonal",      SF.diagonal,                  (F, M),    ()),
    ("trace",         SF.trace,                     (F,),      ()),
    ("kron",          SF.kron,                      (F,),      ()),
    ("cross",         SF.cross,                     (F,),      ()),
    # -- numpy_lib/math_funcs.py
    ("isnan",         MF.isnan,                     (U,),      ()),
    ("isinf",         MF.isinf,                     (U,),      ()),
    ("isfinite",      MF.isfinite,                  (U,),      ()),
    ("isposinf",      MF.isposinf,                  (F,),      ()),
    ("isneginf",      MF.isneginf,                  (F,),      ()),
    ("nan_to_num",    MF.nan_to_num,                (F,),      ()),
    ("signbit",       MF.signbit,                   (U,),      ()),
    ("copysign",      MF.copysign,                  (U,),      ()),
    ("arctan2",       MF.arctan2,                   (U,),      ()),
    ("arctan",        MF.arctan,                    (U,),      ()),
    ("arcsin",        MF.arcsin,                    (U,),      ()),
    ("arccos",        MF.arccos,                    (U,),      ()),
    ("hypot",         MF.hypot,                     (U,),      ()),
    ("deg2rad",       MF.deg2rad,                   (U,),      ()),
    ("rad2deg",       MF.rad2deg,                   (U,),      ()),
    ("radians",       MF.deg2rad,                   (U,),      ()),
    ("degrees",       MF.rad2deg,                   (U,),      ()),
    ("sinc",          MF.sinc,                      (F,),      ()),
    ("arcsinh",       MF.arcsinh,                   (U,),      ()),
    ("arccosh",       MF.arccosh,                   (U,),      ()),
    ("arctanh",       MF.arctanh,                   (U,),      ()),
    ("exp2",          MF.exp2,                      (U,),      ()),
    ("cbrt",          MF.cbrt,                      (U,),      ()),
    ("trunc",         MF.trunc,                     (U,),      ()),
    ("fix",           MF.fix,                       (F,),      ()),
    ("rint",          MF.rint,                      (U,),      ()),
    ("round",         MF.round_,                    (F, M),    ()),
    ("around",        MF.round_,                    (F,),      ()),
    ("fmod",          MF.fmod,                      (U,),      ()),
    ("divmod",        MF.divmod_,                   (U,),      ("divmod",)),
    ("logaddexp",     MF.logaddexp,                 (U,),      ()),
    ("logaddexp2",    MF.logaddexp2,                (U,),      ()),
    ("heaviside",     MF.heaviside,                 (U,),      ()),
    ("isclose",       MF.isclose,                   (F,),      ()),
    ("allclose",      MF.allclose,                  (F,),      ()),
    ("array_equal",   MF.array_equal,               (F,),      ()),
    ("select",        MF.select,                    (F,),      ()),
    # -- numpy_lib/stats.py
    ("sort",          ST.sort,                      (F,),      ()),
    ("argsort",       ST.argsort,                   (F, M),    ()),
    ("median",        ST.median,                    (F,),      ()),
    ("percentile",    ST.percentile,                (F,),      ()),
    ("quantile",      ST.quantile,                  (F,),      ()),
    ("average",       ST.average,                   (F,),      ()),
    ("nansum",        ST.nansum,                    (F,),      ()),
    ("nanprod",       ST.nanprod,                   (F,),      ()),
    ("nanmean",       ST.nanmean,                   (F,),      ()),
    ("nanvar",        ST.nanvar,                    (F,),      ()),
    ("nanstd",        ST.nanstd,                    (F,),      ()),
    ("nanmax",        ST.nanmax,                    (F,),      ()),
    ("nanmin",        ST.nanmin,                    (F,),      ()),
    ("ptp",           ST.ptp,                       (F,),      ()),
    ("count_nonzero", ST.count_nonzero,             (F,),      ()),
    ("searchsorted",  ST.searchsorted,              (F, M),    ()),
    ("digitize",      ST.digitize,                  (F,),      ()),
    ("isin",          ST.isin,                      (F,),      ()),
    ("bincount",      ST.bincount,                  (F,),      ()),
    ("histogram",     ST.histogram,                 (F,),      ()),
    ("interp",        ST.interp,                    (F,),      ()),
    ("nanmedian",     ST.nanmedian,                 (F,),      ()),
    ("nanpercentile", ST.nanpercentile,             (F,),      ()),
    ("nanquantile",   ST.nanquantile,               (F,),      ()),
    # -- numpy_lib/linalg.py (np.linalg.NAME)
    ("linalg.inv",    LA.inv,                       (F,),      ()),
    ("linalg.det",    LA.det,                       (F,),      ()),
    ("linalg.slogdet", LA.slogdet,                  (F,),      ()),
    ("linalg.cholesky", LA.cholesky,                (F,),      ()),
    ("linalg.solve",  LA.solve,                     (F,),      ()),
    ("linalg.eigh",   LA.eigh,                      (F,),      ()),
    ("linalg.eigvalsh", LA.eigvalsh,                (F,),      ()),
    ("linalg.svd",    LA.svd,                       (F,),      ()),
    ("linalg.svdvals", LA.svdvals,                  (F,),      ()),
    ("linalg.qr",     LA.qr,                        (F,),      ()),
    ("linalg.pinv",   LA.pinv,                      (F,),      ()),
    ("linalg.lstsq",  LA.lstsq,                     (F,),      ()),
    ("linalg.matrix_power", LA.matrix_power,        (F,),      ()),
    ("linalg.norm",   LA.norm,                      (F,),      ()),
    ("linalg.vector_norm", LA.vector_norm,          (F,),      ()),
    ("linalg.matrix_norm", LA.matrix_norm,          (F,),      ()),
    ("linalg.matrix_rank", LA.matrix_rank,          (F,),      ()),
    ("linalg.cond",   LA.cond,                      (F,),      ()),
    ("linalg.multi_dot", LA.multi_dot,              (F,),      ()),
    # -- numpy_lib/fft.py (np.fft.NAME)
    ("fft.fft",         FFT.fft,                       (F,),      ()),
    ("fft.ifft",        FFT.ifft,                      (F,),      ()),
    ("fft.rfft",        FFT.rfft,                      (F,),      ()),
    ("fft.irfft",       FFT.irfft,                     (F,),      ()),
    ("fft.hfft",        FFT.hfft,                      (F,),      ()),
    ("fft.ihfft",       FFT.ihfft,                     (F,),      ()),
    ("fft.fft2",        FFT.fft2,                      (F,),      ()),
    ("fft.ifft2",       FFT.ifft2,                     (F,),      ()),
    ("fft.rfft2",       FFT.rfft2,                     (F,),      ()),
    ("fft.irfft2",      FFT.irfft2,                    (F,),      ()),
    ("fft.fftn",        FFT.fftn,                      (F,),      ()),
    ("fft.ifftn",       FFT.ifftn,                     (F,),      ()),
    ("fft.rfftn",       FFT.rfftn,                     (F,),      ()),
    ("fft.irfftn",      FFT.irfftn,                    (F,),      ()),
    ("fft.fftshift",    FFT.fftshift,                  (F,),      ()),
    ("fft.ifftshift",   FFT.ifftshift,                 (F,),      ()),
    ("transpose",     _view_transpose,              (F,),      ()),
    ("transpose",     _view_transpose_method,       (M,),      ()),
    ("reshape",       _view_reshape,                (F,),      ()),
    ("reshape",       _view_reshape_method,         (M,),      ()),
    ("swapaxes",      _view_swapaxes,               (F, M),    ()),
    ("moveaxis",      _view_moveaxis,               (F,),      ()),
    ("concatenate",   concatenate,                  (F,),      ()),
    ("stack",         stack,                        (F,),      ()),
    ("broadcast_to",  broadcast_to,                 (F,),      ()),
    ("expand_dims",   _view_expand_dims,            (F,),      ()),
    ("squeeze",       _view_squeeze,                (F, M),    ()),
    ("ravel",         _view_ravel,                  (F, M),    ()),
    ("flatten",       _flatten,                     (M,),      ()),
    ("atleast_1d",    SF.atleast_1d,                (F,),      ()),
    ("clip",          clip,                         (F, M),    ()),
    ("where",         where,                        (F,),      ()),
    ("zeros_like",    zeros_like,                   (F,),      ()),
    ("ones_like",     ones_like,                    (F,),      ()),
    ("full_like",     full_like,                    (F,),      ()),
    ("tile",          tile,                         (F,),      ()),
    ("take",          take,                         (F, M),    ()),
    ("copy",          copy,                         (F, M),    ()),
    ("shape",         lambda x: asarray(x).shape,   (F,),      ()),
    ("ndim",          lambda x: asarray(x).ndim,    (F,),      ()),
    ("size",          lambda x: asarray(x).size,    (F,),      ()),
    ("result_type",   lambda *xs: np.dtype(result_dtype(*xs)), (F,), ()),
    ("asarray",       lambda x, dtype=None, **k: asarray(x, dtype), (F,), ()),
    ("array",         lambda x, dtype=None, copy=True, **k: fz.fresh(asarray(x, dtype)), (F,), ()),
    ("astype",        lambda x, dtype, copy=True, **k: astype(x, dtype), (F, M), ()),
    ("getitem",       getitem,                      (),        ("getitem",)),
    # writes (functionalize.py) and indexing (indexing.py)
    ("copyto",        fz.copyto,                    (F,),      ()),
    ("fill",          fz.fill,                      (M,),      ()),
    ("put",           put,                          (F, M),    ()),
    ("put_along_axis", put_along_axis,              (F,),      ()),
    ("take_along_axis", take_along_axis,            (F,),      ()),
    ("fill_diagonal", fill_diagonal,                (F,),      ()),
    ("ix_",           ix_,                          (F,),      ()),
    ("empty_like",    empty_like,                   (F,),      ()),
    ("trace",         trace_,                       (M,),      ()),
)

UFUNCS = {name: f for name, f, where_, _ in API if U in where_}
def _np_attr(name):
    """np.NAME, or np.linalg.NAME for "linalg.NAME" (np.fft.NAME for "fft.NAME"); None where
    this numpy has none."""
    obj = np
    for part in name.split("."):
        obj = getattr(obj, part, None)
    return obj


FUNCTIONS = {_np_attr(name): f for name, f, where_, _ in API if F in where_ and _np_attr(name) is not None}
METHODS = {name: f for name, f, where_, _ in API if M in where_}
UFUNC_REDUCE = {"add": sum, "multiply": prod, "maximum": max, "minimum": min}
# ufunc.accumulate: the cumulative op's kind
UFUNC_ACCUMULATE = {"add": "sum", "multiply": "prod", "maximum": "max", "minimum": "min"}


def operators():
    """Python's operator methods -> builders: "add" gives __add__ and the reflected
    __radd__, "-neg" a unary __neg__, "=eq" a comparison (Python reflects those itself)."""
    out = {}
    for _, f, _, ops in API:
        for o in ops:
            if o[0] in "-=":
                out[f"__{o[1:]}__"] = f
            else:
                out[f"__{o}__"] = f
                out[f"__r{o}__"] = (lambda g: lambda x, y: g(y, x))(f)
    out.pop("__rgetitem__")
    out["__pow__"] = _pow_operator
    return out


INPLACE = ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul", "and", "or", "xor")


def inplace_operators():
    """x op= y: numpy stores op(x, y) into x (functionalize.inplace)."""
    ops = operators()
    return {f"__i{o}__": fz.inplace(ops[f"__{o}__"], o) for o in INPLACE}


def dispatch_ufunc(ufunc, method, inputs, kwargs):
    name = ufunc.__name__
    out = kwargs.pop("out", None)
    if builtins.any(o is not None for o in (out if isinstance(out, tuple) else (out,))):
        r = dispatch_ufunc(ufunc, method, inputs, kwargs)
        return fz.store_out(out, r, f"np.{name}" + ("" if method == "__call__" else f".{method}"))
    if method == "at":
        return ufunc_at(ufunc, *inputs)
    dtype = kwargs.pop("dtype", None)
    if method == "__call__" and name in UFUNCS:
        _no_extra(name, (), kwargs)
        r = UFUNCS[name](*inputs)
        return fresh_result(astype(r, dtype) if dtype is not None else r, inputs)
    if method == "reduce" and name in UFUNC_REDUCE:
        axis = kwargs.pop("axis", 0)
        if dtype is not None:
            if name not in ("add", "multiply"):
                raise NotImplementedError(f"np.{name}.reduce with dtype= (at {user_loc()})")
            kwargs["dtype"] = dtype
        return UFUNC_REDUCE[name](inputs[0], axis=axis, **kwargs)
    if method == "accumulate" and name in UFUNC_ACCUMULATE:
        _no_extra(f"{name}.accumulate", (), {k: v for k, v in kwargs.items() if k != "axis"})
        x = asarray(inputs[0])
        kind = UFUNC_ACCUMULATE[name]
        if kind in ("sum", "prod"):      # numpy promotes small ints and bools, as np.cumsum does
            return _cumulative(kind, x, kwargs.get("axis", 0), dtype, _sum_dtype)
        if x.value.dtype == "bool" and dtype is None:   # a running any / all
            return astype(_cumulative(kind, astype(x, "int32"), kwargs.get("axis", 0), None,
                                      lambda v: v.value.dtype), "bool")
        return _cumulative(kind, x, kwargs.get("axis", 0), dtype, lambda v: v.value.dtype)
    if method == "outer" and name in UFUNCS and len(inputs) == 2:
        # every element of a with every element of b: a's dims, then b's
        _no_extra(f"{name}.outer", (), kwargs)
        a, b = asarray(inputs[0]), asarray(inputs[1])
        r = UFUNCS[name](reshape(a, a.shape + (1,) * b.ndim), b)
        return fresh_result(astype(r, dtype) if dtype is not None else r, inputs)
    what = f"np.{name}" + ("" if method == "__call__" else f".{method}")
    raise NotImplementedError(f"{what} is not supported on traced arrays in spmd (at {user_loc()}); "
                              f"supported ufuncs: {', '.join(sorted(UFUNCS))}")


def dispatch_function(func, args, kwargs):
    impl = FUNCTIONS.get(func)
    if impl is None:
        module = getattr(func, "__module__", "numpy") or "numpy"
        module = "np" + module[len("numpy"):] if module.startswith("numpy") else module
        raise NotImplementedError(f"{module}.{func.__name__} is not supported on traced arrays in spmd "
                                  f"(at {user_loc()})")
    out = kwargs.pop("out", None)
    r = impl(*args, **kwargs)
    if out is not None:
        return fz.store_out(out, r, f"np.{func.__name__}")
    return r if func in (np.asarray, np.asanyarray) else fresh_result(r, args)


