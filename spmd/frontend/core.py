"""The helpers every numpy builder shares: the trace an op goes into, emitting an op on
Tracers, numpy's dtype rules (NEP 50 promotion, the dtypes of float ufuncs), turning any
array-like into a Tracer (asarray, astype, broadcast_to), axis normalisation, the check
for arguments spmd does not take, and arrays filled like another (zeros_like, ...)."""
from __future__ import annotations

import builtins

import numpy as np

from ..errors import ShapeError, TraceError, user_loc
from ..ir import dtypes, get_op
from ..ir.ops.names import BROADCAST_IN_DIM, CONCATENATE, CONVERT, REDUCE, RESHAPE
from . import int_arguments, views
from .trace import Hint, Tracer, current_trace, resolve


def trace_of(*xs):
    """The Trace recording the first Tracer among xs, else the current one."""
    for x in xs:
        if isinstance(x, Tracer):
            return x._tr
    t = current_trace()
    if t is None:
        raise TraceError("spmd numpy function called outside of tracing")
    return t


def emit(t, name, *tracers, **attrs):
    """Op `name` on the Values of `tracers`, recorded in trace t: its result as a Tracer
    (an elementwise op's laid out as numpy lays it out, see keep_layout)."""
    r = Tracer(t.emit(name, *[x.value for x in tracers], **attrs), t)
    if get_op(name).fusion == "elementwise":
        keep_layout(r, *tracers)
    return r


# -- numpy's memory layout of new arrays (it decides whether a later reshape is a view) -----
def keep_layout(r, *xs):
    """r, new from xs elementwise (or a sort, a copy): numpy lays it out like them
    (order="K"). Worked out only if it is needed, and only if some x is not in C order."""
    if r.ndim > 1 and not builtins.all(not isinstance(x, Tracer) or x._c_order() for x in xs):
        xs, shape = tuple(x for x in xs if isinstance(x, Tracer) and x.ndim), r.shape
        r._hint = Hint(lambda *lays: views.keep_order(list(lays), shape), xs)
    return r


def order_like(r, x):
    """r, a new array of x's rank made from x alone (np.copy, np.sort, np.fft.fft(x, n),
    np.zeros_like(x, shape)): numpy lays it out in x's order of axes (views.order_of). A
    broadcast of a C-order x, C order for elementwise ops, is not for these: its repeated
    axes go innermost."""
    plain_c = x._c_order() and (x._buf is not None or x._hint is None)
    if r.ndim > 1 and r.ndim == x.ndim and not plain_c:
        shape = r.shape
        r._hint = Hint(lambda lay: views.dense(shape, views.order_of(lay)), (x,))
    return r


def reduce_layout(r, x, axes, keepdims):
    """r, x reduced over axes: numpy lays it out in x's order of the axes it keeps."""
    if r.ndim > 1 and not x._c_order():
        r._hint = Hint(lambda lay: views.reduced(lay, axes, keepdims), (x,))
    return r


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
        return _sequence_dtype(x)
    if hasattr(x, "__array__") and hasattr(x, "dtype") and hasattr(x, "shape"):
        return np.dtype(x.dtype)          # an array-like (an spmd.Array closed over): a constant
    raise TypeError(f"cannot use {type(x).__name__} {x!r} as an array")


def _sequence_dtype(xs):
    """numpy's dtype of np.asarray(xs) for a list that may hold traced values: each element
    counts as an array of its dtype (a Python number as numpy's default one), not weakly."""
    def one(e):
        e = resolve(e)
        if isinstance(e, Tracer):
            return np.dtype(e.value.dtype)
        return _sequence_dtype(e) if isinstance(e, (list, tuple)) else np.asarray(e).dtype
    if not xs:
        return np.asarray(xs).dtype
    return np.result_type(*[one(e) for e in xs])


def result_dtype(*xs) -> str:
    dt = dtypes.result_type(*[_dtype_token(x) for x in xs])
    return dtypes.canon(dt)


def sample(x):
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
        dt = np.asarray(ufunc(*[sample(x) for x in xs])).dtype
    if dt.name not in dtypes.DTYPES:
        raise TypeError(f"np.{ufunc.__name__} of {', '.join(str(np.asarray(sample(x)).dtype) for x in xs)} "
                        f"gives {dt.name} in numpy, which spmd does not support; convert to float32 or "
                        f"float64 first (at {user_loc()})")
    return dt.name


def check_int_fits(x, dtype, loc=None):
    """numpy 2 (NEP 50): a Python int stored into or combined with an integer array of
    a dtype it does not fit is an OverflowError, never a wrapped value. `loc`: the user's
    line, where it is not the current one (a jit argument checked at a call). A traced
    Python int (a weak int64 Tracer) is recorded for jit to check on each call."""
    if isinstance(x, int) and not isinstance(x, bool) and np.dtype(dtype).kind in "iu" \
            and not np.iinfo(dtype).min <= x <= np.iinfo(dtype).max:
        raise OverflowError(f"Python integer {x} out of bounds for {np.dtype(dtype).name} (at {loc or user_loc()})")
    if isinstance(x, Tracer) and x.weak and x.value.dtype == "int64" and np.dtype(dtype).kind in "iu" \
            and dtypes.canon(dtype) != "int64":
        int_arguments.must_fit(x, dtypes.canon(dtype))     # traced: checked on every call


def error_at_run(cond, exc, message) -> bool:
    """Python raises `exc` here where the traced 0-d bool `cond` holds: the program
    computes it and jit raises after the run (before any argument is written back),
    naming the user's line. False where that cannot be (inside a loop body or branch,
    which runs many times or not at all): the caller then does what it did without."""
    t = current_trace()
    if t is None or t.parent is not None or cond._tr is not t:
        return False
    t.graph.errors.append((cond.value, exc, f"{message} (at {user_loc()})"))
    return True


def error_at_run_if_any(bad, exc, message) -> bool:
    """error_at_run where any element of the traced bool array `bad` holds."""
    if bad.ndim:
        bad = emit(bad._tr, REDUCE, bad, kind="max", axes=tuple(range(bad.ndim)))
    return error_at_run(bad, exc, message)


def asarray(x, dtype=None, t=None) -> Tracer:
    """Any array-like -> a Tracer of `dtype` (a constant if it is not traced)."""
    t = t or trace_of(x)
    x = resolve(x)
    if not isinstance(x, Tracer):
        if isinstance(x, (list, tuple)) and _holds_traced(x):
            return _stack_rows([asarray(e, dtype, t) for e in x])
        if dtype is not None:
            check_int_fits(x, dtype)
        arr = np.asarray(x)
        if dtype is None and isinstance(x, (bool, int, float, complex)):
            arr = np.asarray(x, dtype=result_dtype(x))
        x = t.const(arr if dtype is None else arr.astype(dtype))
    if dtype is not None and x.value.dtype != dtypes.canon(dtype):
        if x.weak and x.value.dtype == "int64" and np.dtype(dtype).kind in "iu":
            int_arguments.must_fit(x, dtypes.canon(dtype))
        x = emit(t, CONVERT, x, dtype=dtypes.canon(dtype))
    return x


def _holds_traced(xs) -> bool:
    return builtins.any(isinstance(resolve(e), Tracer) or isinstance(e, (list, tuple)) and _holds_traced(e)
                        for e in xs)


def _stack_rows(xs):
    """np.stack(xs) of a list holding Tracers (asarray of [x, y, ...]): one common dtype,
    one shape, each a row of the result."""
    t = trace_of(*xs)
    dt = result_dtype(*xs)
    ts = [asarray(x, dt, t) for x in xs]
    if len({x.shape for x in ts}) > 1:
        raise ShapeError(f"all input arrays must have the same shape to stack, got "
                         f"{[list(x.shape) for x in ts]} (at {user_loc()})")
    return emit(t, CONCATENATE, *[emit(t, RESHAPE, x, shape=(1,) + x.shape) for x in ts], dimension=0)


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
    r = emit(x._tr, BROADCAST_IN_DIM, x, shape=shape, broadcast_dimensions=tuple(range(n, len(shape))))
    # x's strides, 0 along the repeated dims (which then count for nothing in numpy's order:
    # a broadcast of a C-order x leaves C order as it is)
    r._hint = Hint(lambda lay: np.broadcast_to(lay, shape), (x,), c_like=x._c_order())
    return r


def promote(*xs, dtype=None, op="elementwise op"):
    """numpy's rules: one result dtype (NEP 50), one broadcast shape."""
    t = trace_of(*xs)
    dt = dtype or result_dtype(*xs)
    ts = [asarray(x, dt, t) for x in xs]
    try:
        shape = np.broadcast_shapes(*[x.shape for x in ts])
    except ValueError:
        raise ShapeError(f"{op} at {user_loc()}: operands could not be broadcast together, shapes "
                         f"{', '.join(str(list(x.shape)) for x in ts)}") from None
    return [broadcast_to(x, shape) for x in ts]


def float_dtype(*xs):
    """The inexact dtype numpy computes in: floats and complex stay, the rest -> float64."""
    dt = result_dtype(*xs)
    return dt if dtypes.is_inexact(dt) else "float64"


def binary(name, x, y, dtype=None):
    a, b = promote(x, y, dtype=dtype, op=name)
    return emit(a._tr, name, a, b)


def ufunc_float_dtype(x):
    """The float dtype numpy's one-argument float ufuncs give x: the smallest float loop
    x casts to safely (float16 for bool, int8 and uint8; float32 for int16 and uint16;
    float64 for wider integers), the float itself otherwise."""
    dt = np.dtype(x.dtype)
    return np.result_type(dt, np.float16).name if dt.kind in "biu" else float_dtype(x)


def no_extra(name, args, kwargs):
    kwargs = {k: v for k, v in kwargs.items() if v is not None and k != "casting"}
    if args or kwargs:
        raise NotImplementedError(f"np.{name} with extra arguments {list(args)} {sorted(kwargs)} "
                                  f"is not supported in spmd (at {user_loc()})")


def takes_out(f):
    """Mark a builder that stores into `out=` itself (numpy's reductions cast into out as
    they compute, not as ufuncs do); the numpy-API dispatch passes out= through to it."""
    f.takes_out = True
    return f


def normalize_axes(axis, ndim, op="reduction"):
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


def astype(x, dtype):
    x = asarray(x)
    dt = dtypes.canon(dtype)
    return x if x.value.dtype == dt else emit(x._tr, CONVERT, x, dtype=dt)


def normalize_axis(a, ndim, op):
    """One axis, negative counted from the end, checked like numpy's AxisError."""
    a = int(a)
    if not -ndim <= a < ndim:
        raise ShapeError(f"{op} at {user_loc()}: axis {a} is out of bounds for an array of rank {ndim}")
    return a % ndim


def zeros_like(x, dtype=None, **kw):
    return full_like(x, 0, dtype, **kw)


def ones_like(x, dtype=None, **kw):
    return full_like(x, 1, dtype, **kw)


def full_like(x, fill_value, dtype=None, shape=None, **kw):
    no_extra("full_like", (), kw)
    x = asarray(x)
    dt = dtypes.canon(dtype or x.dtype)
    shape = x.shape if shape is None else tuple(np.atleast_1d(shape))
    if isinstance(fill_value, Tracer):
        r = broadcast_to(astype(fill_value, dt), shape)
    else:
        r = broadcast_to(asarray(np.array(fill_value, dtype=dt), t=x._tr), shape)
    # numpy (order="K"): x's order of axes, where the new shape has as many
    return order_like(Tracer(r.value, r._tr), x)


def empty_like(x, dtype=None, **kw):
    return full_like(x, 0, dtype, **kw)
