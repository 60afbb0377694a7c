"""numpy's elementwise functions on Tracers that map onto the IR's elementwise ops, with
numpy's semantics made explicit: NEP 50 promotion, broadcasting, the dtypes of float
ufuncs, and the integer and float corner cases numpy defines (floor division and
remainder signs, integer reciprocal, bool arithmetic). Compositions of several ops
beyond these (expm1, sinh, arctan, rint, ...) are in numpy_lib/math_funcs.py."""
from __future__ import annotations

import numpy as np

from ..errors import ShapeError, user_loc
from ..ir import dtypes
from ..ir.ops.registry import splat
from ..ir.ops.value_ranges import int_range
from ..ir.ops.names import (
    ABS, ADD, AND, ATAN2, BITCAST, COMPARE, CONJ, COS, DIVIDE, EXP, FLOOR, IMAG, LOG, LOG1P, LOGISTIC,
    MAXIMUM, MINIMUM, MULTIPLY, NEGATE, NOT, OR, POWER, REAL, REMAINDER, RSQRT, SELECT, SHIFT_LEFT,
    SHIFT_RIGHT, SIGN, SIN, SQRT, SUBTRACT, TANH, XOR
)
from . import core, value_bounds
from .trace import Tracer


def _unary_float(name):
    def f(x, *args, **kwargs):
        core.no_extra(name, args, kwargs)
        x = core.asarray(x)
        return core.emit(x._tr, name, core.asarray(x, core.ufunc_float_dtype(x)))
    f.__name__ = name
    return f


def add(x, y): return core.binary(ADD, x, y) if core.result_dtype(x, y) != "bool" else logical_or(x, y)


def subtract(x, y): return core.binary(SUBTRACT, x, y)


def multiply(x, y): return core.binary(MULTIPLY, x, y) if core.result_dtype(x, y) != "bool" else logical_and(x, y)


def require_ordered(name, *xs):
    """numpy orders complex numbers lexicographically; spmd does not: say so, never guess."""
    if dtypes.is_complex(core.result_dtype(*xs)):
        raise TypeError(f"np.{name} of complex numbers is not supported in spmd (numpy orders them "
                        f"lexicographically); compare np.abs(z) or z.real instead (at {user_loc()})")


def maximum(x, y):
    require_ordered("maximum", x, y)
    return core.binary(MAXIMUM, x, y) if core.result_dtype(x, y) != "bool" else logical_or(x, y)


def minimum(x, y):
    require_ordered("minimum", x, y)
    return core.binary(MINIMUM, x, y) if core.result_dtype(x, y) != "bool" else logical_and(x, y)


def true_divide(x, y): return core.binary(DIVIDE, x, y, dtype=core.float_dtype(x, y))


divide = true_divide


def _bools_as_int8(x, y):
    """numpy divides, powers and shifts bools as int8 (True // True is int8 1)."""
    if core.result_dtype(x, y) != "bool":
        return x, y
    t = core.trace_of(x, y)
    return core.asarray(x, "int8", t), core.asarray(y, "int8", t)


def floor_divide(x, y):
    x, y = _bools_as_int8(x, y)
    dt = core.result_dtype(x, y)
    a, b = core.promote(x, y, op="floor_divide")
    if dt in dtypes.FLOATS:
        # numpy's npy_floor_divide: exact where floor(a / b) is not (7.0 // 0.1 == 69.0)
        r = core.emit(a._tr, REMAINDER, a, b)
        div = true_divide(subtract(a, r), b)
        div = where(logical_and(not_equal(r, 0), not_equal(less(b, 0), less(r, 0))), subtract(div, 1), div)
        fl = floor(div)
        fl = where(greater(subtract(div, fl), 0.5), add(fl, 1), fl)
        # a zero quotient has the sign of a / b (-0.0 // 2.5 is -0.0, -2.5 // -3e10 is +0.0)
        fl = where(equal(div, 0), copysign(core.asarray(np.zeros((), dt), t=a._tr), true_divide(a, b)), fl)
        return where(equal(b, 0), true_divide(a, b), fl)
    q = core.emit(a._tr, DIVIDE, a, b)            # truncates toward zero
    r = core.emit(a._tr, REMAINDER, a, b)
    fix = logical_and(not_equal(r, 0), not_equal(less(r, 0), less(b, 0)))
    return subtract(q, core.astype(fix, dt))


def mod(x, y):
    a, b = core.promote(*_bools_as_int8(x, y), op="remainder")
    r = core.emit(a._tr, REMAINDER, a, b)         # sign of the dividend (C fmod)
    fix = logical_and(not_equal(r, 0), not_equal(less(r, 0), less(b, 0)))
    out = where(fix, add(r, b), r)
    if a.dtype in dtypes.FLOATS:                 # numpy: a zero remainder has the divisor's sign
        out = where(equal(r, 0), copysign(core.asarray(np.zeros((), a.dtype), t=a._tr), b), out)
    else:
        n = splat(b.value)                       # by one integer n: 0..n-1 (n..0 for n < 0)
        if n is not None and n != 0:
            value_bounds.known(out, *((0, int(n) - 1) if n > 0 else (int(n) + 1, 0)))
    return out


remainder = mod


def _no_negative_int_exponent(x, y):
    """numpy raises for an integer power with a negative integer exponent: spmd too, as
    it traces where the exponent is known then, else after the run (core.error_at_run;
    inside a loop body or a branch a traced one is not checked)."""
    if not dtypes.is_int(core.result_dtype(x, y)):
        return
    if isinstance(y, Tracer):
        error_if_outside(y, 0, None, ValueError, "Integers to negative integer powers are not allowed.")
        return
    e = np.asarray(y)
    if e.dtype.kind in "iu" and e.size and (e < 0).any():
        raise ValueError(f"Integers to negative integer powers are not allowed. (at {user_loc()})")


def power(x, y):
    x, y = _bools_as_int8(x, y)                   # numpy's power of bools is int8
    _no_negative_int_exponent(x, y)
    if isinstance(y, int) and not isinstance(y, bool) and y == 2:
        return multiply(*[core.asarray(x, core.result_dtype(x, y))] * 2)     # np.power(bool, 2) is int64
    if isinstance(y, (float, np.floating)) and y == 0.5:
        # numpy computes an array to a scalar power 0.5 as np.sqrt (so (-inf) ** 0.5 is nan
        # and (-0.0) ** 0.5 is -0.0, where pow() gives inf and 0.0); an array of exponents
        # goes through pow()
        x = core.asarray(x)
        if not getattr(x, "weak", False):
            return sqrt(core.asarray(x, core.result_dtype(x, y)))
    return core.binary(POWER, x, y)


def pow_operator(x, y):
    """x ** y: numpy's ndarray.__pow__ computes bool_array ** 2 as np.square, an int8."""
    if isinstance(x, Tracer) and not getattr(x, "weak", False) and x.dtype == np.bool_ \
            and isinstance(y, int) and not isinstance(y, bool) and y == 2:
        return square(x)
    return power(x, y)


def square(x):
    x = core.asarray(x)
    if x.dtype == np.bool_:                       # numpy: int8
        x = core.asarray(x, "int8")
    return multiply(x, x)


def negative(x):
    x = core.asarray(x)
    return core.emit(x._tr, NEGATE, x)


def absolute(x):
    x = core.asarray(x)
    return x if x.dtype == np.bool_ else core.emit(x._tr, ABS, x)


def sign(x):
    x = core.asarray(x)
    return core.emit(x._tr, SIGN, x)


def floor(x):
    x = core.asarray(x)
    return x if x.dtype.kind in "iub" else core.emit(x._tr, FLOOR, core.asarray(x, core.float_dtype(x)))


def ceil(x):
    return negative(floor(negative(x)))


exp = _unary_float(EXP)


log = _unary_float(LOG)


log1p = _unary_float(LOG1P)


tanh = _unary_float(TANH)


sqrt = _unary_float(SQRT)


sin = _unary_float(SIN)


cos = _unary_float(COS)


def _compare(direction):
    def f(x, y):
        if direction not in ("EQ", "NE"):
            require_ordered({"LT": "less", "LE": "less_equal", "GT": "greater", "GE": "greater_equal"}[direction], x, y)
        known = _compare_past_the_dtype(direction, x, y)
        if known is not None:
            return known
        a, b = core.promote(x, y, dtype=_by_value(x, y), op=f"compare {direction}")
        return core.emit(a._tr, COMPARE, a, b, direction=direction)
    return f


def _weak_int(x) -> bool:
    return isinstance(x, Tracer) and x.weak and x.value.dtype == "int64"


def _by_value(x, y):
    """numpy 2 compares an integer array with a Python int by value, whether or not its
    dtype holds it: with a traced one (a jit argument) both are compared as int64, which
    holds both, except against uint64 (then as uint64: a negative int is refused with
    the OverflowError of arithmetic, where numpy compares it)."""
    for arr, c in ((x, y), (y, x)):
        if _weak_int(c) and isinstance(arr, Tracer) and not arr.weak and np.dtype(arr.dtype).kind in "iu":
            if arr.dtype == np.uint64:
                return None
            return "int64"
    return None


def _compare_past_the_dtype(direction, x, y):
    """numpy 2 compares an integer array with a Python int its dtype cannot hold by value
    (uint8 < 300 is all True, uint64 == -1 all False) where arithmetic would overflow."""
    for arr, c, flip in ((x, y, False), (y, x, True)):
        if type(c) is int and isinstance(arr, Tracer) and not arr.weak and np.dtype(arr.dtype).kind in "iu":
            info = np.iinfo(arr.dtype)
            if info.min <= c <= info.max:
                return None
            above = c > info.max                 # every element is below c
            d = {"LT": "GT", "LE": "GE", "GT": "LT", "GE": "LE"}.get(direction, direction) if flip else direction
            value = {"EQ": False, "NE": True, "LT": above, "LE": above, "GT": not above, "GE": not above}[d]
            return core.full_like(arr, value, dtype="bool")
    return None


equal, not_equal = _compare("EQ"), _compare("NE")


less, less_equal = _compare("LT"), _compare("LE")


greater, greater_equal = _compare("GT"), _compare("GE")


def _logical(name):
    def f(x, y):
        a, b = core.promote(core.asarray(x, "bool") if not _is_bool(x) else x,
                        core.asarray(y, "bool") if not _is_bool(y) else y, dtype="bool", op=f"logical_{name}")
        return core.emit(a._tr, name, a, b)
    return f


def _is_bool(x):
    return isinstance(x, bool) or (hasattr(x, "dtype") and np.dtype(x.dtype) == np.bool_)


def _bitwise(name):
    def f(x, y):
        if core.result_dtype(x, y) in dtypes.FLOATS:
            raise TypeError(f"np.bitwise_{name} is not defined for floats (at {user_loc()})")
        return core.binary(name, x, y)
    return f


logical_and, logical_or, logical_xor = _logical(AND), _logical(OR), _logical(XOR)


def error_if_outside(k, lo, hi, exc, message):
    """numpy's `exc` where any element of the traced integer k falls outside [lo, hi)
    (`hi` None: no upper end), raised after the run (core.error_at_run). Nothing is
    checked, and nothing costs, where the trace already bounds k within (value_ranges)."""
    have_lo, have_hi = int_range(k.value, k._tr.ranges)
    if have_lo is None and k.dtype.kind in "ub":
        have_lo = 0
    if have_lo is not None and have_lo >= lo and (hi is None or (have_hi is not None and have_hi < hi)):
        return
    bad = less(k, lo) if hi is None else logical_or(less(k, lo), greater_equal(k, hi))
    core.error_at_run_if_any(bad, exc, message)


bitwise_and, bitwise_or, bitwise_xor = _bitwise(AND), _bitwise(OR), _bitwise(XOR)


def _shift(name, what):
    def f(x, y):
        x, y = _bools_as_int8(x, y)               # numpy shifts bools as int8
        dt = core.result_dtype(x, y)
        if dt not in dtypes.INTS:
            raise TypeError(f"np.{what} is defined for integers, not {dt} (at {user_loc()})")
        return core.binary(name, x, y)
    f.__name__ = what
    return f


left_shift, right_shift = _shift(SHIFT_LEFT, "left_shift"), _shift(SHIFT_RIGHT, "right_shift")


def reciprocal(x):
    x = core.asarray(x)
    if x.dtype == np.bool_:                       # numpy: int8
        x = core.asarray(x, "int8")
    if x.dtype.kind in "iu":
        # numpy divides in the integer type: 1 and -1 stay, larger magnitudes give 0, and
        # 1 / 0 gives what numpy's loop gives for it: the minimum of int32 and int64 (their
        # division), 0 for the narrower and the unsigned ints
        dt = x.dtype.name
        r = where(equal(x, 1), x, where(equal(x, -1), x, core.asarray(0, dt)))
        return where(equal(x, 0), core.asarray(np.iinfo(dt).min if dt in ("int32", "int64") else 0, dt), r)
    return true_divide(1, x)


def logical_not(x):
    x = core.asarray(x, "bool")
    return core.emit(x._tr, NOT, x)


def invert(x):
    x = core.asarray(x)
    if dtypes.is_float(x.value.dtype):
        raise TypeError(f"~ is not defined for floats (at {user_loc()})")
    return core.emit(x._tr, NOT, x)


def where(cond, x=None, y=None):
    if x is None or y is None:
        raise NotImplementedError(f"np.where with one argument has a data-dependent shape; "
                                  f"not supported in spmd (at {user_loc()})")
    t = core.trace_of(cond, x, y)
    dt = core.result_dtype(x, y)
    xs = [core.asarray(x, dt, t), core.asarray(y, dt, t), core.asarray(cond, "bool", t)]
    try:
        shape = np.broadcast_shapes(*[v.shape for v in xs])
    except ValueError:
        raise ShapeError(f"where at {user_loc()}: condition, x and y could not be broadcast together, "
                         f"shapes {list(xs[2].shape)}, {list(xs[0].shape)}, {list(xs[1].shape)}") from None
    a, b, c = [core.broadcast_to(v, shape) for v in xs]
    return core.emit(t, SELECT, c, a, b)


def clip(x, a_min=None, a_max=None, **kw):
    a_min = kw.pop("min", a_min)
    a_max = kw.pop("max", a_max)
    core.no_extra("clip", (), kw)
    kind = np.dtype(x.dtype).kind if isinstance(x, Tracer) and not x.weak else ""
    if kind in ("i", "u"):
        # numpy 2: a Python int bound past the dtype's end it bounds does nothing (uint8
        # clipped to [-1, 300]); one past the other end is an OverflowError, as in maximum
        info = np.iinfo(x.dtype)
        if type(a_min) is int and a_min < info.min:
            a_min = None
        if type(a_max) is int and a_max > info.max:
            a_max = None
    if a_min is not None:
        x = maximum(x, a_min)
    if a_max is not None:
        x = minimum(x, a_max)
    return x


def real(x):
    x = core.asarray(x)
    return core.emit(x._tr, REAL, x) if dtypes.is_complex(x.value.dtype) else x


def imag(x):
    x = core.asarray(x)
    return core.emit(x._tr, IMAG, x) if dtypes.is_complex(x.value.dtype) else core.zeros_like(x)


def conjugate(x):
    x = core.asarray(x)
    return core.emit(x._tr, CONJ, x) if dtypes.is_complex(x.value.dtype) else x


def angle(z, deg=False):
    z = core.asarray(z)
    if dtypes.is_complex(z.value.dtype):
        re, im = real(z), imag(z)
    else:
        re = core.asarray(z, core.float_dtype(z))
        im = core.zeros_like(re)
    a = core.emit(z._tr, ATAN2, im, re)
    return multiply(a, 180.0 / np.pi) if deg else a


def iscomplexobj(x):
    return dtypes.is_complex(core.asarray(x).value.dtype)


def isrealobj(x):
    return not iscomplexobj(x)


# Python bools in numpy and while tracing (known from the dtype); eager mode reads the value
iscomplexobj.python_result = isrealobj.python_result = bool


def logistic(x):
    x = core.asarray(x)
    return core.emit(x._tr, LOGISTIC, core.asarray(x, core.float_dtype(x)))


def rsqrt(x):
    x = core.asarray(x)
    return core.emit(x._tr, RSQRT, core.asarray(x, core.float_dtype(x)))


def fmax(x, y):
    """numpy's fmax ignores a NaN when the other operand is a number."""
    m = maximum(x, y)
    if core.result_dtype(x, y) not in dtypes.FLOATS:
        return m
    return where(not_equal(y, y), x, where(not_equal(x, x), y, m))


def fmin(x, y):
    m = minimum(x, y)
    if core.result_dtype(x, y) not in dtypes.FLOATS:
        return m
    return where(not_equal(y, y), x, where(not_equal(x, x), y, m))


_SIGNED_OF_SIZE = {"float64": "int64", "float32": "int32"}


def signbit(x):
    x = core.asarray(x)
    if x.dtype.kind in "b":
        return core.full_like(x, False, dtype="bool")
    if x.dtype.kind in "iu":
        return less(x, 0)
    if x.dtype.name in _SIGNED_OF_SIZE:      # the bit itself: a NaN's sign too, which no comparison sees
        return less(core.emit(x._tr, BITCAST, x, dtype=_SIGNED_OF_SIZE[x.dtype.name]), 0)
    # -0.0 is the one negative zero: 1 / -0.0 is -inf (the sign of a NaN is not visible here)
    neg_zero = logical_and(equal(x, 0), less(true_divide(1, where(equal(x, 0), x, 1)), 0))
    return logical_or(less(x, 0), neg_zero)


def copysign(x1, x2):
    a, b = core.promote(x1, x2, dtype=core.ufunc_dtype(np.copysign, x1, x2), op="copysign")
    mag = absolute(a)
    return where(signbit(b), negative(mag), mag)
