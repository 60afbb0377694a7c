"""numpy's reductions on Tracers: sum, prod, mean, var, std, max, min, any, all (with
axis=, keepdims=, dtype=, where=, initial= as numpy takes them), argmax / argmin, the
cumulative scans and ndarray.trace. numpy's accumulation dtypes hold: small integers and
bools sum in int64, float16 means are computed in float32. With out=, numpy's reductions
compute in out's dtype when theirs casts to it safely, else in theirs, and cast into out
(unsafe casting: np.min of floats into an int64 out truncates); mean and var round their
sum to out's dtype before they divide, as numpy does."""
from __future__ import annotations

import builtins

import numpy as np

from ..errors import ShapeError, user_loc
from ..ir import dtypes
from ..ir.ops.names import CUMULATIVE, IOTA, REDUCE
from . import core
from . import elementwise as ew
from . import functionalize as fz
from . import shapes, value_bounds


def _keep(x, r, axes, keepdims):
    if not keepdims:
        return r
    return shapes.reshape(r, tuple(1 if d in axes else s for d, s in enumerate(x.shape)))


def sum_dtype(x):
    """numpy's sum / prod / cumsum add small integers in the platform's integer of their
    sign: bools and signed ints in int64, unsigned ints in uint64."""
    return "int64" if x.dtype.kind in "bi" else "uint64" if x.dtype.kind == "u" else x.value.dtype


def _reduce(kind, x, axis, dtype, keepdims, default_dtype):
    x = core.asarray(x)
    axes = core.normalize_axes(axis, x.ndim, kind)
    dt = dtypes.canon(dtype) if dtype is not None else default_dtype(x)
    if dt == "bool" and kind in ("sum", "prod"):
        kind = "max" if kind == "sum" else "min"   # numpy's bool add / multiply loops: or / and
    xin = core.astype(x, dt)
    r = core.emit(x._tr, REDUCE, xin, kind=kind, axes=axes) if axes else xin
    return core.reduce_layout(_keep(x, r, axes, keepdims), x, axes, keepdims) if axes else r


def loop_dtype(x, dtype, out, default):
    """The dtype a reduction computes in: dtype= if given; with out=, out's dtype when the
    default one casts to it safely (a float32 sum into a float64 out adds in float64)."""
    if dtype is not None or out is None:
        return dtype
    d = np.dtype(default(core.asarray(x)))
    return out.dtype if np.can_cast(d, out.dtype, "safe") else None


def into(out, r, name, casting="unsafe"):
    """A reduction's result stored into out= (numpy: out has the result's shape exactly)."""
    return fz.assign(out, r, f"np.{name}(..., out=)", casting, exact=True)


def _masked(x, where_, fill):
    """numpy's `where=` on a reduction: the elements where the mask is False count as the
    reduction's identity (or `initial`), the mask broadcast against x."""
    x = core.asarray(x)
    if where_ is None or where_ is True:
        return x
    return ew.where(where_, x, core.asarray(fill, x.value.dtype))


def _with_initial(kind, r, initial):
    if initial is None:
        return r
    init = core.asarray(initial, r.value.dtype)
    return {"sum": ew.add, "prod": ew.multiply, "max": ew.maximum, "min": ew.minimum}[kind](r, init)


@core.takes_out
def sum(x, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None, **kw):
    core.no_extra("sum", (), kw)
    dt = loop_dtype(x, dtype, out, sum_dtype)
    r = _with_initial("sum", _reduce("sum", _masked(x, where, 0), axis, dt, keepdims, sum_dtype), initial)
    return r if out is None else into(out, r, "sum")


@core.takes_out
def prod(x, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None, **kw):
    core.no_extra("prod", (), kw)
    dt = loop_dtype(x, dtype, out, sum_dtype)
    r = _with_initial("prod", _reduce("prod", _masked(x, where, 1), axis, dt, keepdims, sum_dtype), initial)
    return r if out is None else into(out, r, "prod")


def cumulative(kind, x, axis, dtype, default_dtype):
    """np.cumsum / np.cumprod / ufunc.accumulate: axis=None scans the flattened array."""
    x = core.asarray(x)
    if axis is None:
        x, axis = shapes.reshape(x, (-1,)), 0
    ax = core.normalize_axis(axis, x.ndim, f"cum{kind}")
    dt = dtypes.canon(dtype) if dtype is not None else default_dtype(x)
    if dt == "bool" and kind in ("sum", "prod"):
        # numpy's bool add / multiply loops: a running or / and, of x's truth values
        r = cumulative(kind, core.astype(core.astype(x, "bool"), "int32"), ax, "int32", default_dtype)
        return core.astype(r, "bool")
    r = core.emit(x._tr, CUMULATIVE, core.astype(x, dt), kind=kind, axis=ax, reverse=False)
    return core.keep_layout(r, x)


@core.takes_out
def cumsum(x, axis=None, dtype=None, out=None):
    r = cumulative("sum", x, axis, loop_dtype(x, dtype, out, sum_dtype), sum_dtype)
    return r if out is None else into(out, r, "cumsum")


@core.takes_out
def cumprod(x, axis=None, dtype=None, out=None):
    r = cumulative("prod", x, axis, loop_dtype(x, dtype, out, sum_dtype), sum_dtype)
    return r if out is None else into(out, r, "cumprod")


def require_identity(name, x, axis):
    """numpy refuses max/min over an empty axis: there is no identity to return."""
    axes = core.normalize_axes(axis, x.ndim, name)
    if builtins.any(x.shape[a] == 0 for a in axes):
        raise ShapeError(f"{name} at {user_loc()}: zero-size array {list(x.shape)} to a reduction "
                         f"over axes {list(axes)}, which has no identity")


def _extreme(kind, x, axis, keepdims, initial, where_):
    x = core.asarray(x)
    if where_ is not None and where_ is not True and initial is None:
        name = "maximum" if kind == "max" else "minimum"
        raise ValueError(f"reduction operation '{name}' does not have an identity, so to use a where "
                         f"mask one has to specify 'initial' (at {user_loc()})")
    if initial is None:
        require_identity(kind, x, axis)
    if x.dtype == np.bool_:
        x = _masked(x, where_, bool(initial))
        r = (any if kind == "max" else all)(x, axis, keepdims=keepdims)
        return r if initial is None else (ew.logical_or if kind == "max" else ew.logical_and)(r, bool(initial))
    r = _reduce(kind, _masked(x, where_, initial), axis, None, keepdims, lambda v: v.value.dtype)
    return _with_initial(kind, r, initial)


@core.takes_out
def max(x, axis=None, out=None, keepdims=False, initial=None, where=None, **kw):
    core.no_extra("max", (), kw)
    ew.require_ordered("max", x)
    r = _extreme("max", x, axis, keepdims, initial, where)
    return r if out is None else into(out, r, "max")


@core.takes_out
def min(x, axis=None, out=None, keepdims=False, initial=None, where=None, **kw):
    core.no_extra("min", (), kw)
    ew.require_ordered("min", x)
    r = _extreme("min", x, axis, keepdims, initial, where)
    return r if out is None else into(out, r, "min")


amax, amin = max, min


def _count(x, axes):
    return int(np.prod([x.shape[a] for a in axes], dtype=np.int64))


def _where_count(x, axis, where_, keepdims, dt):
    """How many elements a `where=` mask keeps per reduced slice (a traced count)."""
    m = core.broadcast_to(core.asarray(where_, "bool"), x.shape)
    return _reduce("sum", core.astype(m, dt), axis, None, keepdims, lambda v: v.value.dtype)


@core.takes_out
def mean(x, axis=None, dtype=None, out=None, keepdims=False, *, where=None, **kw):
    core.no_extra("mean", (), kw)
    x = core.asarray(x)
    if out is not None:
        # numpy: the sum, stored into out, divided by the count there
        dt = dtype or ("float64" if x.dtype.kind in "biu" else "float32" if x.value.dtype in dtypes.HALFS else
                       loop_dtype(x, None, out, lambda v: v.value.dtype))
        s = sum(x, axis, dt, keepdims=keepdims, where=where)
        return into(out, ew.true_divide(core.astype(s, out.dtype), _count_of(x, axis, where, keepdims)), "mean")
    if dtype is None and x.value.dtype in dtypes.HALFS:
        # numpy computes a float16 mean in float32 and rounds once (bfloat16 here too)
        return core.astype(mean(core.astype(x, "float32"), axis, keepdims=keepdims, where=where), x.value.dtype)
    axes = core.normalize_axes(axis, x.ndim, "mean")
    dt = dtypes.canon(dtype) if dtype is not None else core.float_dtype(x)
    if where is not None and where is not True:
        s = _reduce("sum", core.astype(_masked(x, where, 0), dt), axis, None, keepdims, lambda v: v.value.dtype)
        return ew.true_divide(s, _where_count(x, axis, where, keepdims, dt))     # 0/0: NaN, as numpy
    s = _reduce("sum", core.astype(x, dt), axis, None, keepdims, lambda v: v.value.dtype)
    r = ew.true_divide(s, np.array(_count(x, axes), dtype=dt)) if _count(x, axes) else \
        ew.true_divide(s, np.array(np.nan, dtype=dt))
    # numpy divides in place in the sum's dtype: an integer dtype= truncates the mean
    return core.astype(r, dt) if r.value.dtype != dt else r


def _count_of(x, axis, where_, keepdims):
    """How many elements each reduced slice has (numpy's count, an intp: dividing a
    float32 sum by it computes in float64)."""
    if where_ is not None and where_ is not True:
        return _where_count(x, axis, where_, keepdims, "int64")
    return np.int64(_count(x, core.normalize_axes(axis, x.ndim, "mean")))


@core.takes_out
def var(x, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=None, **kw):
    core.no_extra("var", (), kw)
    x = core.asarray(x)
    if out is not None:
        # numpy: the sum of squared deviations, stored into out, divided there
        dt = dtype or ("float64" if x.dtype.kind in "biu" else None)
        m = mean(x, axis, dt, keepdims=True, where=where)
        d = ew.subtract(x, m)
        d2 = ew.add(ew.multiply(ew.real(d), ew.real(d)), ew.multiply(ew.imag(d), ew.imag(d))) \
            if dtypes.is_complex(d.value.dtype) else ew.multiply(d, d)
        s = sum(d2, axis, loop_dtype(d2, dt, out, lambda v: v.value.dtype), keepdims=keepdims, where=where)
        n = ew.maximum(ew.subtract(_count_of(x, axis, where, keepdims), np.int64(ddof)), np.int64(0))
        return into(out, ew.true_divide(core.astype(s, out.dtype), n), "var")
    if dtype is None and x.value.dtype in dtypes.HALFS:         # as mean
        return core.astype(var(core.astype(x, "float32"), axis, ddof=ddof, keepdims=keepdims, where=where),
                      x.value.dtype)
    axes = core.normalize_axes(axis, x.ndim, "var")
    m = mean(x, axis, dtype, keepdims=True, where=where)
    d = ew.subtract(x, m)
    if dtypes.is_complex(d.value.dtype):       # numpy: the mean of |d|^2, a real result
        re, im = ew.real(d), ew.imag(d)
        d2 = ew.add(ew.multiply(re, re), ew.multiply(im, im))
    else:
        d2 = ew.multiply(d, d)
    if where is not None and where is not True:
        s = sum(d2, axis, dtype, keepdims=keepdims, where=where)
        n = ew.subtract(_where_count(x, axis, where, keepdims, s.value.dtype), ddof)
        r = ew.true_divide(s, ew.maximum(n, core.asarray(0, s.value.dtype)))
    else:
        s = sum(d2, axis, dtype, keepdims=keepdims)
        r = ew.true_divide(s, np.array(builtins.max(_count(x, axes) - ddof, 0), dtype=s.dtype))
    # numpy sums the squares in dtype= and divides in place there (an integer dtype truncates)
    return core.astype(r, s.value.dtype) if r.value.dtype != s.value.dtype else r


@core.takes_out
def std(x, axis=None, dtype=None, out=None, ddof=0, keepdims=False, **kw):
    if out is not None:         # numpy: the variance into out, then its square root there (as a ufunc)
        return into(out, ew.sqrt(var(x, axis, dtype, out, ddof, keepdims, **kw)), "std", "same_kind")
    v = var(x, axis, dtype, out, ddof, keepdims, **kw)
    if v.dtype.kind in "biu":
        # numpy takes the root in place in dtype=: a scalar converts, an array refuses
        if v.ndim:
            raise TypeError(f"np.std(..., dtype={np.dtype(v.dtype).name}): Cannot cast ufunc 'sqrt' output from "
                            f"dtype('float64') to dtype('{np.dtype(v.dtype).name}') with casting rule 'same_kind' "
                            f"(numpy raises the same error; at {user_loc()})")
        return core.astype(ew.sqrt(v), v.dtype)
    return ew.sqrt(v)


@core.takes_out
def any(x, axis=None, out=None, keepdims=False, *, where=None, **kw):
    core.no_extra("any", (), kw)
    r = _reduce("max", _masked(core.asarray(x, "bool"), where, False), axis, None, keepdims, lambda v: "bool")
    return r if out is None else into(out, r, "any")


@core.takes_out
def all(x, axis=None, out=None, keepdims=False, *, where=None, **kw):
    core.no_extra("all", (), kw)
    r = _reduce("min", _masked(core.asarray(x, "bool"), where, True), axis, None, keepdims, lambda v: "bool")
    return r if out is None else into(out, r, "all")


def argmax(x, axis=None, out=None, keepdims=False):
    core.no_extra("argmax", (), {"out": out})
    return _arg(x, axis, keepdims, max)


def argmin(x, axis=None, out=None, keepdims=False):
    core.no_extra("argmin", (), {"out": out})
    return _arg(x, axis, keepdims, min)


def _arg(x, axis, keepdims, pick):
    """The first index where x equals its max/min (or is NaN, as numpy's argmax returns
    the first NaN): a min-reduction of masked iotas."""
    x = core.asarray(x)
    shape = x.shape
    if axis is None:
        x, axis = shapes.reshape(x, (-1,)), 0
    (ax,) = core.normalize_axes(axis, x.ndim, f"arg{pick.__name__}")
    if x.shape[ax] == 0:
        raise ShapeError(f"arg{pick.__name__} at {user_loc()}: attempt to get it of an empty sequence "
                         f"{list(shape)}")
    best = pick(x, ax, keepdims=True)
    hit = ew.equal(x, best)
    if dtypes.is_float(x.value.dtype):
        hit = ew.logical_or(hit, ew.not_equal(x, x))
    idx = core.emit(x._tr, IOTA, shape=x.shape, dtype="int64", dimension=ax)
    big = np.array(x.shape[ax], dtype="int64")
    r = min(ew.where(hit, idx, big), ax, keepdims=keepdims)
    if keepdims and len(shape) != r.ndim:
        r = shapes.reshape(r, (1,) * len(shape))
    return value_bounds.known(r, 0, x.shape[ax] - 1)       # (every lane has a hit: never `big`)


@core.takes_out
def trace_(x, offset=0, axis1=0, axis2=1, dtype=None, out=None):
    """ndarray.trace: the sum along a diagonal (a masked sum, no gather)."""
    x = core.asarray(x)
    a1, a2 = core.normalize_axis(axis1, x.ndim, "trace"), core.normalize_axis(axis2, x.ndim, "trace")
    if a1 == a2:
        raise ValueError(f"trace: axis1 and axis2 cannot be the same (at {user_loc()})")
    i = core.emit(x._tr, IOTA, shape=x.shape, dtype="int64", dimension=a1)
    j = core.emit(x._tr, IOTA, shape=x.shape, dtype="int64", dimension=a2)
    on = ew.equal(ew.add(i, offset), j)
    return sum(ew.where(on, x, core.zeros_like(x)), axis=(a1, a2), dtype=dtype, out=out)
