"""Sorting, searching, counting and statistics: sort / argsort (IR ops: stable, NaN
last; along a split axis they gather it, with a warning), median / percentile /
quantile (a sort, then static picks), NaN-ignoring reductions, average, ptp,
searchsorted / digitize / isin / histogram / interp as comparisons summed over the
searched axis (a split axis leaves a pending sum, never a gather)."""
from __future__ import annotations

import builtins

import numpy as np

from ...errors import ShapeError, user_loc, warn_at
from ...ir import dtypes
from ...ir.ops.names import ARGSORT, BROADCAST_IN_DIM, ORDER_STATISTIC, SORT
from .. import contractions, core, indexing, reductions as red, shapes
from .. import elementwise as ew
from .. import functionalize as fz
from ..trace import Tracer
from . import math_funcs as MF
from . import shape_funcs as SF


def _move_last(x, axis, name):
    """x with `axis` (None = all, an int, or a tuple, merged) moved to one last dim."""
    if axis is None:
        return shapes.reshape(x, (-1,)), tuple(range(x.ndim))
    axes = core.normalize_axes(axis, x.ndim, name)
    rest = [d for d in range(x.ndim) if d not in axes]
    y = shapes.transpose(x, rest + list(axes))
    n = int(np.prod([x.shape[d] for d in axes], dtype=np.int64))
    return shapes.reshape(y, tuple(x.shape[d] for d in rest) + (n,)), axes


def _keepdims_shape(x, axes):
    return tuple(1 if d in axes else s for d, s in enumerate(x.shape))


# ---------------------------------------------------------------------------- sort
def sort(a, axis=-1, kind=None, order=None, *, stable=None):
    """np.sort, always stable (numpy's default quicksort makes no promise about equal
    elements; spmd picks the stable order so results do not depend on the mesh)."""
    core.no_extra("sort", (), {"order": order})
    x = core.asarray(a)
    if axis is None:
        x, axis = shapes.ravel(x), 0
    if x.ndim == 0:
        raise ShapeError(f"np.sort: axis {axis} is out of bounds for array of dimension 0 (at {user_loc()})")
    axis = core.normalize_axis(axis, x.ndim, "sort")
    return core.order_like(core.emit(x._tr, SORT, x, axis=axis), x)       # numpy sorts a copy of x (order K)


def sort_in_place(a, axis=-1, kind=None, order=None, *, stable=None):
    """ndarray.sort: sorts the array in place (a view sorts its part of its base); None."""
    fz.assign(a, sort(a, axis, kind, order, stable=stable), "ndarray.sort")


def _check_kth(x, kth, axis, name):
    if isinstance(kth, Tracer):
        raise NotImplementedError(f"np.{name} with a traced kth (at {user_loc()})")
    n = x.shape[axis]
    if x.size == 0:             # numpy checks kth only against an array with elements
        return
    for k in np.atleast_1d(kth).tolist():
        if not -n <= int(k) < n:
            raise ValueError(f"np.{name}: kth(={k}) out of bounds ({n}) (at {user_loc()})")


def partition(a, kth, axis=-1, kind="introselect", order=None):
    """np.partition: numpy promises the kth element in its sorted place, smaller ones
    before it and larger ones after, in an order it leaves unspecified; spmd's order is
    the sorted one (every element in its sorted place), whatever the mesh."""
    x = core.asarray(a)
    if axis is None:
        x, axis = shapes.ravel(x), 0
    _check_kth(x, kth, core.normalize_axis(axis, x.ndim, "partition"), "partition")
    return sort(x, axis, order=order)


def argpartition(a, kth, axis=-1, kind="introselect", order=None):
    """np.argpartition: the indices that sort a (a stable sort: one of the orders numpy allows)."""
    x = core.asarray(a)
    if axis is None:
        x, axis = shapes.ravel(x), 0
    _check_kth(x, kth, core.normalize_axis(axis, x.ndim, "argpartition"), "argpartition")
    return argsort(x, axis, order=order)


def partition_in_place(a, kth, axis=-1, kind="introselect", order=None):
    """ndarray.partition: partitions the array in place (sorted, see partition); None."""
    fz.assign(a, partition(a, kth, axis, kind, order), "ndarray.partition")


def argsort(a, axis=-1, kind=None, order=None, *, stable=None):
    """np.argsort, always stable (what kind="stable" gives in numpy)."""
    core.no_extra("argsort", (), {"order": order})
    x = core.asarray(a)
    if axis is None:
        x, axis = shapes.ravel(x), 0
    if x.ndim == 0:
        raise ShapeError(f"np.argsort: axis {axis} is out of bounds for array of dimension 0 (at {user_loc()})")
    axis = core.normalize_axis(axis, x.ndim, "argsort")
    return core.emit(x._tr, ARGSORT, x, axis=axis)        # numpy's argsort result is in C order


# ---------------------------------------------------------------------------- quantiles
# median, percentile and quantile pick elements with order_statistic (the sorted
# elements at given places, NaN last; along a split axis a distributed selection, never a
# gather: sharding/partition_rules/select.py), then interpolate as numpy does.
# Hyndman and Fan's continuous methods as numpy writes them: (alpha, beta) of the virtual
# index n*q + alpha + q*(1 - alpha - beta) - 1
HYNDMAN_FAN = {"interpolated_inverted_cdf": (0.0, 1.0), "hazen": (0.5, 0.5), "weibull": (0.0, 0.0),
               "median_unbiased": (1 / 3.0, 1 / 3.0), "normal_unbiased": (3 / 8.0, 3 / 8.0)}
METHODS = ("linear", "lower", "higher", "nearest", "midpoint", "inverted_cdf", "averaged_inverted_cdf",
           "closest_observation") + tuple(HYNDMAN_FAN)
NAN_METHODS = ("linear", "lower", "higher", "midpoint", "median")     # ("median": nanmedian's)
# methods that return an element as it is
PICKING = ("lower", "higher", "nearest", "inverted_cdf", "closest_observation")


def _select(y, ranks):
    """The sorted elements of y's last axis (NaN last) at `ranks`: a static int array
    (r,) or a traced int64 (..., r) -> (..., r)."""
    if not isinstance(ranks, Tracer):
        ranks = core.broadcast_to(core.asarray(np.asarray(ranks, np.int64), t=y._tr), y.shape[:-1] + (len(ranks),))
    return core.emit(y._tr, ORDER_STATISTIC, y, ranks)


def _any_nan(x, axis):
    """Does x hold a NaN along `axis` (None: anywhere)? The rows _move_last makes, in
    their order (numpy's quantiles of such a row are NaN). Read in x's own layout, not
    the moved one: a reduction over leading dims runs row by row."""
    return red.any(MF.isnan(x), axis=None if axis is None else core.normalize_axes(axis, x.ndim, "quantile"))


def _quantile(name, a, q, axis, method, keepdims, scale):
    x = core.asarray(a)
    qa = _fractions(name, q, method, scale)
    dt = _quantile_dtype(name, x, q, method)
    # integers that are interpolated are converted to dt first: that picks the same elements
    # (the conversion keeps the order), and float rows select without a gather. Floats are
    # picked as they are: numpy subtracts the two picks in their own dtype.
    y = core.astype(x, dt) if x.dtype.kind in "iu" and method not in PICKING else x
    y, axes = _move_last(y, axis, name)
    n, kept = y.shape[-1], y.shape[:-1]
    if n == 0:
        raise IndexError(f"np.{name} of an empty axis: numpy has no element to pick (at {user_loc()})")
    lo, hi, t = (_positions(qa.ravel() * (n - 1), n, method) if method in METHODS[:5]
                 else _numpy_positions(qa.ravel(), n, method))
    picks = np.unique(np.concatenate([lo, hi]))
    sel = _select(y, picks)
    a0 = shapes.take(sel, np.searchsorted(picks, lo), axis=-1)
    a1 = shapes.take(sel, np.searchsorted(picks, hi), axis=-1)
    r = _interpolate(a0, a1, t, dt, method)
    if y.dtype.kind == "f":
        # any NaN in a slice makes its quantiles NaN
        bad = core.broadcast_to(shapes.reshape(_any_nan(core.astype(x, dt), axis), kept + (1,)), r.shape)
        r = ew.where(bad, core.full_like(r, np.nan), r)
    # (..., nq) -> q's dims first
    r = shapes.reshape(r, kept + qa.shape)
    nk, nq = len(kept), qa.ndim
    r = shapes.transpose(r, list(range(nk, nk + nq)) + list(range(nk)))
    if keepdims:
        shape = _keepdims_shape(x, axes) if axis is not None else (1,) * x.ndim
        r = shapes.reshape(r, qa.shape + shape)
    return core.astype(r, dt)


def _fractions(name, q, method, scale, methods=METHODS):
    """q as fractions in [0, 1] (a concrete array), checked as numpy does."""
    if isinstance(q, Tracer):
        raise NotImplementedError(f"np.{name} with traced q is not supported in spmd: pass q as a Python "
                                  f"number or numpy array (at {user_loc()})")
    if method not in methods:
        raise NotImplementedError(f"np.{name} method={method!r} is not supported in spmd (supported: "
                                  f"{', '.join(methods)}) (at {user_loc()})")
    qa = np.asarray(q, dtype=np.float64) / scale
    if (qa < 0).any() or (qa > 1).any() or np.isnan(qa).any():
        raise ValueError(f"np.{name}: {'Percentiles' if scale == 100 else 'Quantiles'} must be in the range "
                         f"[0, {int(scale)}] (at {user_loc()})")
    return qa


def _quantile_dtype(name, x, q, method):
    if method in PICKING:
        return x.dtype.name          # numpy picks an element: the input's dtype, bool included
    if x.dtype.kind not in "fiu":
        raise TypeError(f"np.{name} of {x.dtype}: numpy's interpolation subtracts, which bool does not "
                        f"support (at {user_loc()})")
    return core.float_dtype(x, q if np.ndim(q) == 0 and isinstance(q, (int, float)) else np.asarray(q, np.float64))


def _positions(v, n, method):
    """For the fractional sorted positions v: (the index below, the index above, the
    weight of the one above), as numpy's `method` picks them."""
    lo = np.floor(v).astype(np.int64)
    hi = np.minimum(lo + 1, n - 1)
    if method == "lower":
        hi = lo
    elif method == "higher":
        lo = hi = np.ceil(v).astype(np.int64)
    elif method == "nearest":
        lo = hi = np.around(v).astype(np.int64)     # numpy rounds half to even here too
    if method == "midpoint":
        t = np.where(v == np.floor(v), 0.0, 0.5)      # numpy: an exact index is picked as is
    else:
        t = v - lo if method == "linear" else np.zeros_like(v)
    return lo, hi, t


def _discrete(index, pick_previous):
    """numpy's discontinuous methods: the index below `index` where pick_previous(its
    fraction, index) holds, else the one above, at least 0."""
    previous = np.floor(index)
    res = np.where(pick_previous(index - previous, index), previous, previous + 1).astype(np.int64)
    return np.maximum(res, 0)


def _numpy_positions(q, n, method):
    """(index below, index above, weight of the one above) for numpy's methods beyond the
    five classic ones, worked out as numpy does: the virtual index of each q, its floor
    and the next, both the last element where it is at or past the last and the first
    where it is below the first, the weight from the floor so moved."""
    if method == "inverted_cdf":
        idx = np.minimum(_discrete(n * q - 1, lambda g, i: g == 0), n - 1)
        return idx, idx, np.zeros_like(q)
    if method == "closest_observation":
        idx = np.minimum(_discrete(n * q - 1 - 0.5, lambda g, i: (g == 0) & (np.floor(i) % 2 == 1)), n - 1)
        return idx, idx, np.zeros_like(q)
    if method == "averaged_inverted_cdf":
        v = n * q - 1
    else:
        alpha, beta = HYNDMAN_FAN[method]
        v = n * q + (alpha + q * (1 - alpha - beta)) - 1
    previous = np.floor(v)
    after = previous + 1
    above, below = v >= n - 1, v < 0
    previous[above] = after[above] = -1          # numpy's -1: the last element
    previous[below] = after[below] = 0
    t = v - previous
    if method == "averaged_inverted_cdf":
        t = np.where(t == 0, 0.5, 1.0)
    lo = np.where(previous < 0, n - 1, previous).astype(np.int64)
    hi = np.where(after < 0, n - 1, after).astype(np.int64)
    return lo, hi, t


def _interpolate(a0, a1, t, dt, method):
    """numpy's _lerp between the picked elements a0 and a1 (..., nq), weight t (nq,): the
    difference in the picks' dtype, then promoted with the weight's (dt)."""
    if method in PICKING:
        return core.astype(a0, dt)   # numpy picks these without interpolating (inf stays inf)
    # numpy's weight is float64 (1 - t and t >= 0.5 too), used as dt (a Python float
    # against float32 picks when q is a Python number)
    t = np.asarray(t, dtype=np.float64)
    d = ew.subtract(a1, a0)
    return ew.where(t >= 0.5, ew.subtract(a1, ew.multiply(d, (1.0 - t).astype(dt))),
                    ew.add(a0, ew.multiply(d, t.astype(dt))))


@core.takes_out
def percentile(a, q, axis=None, out=None, overwrite_input=False, method="linear", keepdims=False, *,
               weights=None, interpolation=None):
    core.no_extra("percentile", (), {"weights": weights, "interpolation": interpolation})
    r = _quantile("percentile", a, q, axis, method, keepdims, 100.0)
    return r if out is None else red.into(out, r, "percentile")


@core.takes_out
def quantile(a, q, axis=None, out=None, overwrite_input=False, method="linear", keepdims=False, *,
             weights=None, interpolation=None):
    core.no_extra("quantile", (), {"weights": weights, "interpolation": interpolation})
    r = _quantile("quantile", a, q, axis, method, keepdims, 1.0)
    return r if out is None else red.into(out, r, "quantile")


@core.takes_out
def median(a, axis=None, out=None, overwrite_input=False, keepdims=False):
    if out is not None:         # the middle elements' mean, cast into out as numpy's mean does
        return red.into(out, median(a, axis, None, overwrite_input, keepdims), "median")
    x = core.asarray(a)
    dt = core.float_dtype(x)
    y, axes = _move_last(core.astype(x, dt), axis, "median")
    n = y.shape[-1]
    if n == 0:
        r = core.full_like(y, np.nan, dtype=dt, shape=y.shape[:-1])
    else:
        mid = _select(y, np.unique(np.array([(n - 1) // 2, n // 2], np.int64)))
        r = red.mean(mid, axis=-1) if n % 2 == 0 else indexing.getitem(mid, (Ellipsis, 0))
        r = ew.where(_any_nan(x, axis), core.full_like(r, np.nan), r)
    if keepdims:
        r = shapes.reshape(r, _keepdims_shape(x, axes) if axis is not None else (1,) * x.ndim)
    return r


# ---------------------------------------------------------------------------- averages, nan*
def average(a, axis=None, weights=None, returned=False, *, keepdims=False):
    x = core.asarray(a)
    axes = core.normalize_axes(axis, x.ndim, "average")
    if weights is None:
        avg = red.mean(x, axis, keepdims=keepdims)
        if avg.size == 0:
            raise ZeroDivisionError(f"np.average of an empty result: numpy divides by its size "
                                    f"(at {user_loc()})")
        if returned:
            n = float(np.prod([x.shape[d] for d in axes], dtype=np.int64))
            return avg, core.full_like(avg, n)
        return avg
    w = core.asarray(weights, t=x._tr)
    if x.dtype.kind in "iub":
        dt = core.result_dtype(x, w, np.float64(0))
    else:
        dt = core.result_dtype(x, w)
    if w.shape != x.shape:
        if axis is None:
            raise TypeError(f"average: axis must be specified when shapes of a and weights differ (at {user_loc()})")
        if w.ndim != len(axes) or w.shape != tuple(x.shape[d] for d in axes):
            raise ValueError(f"average: shape of weights {list(w.shape)} must be consistent with shape of a "
                             f"{list(x.shape)} along axis {axis} (at {user_loc()})")
        w = core.emit(x._tr, BROADCAST_IN_DIM, core.astype(w, dt), shape=x.shape, broadcast_dimensions=axes)
    if builtins.any(x.shape[d] == 0 for d in axes):
        raise ZeroDivisionError(f"np.average: Weights sum to zero, can't be normalized (an empty axis) "
                                f"(at {user_loc()})")
    xw = core.astype(x, dt)
    w = core.astype(w, dt)
    scl = red.sum(w, axis, keepdims=keepdims)
    core.error_at_run_if_any(ew.equal(scl, 0), ZeroDivisionError, "Weights sum to zero, can't be normalized")
    avg = ew.true_divide(red.sum(ew.multiply(xw, w), axis, keepdims=keepdims), scl)
    if returned:
        return avg, core.broadcast_to(scl, avg.shape)
    return avg


def cov(m, y=None, rowvar=True, bias=False, ddof=None, fweights=None, aweights=None, *, dtype=None):
    """numpy's np.cov without weights, in numpy's steps: rows (rowvar) or columns are the
    variables, their means subtracted, X @ X.T times 1 / (N - ddof)."""
    if fweights is not None or aweights is not None:
        raise NotImplementedError(f"np.cov with fweights / aweights (at {user_loc()})")
    if ddof is not None and ddof != int(ddof):
        raise ValueError(f"ddof must be integer (at {user_loc()})")
    t = core.trace_of(m) if y is None else core.trace_of(m, y)
    mx = core.asarray(m, t=t)
    ys = None if y is None else core.asarray(y, t=t)
    if mx.ndim > 2 or (ys is not None and ys.ndim > 2):
        raise ValueError(f"{'m' if mx.ndim > 2 else 'y'} has more than 2 dimensions (at {user_loc()})")
    if dtype is None:
        dtype = core.result_dtype(mx, np.float64(0)) if ys is None else core.result_dtype(mx, ys, np.float64(0))
    if np.dtype(dtype).kind == "c":
        raise NotImplementedError(f"np.cov of complex arrays, or with a complex dtype={np.dtype(dtype).name} "
                                  f"(at {user_loc()})")
    X = core.astype(shapes.reshape(mx, (1, -1)) if mx.ndim < 2 else mx, dtype)
    if not rowvar and mx.ndim != 1:
        X = shapes.transpose(X)
    if X.shape[0] == 0:
        return core.asarray(np.array([]).reshape(0, 0), t=t)
    if ys is not None:
        Y = core.astype(shapes.reshape(ys, (1, -1)) if ys.ndim < 2 else ys, dtype)
        if not rowvar and Y.shape[0] != 1:
            Y = shapes.transpose(Y)
        X = shapes.concatenate([X, Y], 0)
    if ddof is None:
        ddof = 1 if bias == 0 else 0
    fact = X.shape[1] - ddof
    if fact <= 0:
        warn_at("Degrees of freedom <= 0 for slice", RuntimeWarning, user_loc())
        fact = 0.0
    Xc = ew.subtract(X, red.mean(X, 1, keepdims=True))
    c = contractions.matmul(Xc, shapes.transpose(Xc))
    c = ew.multiply(c, np.true_divide(1, fact).astype(dtype))
    return shapes.squeeze(c)


def corrcoef(x, y=None, rowvar=True, bias=np._NoValue, ddof=np._NoValue, *, dtype=None):
    """numpy's: cov scaled by the standard deviations on both sides, clipped to [-1, 1]."""
    c = cov(x, y, rowvar, dtype=dtype)
    if c.ndim == 0:
        return ew.true_divide(c, c)
    sd = ew.sqrt(SF.diagonal(c))
    c = ew.true_divide(c, shapes.reshape(sd, (-1, 1)))
    c = ew.true_divide(c, shapes.reshape(sd, (1, -1)))
    return ew.clip(c, -1, 1)


def _nan_prep(a):
    x = core.asarray(a)
    if x.dtype.kind not in "fc":
        return x, None
    return x, MF.isnan(x)


@core.takes_out
def nansum(a, axis=None, dtype=None, out=None, keepdims=False, **kw):
    core.no_extra("nansum", (), kw)
    x, nan = _nan_prep(a)
    if nan is not None:
        x = ew.where(nan, core.zeros_like(x), x)
    return red.sum(x, axis, dtype=dtype, out=out, keepdims=keepdims)


@core.takes_out
def nanprod(a, axis=None, dtype=None, out=None, keepdims=False, **kw):
    core.no_extra("nanprod", (), kw)
    x, nan = _nan_prep(a)
    if nan is not None:
        x = ew.where(nan, core.ones_like(x), x)
    return red.prod(x, axis, dtype=dtype, out=out, keepdims=keepdims)


def _nan_count(x, nan, axis, keepdims, dt):
    if nan is None:
        axes = core.normalize_axes(axis, x.ndim, "nanmean")
        n = int(np.prod([x.shape[d] for d in axes], dtype=np.int64))
        return np.asarray(n, dt)
    return red.sum(core.astype(ew.logical_not(nan), dt), axis, keepdims=keepdims)


def nanmean(a, axis=None, dtype=None, out=None, keepdims=False, **kw):
    core.no_extra("nanmean", (), dict(kw, out=out))
    x, nan = _nan_prep(a)
    if nan is None:
        return red.mean(x, axis, dtype, keepdims=keepdims)
    dt = dtypes.canon(dtype) if dtype is not None else x.dtype.name
    s = red.sum(core.astype(ew.where(nan, core.zeros_like(x), x), dt), axis, keepdims=keepdims)
    return ew.true_divide(s, _nan_count(x, nan, axis, keepdims, dt))


def nanvar(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, **kw):
    core.no_extra("nanvar", (), dict(kw, out=out))
    x, nan = _nan_prep(a)
    if nan is None:
        return red.var(x, axis, dtype, ddof=ddof, keepdims=keepdims)
    dt = dtypes.canon(dtype) if dtype is not None else x.dtype.name
    m = nanmean(x, axis, dt, keepdims=True)
    d = ew.where(nan, core.zeros_like(x, dtype=dt), ew.subtract(core.astype(x, dt), m))
    if dtypes.is_complex(dt):       # numpy: the mean of |d|^2, in dtype=
        d2 = ew.add(ew.multiply(ew.real(d), ew.real(d)), ew.multiply(ew.imag(d), ew.imag(d)))
    else:
        d2 = ew.multiply(d, d)
    s = red.sum(d2, axis, keepdims=keepdims)
    cnt = ew.subtract(_nan_count(x, nan, axis, keepdims, s.value.dtype), float(ddof))
    # numpy's nanvar: NaN where ddof leaves no degrees of freedom (np.var divides by 0 there)
    bad = ew.less_equal(cnt, 0)
    r = ew.true_divide(s, ew.where(bad, core.ones_like(cnt), cnt))
    r = ew.where(bad, core.full_like(r, np.nan), r)
    return core.astype(r, dt) if r.value.dtype != dt else r


def nanstd(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, **kw):
    return ew.sqrt(nanvar(a, axis, dtype, out, ddof, keepdims, **kw))


def _nan_extreme(a, axis, keepdims, pick, fill, name):
    x, nan = _nan_prep(a)
    if nan is None:
        return pick(x, axis, keepdims=keepdims)
    red.require_identity(name, x, axis)
    r = pick(ew.where(nan, core.full_like(x, fill), x), axis, keepdims=keepdims)
    # an all-NaN slice gives NaN (numpy warns)
    return ew.where(red.all(nan, axis, keepdims=keepdims), core.full_like(r, np.nan), r)


@core.takes_out
def nanmax(a, axis=None, out=None, keepdims=False, **kw):
    core.no_extra("nanmax", (), kw)
    r = _nan_extreme(a, axis, keepdims, red.max, -np.inf, "nanmax")
    return r if out is None else red.into(out, r, "nanmax")


@core.takes_out
def nanmin(a, axis=None, out=None, keepdims=False, **kw):
    core.no_extra("nanmin", (), kw)
    r = _nan_extreme(a, axis, keepdims, red.min, np.inf, "nanmin")
    return r if out is None else red.into(out, r, "nanmin")


def _nan_arg(a, axis, out, keepdims, name):
    """numpy's nanargmax / nanargmin: NaN taken as -inf / inf, and its ValueError for an
    all-NaN slice after the run (core.error_at_run; inside a loop body or a branch the
    slice's first position)."""
    pick, fill = (red.argmax, -np.inf) if name == "nanargmax" else (red.argmin, np.inf)
    x, nan = _nan_prep(a)
    if nan is not None:
        x = ew.where(nan, core.full_like(x, fill), x)
        core.error_at_run_if_any(red.all(nan, axis), ValueError, "All-NaN slice encountered")
    r = pick(x, axis, keepdims=keepdims)
    return r if out is None else red.into(out, r, name)


@core.takes_out
def nanargmax(a, axis=None, out=None, *, keepdims=False):
    return _nan_arg(a, axis, out, keepdims, "nanargmax")


@core.takes_out
def nanargmin(a, axis=None, out=None, *, keepdims=False):
    return _nan_arg(a, axis, out, keepdims, "nanargmin")


@core.takes_out
def ptp(a, axis=None, out=None, keepdims=False):
    x = core.asarray(a)
    if x.dtype == np.bool_:
        raise TypeError(f"np.ptp of bool: numpy's subtract does not take booleans (at {user_loc()})")
    hi, lo = red.max(x, axis, keepdims=keepdims), red.min(x, axis, keepdims=keepdims)
    if out is not None:         # numpy: the maximum into out, minus the minimum, into out as a ufunc
        return red.into(out, ew.subtract(core.astype(hi, out.dtype), lo), "ptp", "same_kind")
    return ew.subtract(hi, lo)


def count_nonzero(a, axis=None, *, keepdims=False):
    x = core.asarray(a)
    nz = ew.not_equal(x, False if x.dtype == np.bool_ else 0)
    return red.sum(core.astype(nz, "int64"), axis, keepdims=keepdims)


# ---------------------------------------------------------------------------- searching
def _lt(a, v, strict):
    """a < v (strict) or a <= v, with NaN ordered last as numpy's sort puts it."""
    if a.dtype.kind != "f":
        return ew.less(a, v) if strict else ew.less_equal(a, v)
    vn, an = MF.isnan(v), MF.isnan(a)
    if strict:
        return ew.logical_or(ew.less(a, v), ew.logical_and(vn, ew.logical_not(an)))
    return ew.logical_or(ew.less_equal(a, v), vn)


def searchsorted(a, v, side="left", sorter=None):
    t = core.trace_of(a, v)
    a = core.asarray(a, t=t)
    if a.ndim != 1:
        raise ValueError(f"searchsorted: a must be 1-d, got {list(a.shape)} (at {user_loc()})")
    if side not in ("left", "right"):
        raise ValueError(f"searchsorted: side must be 'left' or 'right', got {side!r} (at {user_loc()})")
    if sorter is not None:
        a = shapes.take(a, sorter)
    dt = core.result_dtype(a, v)
    a, v = core.astype(a, dt), core.asarray(v, dt, t)
    n = a.shape[0]
    # count of a[i] < v (left) or a[i] <= v (right): a compare against every element of a
    ab = core.emit(t, BROADCAST_IN_DIM, a, shape=v.shape + (n,), broadcast_dimensions=(v.ndim,))
    vb = core.emit(t, BROADCAST_IN_DIM, v, shape=v.shape + (n,), broadcast_dimensions=tuple(range(v.ndim)))
    return red.sum(core.astype(_lt(ab, vb, side == "left"), "int64"), axis=-1)


def digitize(x, bins, right=False):
    t = core.trace_of(x, bins)
    x = core.asarray(x, t=t)
    if x.dtype.kind == "c":
        raise TypeError("x may not be complex")
    side = "left" if right else "right"
    if not isinstance(bins, Tracer):
        b = np.asarray(bins)
        if b.ndim != 1:
            raise ValueError(f"digitize: bins must be 1-d (at {user_loc()})")
        d = np.diff(b)
        inc, dec = bool(np.all(d >= 0)), bool(np.all(d <= 0))
        if not (inc or dec):
            raise ValueError(f"digitize: bins must be monotonically increasing or decreasing (at {user_loc()})")
        if inc:
            return searchsorted(b, x, side)
        return ew.subtract(b.shape[0], searchsorted(b[::-1].copy(), x, side))
    b = core.asarray(bins, t=t)
    up = searchsorted(b, x, side)
    down = ew.subtract(b.shape[0], searchsorted(indexing.getitem(b, slice(None, None, -1)), x, side))
    inc = ew.less_equal(indexing.getitem(b, 0), indexing.getitem(b, -1))
    return ew.where(inc, up, down)


def isin(element, test_elements, assume_unique=False, invert=False, *, kind=None):
    t = core.trace_of(element, test_elements)
    e = core.asarray(element, t=t)
    te = shapes.ravel(core.asarray(test_elements, t=t))
    dt = core.result_dtype(e, te)
    e, te = core.astype(e, dt), core.astype(te, dt)
    m = te.shape[0]
    eb = core.emit(t, BROADCAST_IN_DIM, e, shape=e.shape + (m,), broadcast_dimensions=tuple(range(e.ndim)))
    tb = core.emit(t, BROADCAST_IN_DIM, te, shape=e.shape + (m,), broadcast_dimensions=(e.ndim,))
    r = red.any(ew.equal(eb, tb), axis=-1)
    return ew.logical_not(r) if invert else r


def histogram(a, bins=10, range=None, density=None, weights=None):
    x = shapes.ravel(core.asarray(a))
    if isinstance(bins, str):
        raise NotImplementedError(f"np.histogram with bins={bins!r} chooses the number of bins from the "
                                  f"data; pass a number or the edges (at {user_loc()})")
    w = None if weights is None else shapes.ravel(core.asarray(weights, t=x._tr))
    if w is not None and w.shape != x.shape:
        raise ValueError(f"histogram: weights should have the same shape as a (at {user_loc()})")
    edges = _histogram_edges(x, bins, range) if np.ndim(bins) == 0 else _given_edges(x, bins)
    hist = _bin_counts(x, edges, w)
    if density:
        # numpy divides by the widths as float64
        nb = edges.shape[0] - 1
        widths = core.astype(ew.subtract(indexing.getitem(edges, slice(1, None)),
                                         indexing.getitem(edges, slice(0, nb))), "float64")
        hist = ew.true_divide(ew.true_divide(hist, widths), red.sum(hist))
    return hist, edges


def _given_edges(x, bins):
    # traced edges (np.histogram's own, passed on) are checked on their numbers: a
    # constant's, else the data's (a graph break, spmd/jit/graph_breaks.py)
    p = bins.value.producer if isinstance(bins, Tracer) else None
    e = p.attrs["value"] if p is not None and p.name == "constant" else np.asarray(bins)
    if e.ndim != 1 or (np.diff(e) < 0).any():
        raise ValueError(f"histogram: bins must increase monotonically, when an array (at {user_loc()})")
    return core.asarray(e, t=x._tr)


def _histogram_edges(x, bins, range):
    """nb + 1 equal bins over `range`, or over the data's (finite) range, as numpy's."""
    nb, t = int(bins), x._tr
    if nb < 1:
        raise ValueError(f"histogram: bins must be a positive integer (at {user_loc()})")
    et = core.result_dtype(x, 0.0) if x.dtype.kind == "f" else "float64"
    if range is not None:
        lo, hi = float(range[0]), float(range[1])
        if lo > hi:
            raise ValueError(f"histogram: max must be larger than min in range parameter (at {user_loc()})")
        if not (np.isfinite(lo) and np.isfinite(hi)):
            raise ValueError(f"histogram: supplied range of [{lo}, {hi}] is not finite (at {user_loc()})")
        if lo == hi:
            lo, hi = lo - 0.5, hi + 0.5
        return core.asarray(np.linspace(lo, hi, nb + 1, endpoint=True, dtype=et), t=t)
    first, last = _data_range(core.astype(x, et))
    # numpy's linspace: arange * step + start, the last edge exactly `last`
    step = ew.true_divide(ew.subtract(last, first), float(nb))
    edges = ew.add(ew.multiply(core.asarray(np.arange(nb + 1, dtype=et), t=t), step), first)
    return shapes.concatenate([indexing.getitem(edges, slice(0, nb)), shapes.reshape(last, (1,))], 0)


def _data_range(x):
    """(min, max) of x, widened by 0.5 each way where they are equal; (0, 1) when empty."""
    if x.shape[0] == 0:
        return core.asarray(np.asarray(0.0, x.dtype), t=x._tr), core.asarray(np.asarray(1.0, x.dtype), t=x._tr)
    # numpy raises on a NaN range; a compiled program cannot, so NaNs are left out
    first, last = (nanmin(x), nanmax(x)) if x.dtype.kind == "f" else (red.min(x), red.max(x))
    same = ew.equal(first, last)
    return ew.where(same, ew.subtract(first, 0.5), first), ew.where(same, ew.add(last, 0.5), last)


def _bin_counts(x, edges, w):
    """The (weighted) count in each bin [e[k], e[k+1]) (the last one closed): the elements
    at or above each edge, differenced -- compares and sums, no scatter."""
    t, n, nb = x._tr, x.shape[0], edges.shape[0] - 1
    dt = core.result_dtype(x, edges)
    xe, ee = core.astype(x, dt), core.astype(edges, dt)
    xb = core.emit(t, BROADCAST_IN_DIM, xe, shape=(nb + 1, n), broadcast_dimensions=(1,))
    eb = core.emit(t, BROADCAST_IN_DIM, ee, shape=(nb + 1, n), broadcast_dimensions=(0,))
    ge = ew.greater_equal(xb, eb)                                   # x >= e[k]
    gt_last = ew.greater(xe, indexing.getitem(ee, nb))             # x > e[-1]
    if w is None:
        cnt = red.sum(core.astype(ge, "int64"), axis=1)
        over = red.sum(core.astype(gt_last, "int64"))
    else:
        wb = core.emit(t, BROADCAST_IN_DIM, w, shape=(nb + 1, n), broadcast_dimensions=(1,))
        cnt = red.sum(ew.where(ge, wb, core.zeros_like(wb)), axis=1)
        over = red.sum(ew.where(gt_last, w, core.zeros_like(w)))
    tail = shapes.reshape(ew.subtract(indexing.getitem(cnt, nb - 1), over), (1,))
    inner = ew.subtract(indexing.getitem(cnt, slice(0, nb - 1)), indexing.getitem(cnt, slice(1, nb)))
    return shapes.concatenate([inner, tail], 0)


def interp(x, xp, fp, left=None, right=None, period=None):
    if period is not None:
        raise NotImplementedError(f"np.interp with period= (at {user_loc()})")
    t = core.trace_of(x, xp, fp, left, right)
    x = core.asarray(x, "float64", t)
    xp = core.asarray(xp, "float64", t)
    fp = core.asarray(fp, "float64", t)
    if xp.ndim != 1 or fp.ndim != 1:
        raise ValueError(f"interp: data points must be 1-d sequences (at {user_loc()})")
    n = xp.shape[0]
    if fp.shape[0] != n:
        raise ValueError(f"interp: fp and xp are not of the same length (at {user_loc()})")
    if n == 0:
        raise ValueError(f"interp: array of sample points is empty (at {user_loc()})")
    x0, f0 = indexing.getitem(xp, 0), indexing.getitem(fp, 0)
    xl, fl = indexing.getitem(xp, n - 1), indexing.getitem(fp, n - 1)
    lv = f0 if left is None else core.asarray(left, "float64", t)
    rv = fl if right is None else core.asarray(right, "float64", t)
    if n == 1:
        r = core.broadcast_to(f0, x.shape)
    else:
        j = ew.subtract(searchsorted(xp, x, "right"), 1)
        j = ew.clip(j, 0, n - 2)
        xa, xb = shapes.take(xp, j), shapes.take(xp, ew.add(j, 1))
        fa, fb = shapes.take(fp, j), shapes.take(fp, ew.add(j, 1))
        slope = ew.true_divide(ew.subtract(fb, fa), ew.subtract(xb, xa))
        r = ew.add(ew.multiply(slope, ew.subtract(x, xa)), fa)
        # numpy: a NaN result (an infinite slope) retries from the right end; equal ends give that value
        r2 = ew.add(ew.multiply(slope, ew.subtract(x, xb)), fb)
        r = ew.where(MF.isnan(r), r2, r)
        r = ew.where(ew.logical_and(MF.isnan(r), ew.equal(fa, fb)), fa, r)
        r = ew.where(ew.equal(x, xa), fa, r)
    r = ew.where(ew.equal(x, xl), core.broadcast_to(fl, x.shape), r)
    r = ew.where(ew.less(x, x0), core.broadcast_to(lv, x.shape), r)
    r = ew.where(ew.greater(x, xl), core.broadcast_to(rv, x.shape), r)
    return r


# ---------------------------------------------------------------------------- NaN-ignoring quantiles
def _nanquantile(name, a, q, axis, method, keepdims, scale):
    x = core.asarray(a)
    if x.size == 0:
        # numpy returns nanmean's result for an empty array (NaN, without q's dims)
        return nanmean(x, axis, keepdims=keepdims)
    if x.dtype.kind == "c":
        raise TypeError(f"np.{name} of complex numbers is not supported in spmd (at {user_loc()})")
    if x.dtype.kind != "f":
        return _quantile(name[3:], x, q, axis, method, keepdims, scale)
    qa = _fractions(name, q, method, scale, NAN_METHODS)
    dt = core.float_dtype(x, q if np.ndim(q) == 0 and isinstance(q, (int, float)) else np.asarray(q, np.float64))
    y, axes = _move_last(core.astype(x, dt), axis, name)
    if y.shape[-1] == 0:
        raise IndexError(f"np.{name} of an empty axis (at {user_loc()})")
    # non-NaN count per slice; the places are worked out in float64, as numpy does, the
    # weight then cast to dt (numpy's gamma)
    k = red.sum(core.astype(ew.logical_not(MF.isnan(y)), "float64"), axis=-1)
    # every q's places among the non-NaNs (traced: they depend on k), picked at once (NaN last)
    places = [(lo, hi, core.astype(t, dt)) for lo, hi, t in (_nan_places(k, qq, method) for qq in qa.ravel().tolist())]
    ranks = shapes.stack([core.astype(p, "int64") for lo, hi, _ in places for p in (lo, hi)], -1)
    sel = _select(y, ranks)
    r = shapes.stack([_nan_quantile(k, indexing.getitem(sel, (Ellipsis, 2 * i)),
                                    indexing.getitem(sel, (Ellipsis, 2 * i + 1)), p, method)
                      for i, p in enumerate(places)], 0)
    r = shapes.reshape(r, qa.shape + y.shape[:-1])
    if keepdims:
        shape = _keepdims_shape(x, axes) if axis is not None else (1,) * x.ndim
        r = shapes.reshape(r, qa.shape + shape)
    return core.astype(r, dt)


def _nan_places(k, q, method):
    """The q-quantile's places among each row's k (traced) non-NaN elements: (index
    below, index above, weight of the one above), as numpy's `method` picks them."""
    v = ew.multiply(ew.maximum(ew.subtract(k, 1.0), 0.0), q)        # virtual index among the non-NaNs
    lo = ew.floor(v)
    hi = ew.minimum(ew.add(lo, 1.0), ew.maximum(ew.subtract(k, 1.0), 0.0))
    if method == "lower":
        hi = lo
    elif method == "higher":
        lo = hi = ew.negative(ew.floor(ew.negative(v)))
    if method == "median":
        hi = ew.negative(ew.floor(ew.negative(v)))
        t = core.zeros_like(v)
    elif method == "linear":
        t = ew.subtract(v, lo)
    elif method == "midpoint":          # numpy: an exact index is picked as is
        t = ew.where(ew.equal(v, ew.floor(v)), core.zeros_like(v), core.full_like(v, 0.5))
    else:
        t = core.zeros_like(v)
    return lo, hi, t


def _nan_quantile(k, a0, a1, places, method):
    """The q-quantile of each row from its picked non-NaN elements a0 (below) and a1
    (above), numpy's interpolation; NaN where the row has no non-NaN (k is 0)."""
    lo, hi, t = places
    d = ew.subtract(a1, a0)
    r = ew.where(ew.greater_equal(t, 0.5), ew.subtract(a1, ew.multiply(d, ew.subtract(1.0, t))),
                 ew.add(a0, ew.multiply(d, t)))
    if method in ("lower", "higher"):
        r = a0                  # numpy picks these without interpolating (inf stays inf)
    elif method == "median":    # np.median of the non-NaNs: the middle one, or the mean of two
        r = ew.where(ew.equal(lo, hi), a0, ew.multiply(ew.add(a0, a1), 0.5))
    return ew.where(ew.equal(k, 0), core.full_like(r, np.nan), r)  # an all-NaN slice: NaN


@core.takes_out
def nanpercentile(a, q, axis=None, out=None, overwrite_input=False, method="linear", keepdims=False, *,
                  weights=None, interpolation=None):
    core.no_extra("nanpercentile", (), {"weights": weights, "interpolation": interpolation})
    r = _nanquantile("nanpercentile", a, q, axis, method, keepdims, 100.0)
    return r if out is None else red.into(out, r, "nanpercentile")


@core.takes_out
def nanquantile(a, q, axis=None, out=None, overwrite_input=False, method="linear", keepdims=False, *,
                weights=None, interpolation=None):
    core.no_extra("nanquantile", (), {"weights": weights, "interpolation": interpolation})
    r = _nanquantile("nanquantile", a, q, axis, method, keepdims, 1.0)
    return r if out is None else red.into(out, r, "nanquantile")


@core.takes_out
def nanmedian(a, axis=None, out=None, overwrite_input=False, keepdims=False):
    if out is not None:
        return red.into(out, nanmedian(a, axis, None, overwrite_input, keepdims), "nanmedian")
    x = core.asarray(a)
    if x.dtype.kind == "c":
        raise TypeError(f"np.nanmedian of complex numbers is not supported in spmd (at {user_loc()})")
    if x.dtype.kind != "f" and x.size:
        return median(x, axis, keepdims=keepdims)
    return _nanquantile("nanmedian", x, 0.5, axis, "median", keepdims, 1.0)
