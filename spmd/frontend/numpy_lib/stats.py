"""Sorting, searching, counting and statistics: sort / argsort (IR ops: stable, NaN
last; along a split axis they gather it, with a warning), median / percentile /
quantile (a sort, then static picks), NaN-ignoring reductions, average, ptp,
searchsorted / digitize / isin / histogram / interp as comparisons summed over the
searched axis (a split axis leaves a pending sum, never a gather)."""
from __future__ import annotations

import builtins

import numpy as np

from ...errors import ShapeError
from .. import numpy_api as A
from ..trace import Tracer, user_loc
from . import math_funcs as M


def _move_last(x, axis, name):
    """x with `axis` (None = all, an int, or a tuple, merged) moved to one last dim."""
    if axis is None:
        return A.reshape(x, (-1,)), tuple(range(x.ndim))
    axes = A._axes(axis, x.ndim, name)
    rest = [d for d in range(x.ndim) if d not in axes]
    y = A.transpose(x, rest + list(axes))
    n = int(np.prod([x.shape[d] for d in axes], dtype=np.int64))
    return A.reshape(y, tuple(x.shape[d] for d in rest) + (n,)), axes


def _keepdims_shape(x, axes):
    return tuple(1 if d in axes else s for d, s in enumerate(x.shape))


# ---------------------------------------------------------------------------- sort
def sort(a, axis=-1, kind=None, order=None, *, stable=None):
    """np.sort, always stable (numpy's default quicksort makes no promise about equal
    elements; spmd picks the stable order so results do not depend on the mesh)."""
    A._no_extra("sort", (), {"order": order})
    x = A.asarray(a)
    if axis is None:
        x, axis = A.ravel(x), 0
    if x.ndim == 0:
        raise ShapeError(f"np.sort: axis {axis} is out of bounds for array of dimension 0 (at {user_loc()})")
    axis = A._axis(axis, x.ndim, "sort")
    return A._emit(x._tr, "sort", x, axis=axis)


def argsort(a, axis=-1, kind=None, order=None, *, stable=None):
    """np.argsort, always stable (what kind="stable" gives in numpy)."""
    A._no_extra("argsort", (), {"order": order})
    x = A.asarray(a)
    if axis is None:
        x, axis = A.ravel(x), 0
    if x.ndim == 0:
        raise ShapeError(f"np.argsort: axis {axis} is out of bounds for array of dimension 0 (at {user_loc()})")
    axis = A._axis(axis, x.ndim, "argsort")
    return A._emit(x._tr, "argsort", x, axis=axis)


# ---------------------------------------------------------------------------- quantiles
METHODS = ("linear", "lower", "higher", "nearest", "midpoint")


def _quantile(name, a, q, axis, method, keepdims, scale):
    x = A.asarray(a)
    if isinstance(q, Tracer):
        raise NotImplementedError(f"np.{name} with traced q is not supported in spmd: pass q as a Python "
                                  f"number or numpy array (at {user_loc()})")
    if method not in METHODS:
        raise NotImplementedError(f"np.{name} method={method!r} (supported: {', '.join(METHODS)}) "
                                  f"(at {user_loc()})")
    qa = np.asarray(q, dtype=np.float64) / scale
    if (qa < 0).any() or (qa > 1).any() or np.isnan(qa).any():
        raise ValueError(f"np.{name}: {'Percentiles' if scale == 100 else 'Quantiles'} must be in the range "
                         f"[0, {int(scale)}] (at {user_loc()})")
    dt = A._float_dtype(x, q if np.ndim(q) == 0 and isinstance(q, (int, float)) else np.asarray(q, np.float64))
    if method in ("lower", "higher", "nearest"):
        dt = x.dtype.name          # numpy picks an element: the input's dtype, bool included
    elif x.dtype.kind not in "fiu":
        raise TypeError(f"np.{name} of {x.dtype}: numpy's interpolation subtracts, which bool does not "
                        f"support (at {user_loc()})")
    y, axes = _move_last(A.astype(x, dt) if x.dtype.kind == "f" else x, axis, name)
    n = y.shape[-1]
    kept = y.shape[:-1]
    if n == 0:
        raise IndexError(f"np.{name} of an empty axis: numpy has no element to pick (at {user_loc()})")
    else:
        s = sort(y, axis=-1)
        v = qa.ravel() * (n - 1)
        lo = np.floor(v).astype(np.int64)
        hi = np.minimum(lo + 1, n - 1)
        if method == "lower":
            hi = lo
        elif method == "higher":
            lo = hi = np.ceil(v).astype(np.int64)
        elif method == "nearest":
            lo = hi = np.around(v).astype(np.int64)     # numpy rounds half to even here too
        a0 = A.astype(A.take(s, lo, axis=-1), dt)
        a1 = A.astype(A.take(s, hi, axis=-1), dt)
        if method == "midpoint":
            t = np.where(v == np.floor(v), 0.0, 0.5)      # numpy: an exact index is picked as is
        else:
            t = v - lo if method == "linear" else np.zeros_like(v)
        t = np.asarray(t, dtype=dt)
        if method in ("lower", "higher", "nearest"):
            r = a0                  # numpy picks these without interpolating (inf stays inf)
        else:
            d = A.subtract(a1, a0)
            r = A.where(t >= 0.5, A.subtract(a1, A.multiply(d, 1.0 - t)), A.add(a0, A.multiply(d, t)))
        if x.dtype.kind == "f":
            # any NaN in a slice makes its quantiles NaN (sorted NaNs sit last)
            bad = M.isnan(A.getitem(s, (Ellipsis, slice(n - 1, n))))
            r = A.where(bad, A.full_like(r, np.nan), r)
        # (..., nq) -> q's dims first
        r = A.reshape(r, kept + qa.shape)
        nk, nq = len(kept), qa.ndim
        r = A.transpose(r, list(range(nk, nk + nq)) + list(range(nk)))
    if keepdims:
        shape = _keepdims_shape(x, axes) if axis is not None else (1,) * x.ndim
        r = A.reshape(r, qa.shape + shape)
    return A.astype(r, dt)


def percentile(a, q, axis=None, out=None, overwrite_input=False, method="linear", keepdims=False, *,
               weights=None, interpolation=None):
    A._no_extra("percentile", (), {"out": out, "weights": weights, "interpolation": interpolation})
    return _quantile("percentile", a, q, axis, method, keepdims, 100.0)


def quantile(a, q, axis=None, out=None, overwrite_input=False, method="linear", keepdims=False, *,
             weights=None, interpolation=None):
    A._no_extra("quantile", (), {"out": out, "weights": weights, "interpolation": interpolation})
    return _quantile("quantile", a, q, axis, method, keepdims, 1.0)


def median(a, axis=None, out=None, overwrite_input=False, keepdims=False):
    A._no_extra("median", (), {"out": out})
    x = A.asarray(a)
    dt = A._float_dtype(x)
    y, axes = _move_last(A.astype(x, dt), axis, "median")
    n = y.shape[-1]
    if n == 0:
        r = A.full_like(y, np.nan, dtype=dt, shape=y.shape[:-1])
    else:
        s = sort(y, axis=-1)
        mid = A.take(s, np.array([(n - 1) // 2, n // 2], np.int64), axis=-1)
        r = A.mean(mid, axis=-1) if n % 2 == 0 else A.getitem(mid, (Ellipsis, 0))
        bad = M.isnan(A.getitem(s, (Ellipsis, n - 1)))
        r = A.where(bad, A.full_like(r, np.nan), r)
    if keepdims:
        r = A.reshape(r, _keepdims_shape(x, axes) if axis is not None else (1,) * x.ndim)
    return r


# ---------------------------------------------------------------------------- averages, nan*
def average(a, axis=None, weights=None, returned=False, *, keepdims=False):
    x = A.asarray(a)
    axes = A._axes(axis, x.ndim, "average")
    if weights is None:
        avg = A.mean(x, axis, keepdims=keepdims)
        if avg.size == 0:
            raise ZeroDivisionError(f"np.average of an empty result: numpy divides by its size "
                                    f"(at {user_loc()})")
        if returned:
            n = float(np.prod([x.shape[d] for d in axes], dtype=np.int64))
            return avg, A.full_like(avg, n)
        return avg
    w = A.asarray(weights, t=x._tr)
    if x.dtype.kind in "iub":
        dt = A.result_dtype(x, w, np.float64(0))
    else:
        dt = A.result_dtype(x, w)
    if w.shape != x.shape:
        if axis is None:
            raise TypeError(f"average: axis must be specified when shapes of a and weights differ (at {user_loc()})")
        if w.ndim != len(axes) or w.shape != tuple(x.shape[d] for d in axes):
            raise ValueError(f"average: shape of weights {list(w.shape)} must be consistent with shape of a "
                             f"{list(x.shape)} along axis {axis} (at {user_loc()})")
        w = A._emit(x._tr, "broadcast_in_dim", A.astype(w, dt), shape=x.shape, broadcast_dimensions=axes)
    if builtins.any(x.shape[d] == 0 for d in axes):
        raise ZeroDivisionError(f"np.average: Weights sum to zero, can't be normalized (an empty axis) "
                                f"(at {user_loc()})")
    xw = A.astype(x, dt)
    w = A.astype(w, dt)
    scl = A.sum(w, axis, keepdims=keepdims)
    avg = A.true_divide(A.sum(A.multiply(xw, w), axis, keepdims=keepdims), scl)
    if returned:
        return avg, A.broadcast_to(scl, avg.shape)
    return avg


def _nan_prep(a):
    x = A.asarray(a)
    if x.dtype.kind not in "fc":
        return x, None
    return x, M.isnan(x)


def nansum(a, axis=None, dtype=None, out=None, keepdims=False, **kw):
    A._no_extra("nansum", (), dict(kw, out=out))
    x, nan = _nan_prep(a)
    if nan is not None:
        x = A.where(nan, A.zeros_like(x), x)
    return A.sum(x, axis, dtype=dtype, keepdims=keepdims)


def nanprod(a, axis=None, dtype=None, out=None, keepdims=False, **kw):
    A._no_extra("nanprod", (), dict(kw, out=out))
    x, nan = _nan_prep(a)
    if nan is not None:
        x = A.where(nan, A.ones_like(x), x)
    return A.prod(x, axis, dtype=dtype, keepdims=keepdims)


def _nan_count(x, nan, axis, keepdims, dt):
    if nan is None:
        axes = A._axes(axis, x.ndim, "nanmean")
        n = int(np.prod([x.shape[d] for d in axes], dtype=np.int64))
        return np.asarray(n, dt)
    return A.sum(A.astype(A.logical_not(nan), dt), axis, keepdims=keepdims)


def nanmean(a, axis=None, dtype=None, out=None, keepdims=False, **kw):
    A._no_extra("nanmean", (), dict(kw, out=out))
    x, nan = _nan_prep(a)
    if nan is None:
        return A.mean(x, axis, dtype, keepdims=keepdims)
    dt = A.dtypes.canon(dtype) if dtype is not None else x.dtype.name
    s = A.sum(A.astype(A.where(nan, A.zeros_like(x), x), dt), axis, keepdims=keepdims)
    return A.true_divide(s, _nan_count(x, nan, axis, keepdims, dt))


def nanvar(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, **kw):
    A._no_extra("nanvar", (), dict(kw, out=out))
    x, nan = _nan_prep(a)
    if nan is None:
        return A.var(x, axis, dtype, ddof=ddof, keepdims=keepdims)
    dt = A.dtypes.canon(dtype) if dtype is not None else x.dtype.name
    m = nanmean(x, axis, dt, keepdims=True)
    d = A.where(nan, A.zeros_like(x, dtype=dt), A.subtract(A.astype(x, dt), m))
    s = A.sum(A.multiply(d, d), axis, keepdims=keepdims)
    cnt = A.subtract(_nan_count(x, nan, axis, keepdims, dt), float(ddof))
    cnt = A.where(A.less_equal(cnt, 0), A.zeros_like(cnt), cnt)
    return A.true_divide(s, cnt)


def nanstd(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, **kw):
    return A.sqrt(nanvar(a, axis, dtype, out, ddof, keepdims, **kw))


def _nan_extreme(a, axis, keepdims, pick, fill, name):
    x, nan = _nan_prep(a)
    if nan is None:
        return pick(x, axis, keepdims=keepdims)
    A._no_identity(name, x, axis)
    r = pick(A.where(nan, A.full_like(x, fill), x), axis, keepdims=keepdims)
    # an all-NaN slice gives NaN (numpy warns)
    return A.where(A.all(nan, axis, keepdims=keepdims), A.full_like(r, np.nan), r)


def nanmax(a, axis=None, out=None, keepdims=False, **kw):
    A._no_extra("nanmax", (), dict(kw, out=out))
    return _nan_extreme(a, axis, keepdims, A.max, -np.inf, "nanmax")


def nanmin(a, axis=None, out=None, keepdims=False, **kw):
    A._no_extra("nanmin", (), dict(kw, out=out))
    return _nan_extreme(a, axis, keepdims, A.min, np.inf, "nanmin")


def ptp(a, axis=None, out=None, keepdims=False):
    A._no_extra("ptp", (), {"out": out})
    x = A.asarray(a)
    if x.dtype == np.bool_:
        raise TypeError(f"np.ptp of bool: numpy's subtract does not take booleans (at {user_loc()})")
    return A.subtract(A.max(x, axis, keepdims=keepdims), A.min(x, axis, keepdims=keepdims))


def count_nonzero(a, axis=None, *, keepdims=False):
    x = A.asarray(a)
    nz = A.not_equal(x, False if x.dtype == np.bool_ else 0)
    return A.sum(A.astype(nz, "int64"), axis, keepdims=keepdims)


# ---------------------------------------------------------------------------- searching
def _lt(a, v, strict):
    """a < v (strict) or a <= v, with NaN ordered last as numpy's sort puts it."""
    if a.dtype.kind != "f":
        return A.less(a, v) if strict else A.less_equal(a, v)
    vn, an = M.isnan(v), M.isnan(a)
    if strict:
        return A.logical_or(A.less(a, v), A.logical_and(vn, A.logical_not(an)))
    return A.logical_or(A.less_equal(a, v), vn)


def searchsorted(a, v, side="left", sorter=None):
    t = A._trace(a, v)
    a = A.asarray(a, t=t)
    if a.ndim != 1:
        raise ValueError(f"searchsorted: a must be 1-d, got {list(a.shape)} (at {user_loc()})")
    if side not in ("left", "right"):
        raise ValueError(f"searchsorted: side must be 'left' or 'right', got {side!r} (at {user_loc()})")
    if sorter is not None:
        a = A.take(a, sorter)
    dt = A.result_dtype(a, v)
    a, v = A.astype(a, dt), A.asarray(v, dt, t)
    n = a.shape[0]
    # count of a[i] < v (left) or a[i] <= v (right): a compare against every element of a
    ab = A._emit(t, "broadcast_in_dim", a, shape=v.shape + (n,), broadcast_dimensions=(v.ndim,))
    vb = A._emit(t, "broadcast_in_dim", v, shape=v.shape + (n,), broadcast_dimensions=tuple(range(v.ndim)))
    return A.sum(A.astype(_lt(ab, vb, side == "left"), "int64"), axis=-1)


def digitize(x, bins, right=False):
    t = A._trace(x, bins)
    x = A.asarray(x, t=t)
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
        return A.subtract(b.shape[0], searchsorted(b[::-1].copy(), x, side))
    b = A.asarray(bins, t=t)
    up = searchsorted(b, x, side)
    down = A.subtract(b.shape[0], searchsorted(A.getitem(b, slice(None, None, -1)), x, side))
    inc = A.less_equal(A.getitem(b, 0), A.getitem(b, -1))
    return A.where(inc, up, down)


def isin(element, test_elements, assume_unique=False, invert=False, *, kind=None):
    t = A._trace(element, test_elements)
    e = A.asarray(element, t=t)
    te = A.ravel(A.asarray(test_elements, t=t))
    dt = A.result_dtype(e, te)
    e, te = A.astype(e, dt), A.astype(te, dt)
    m = te.shape[0]
    eb = A._emit(t, "broadcast_in_dim", e, shape=e.shape + (m,), broadcast_dimensions=tuple(range(e.ndim)))
    tb = A._emit(t, "broadcast_in_dim", te, shape=e.shape + (m,), broadcast_dimensions=(e.ndim,))
    r = A.any(A.equal(eb, tb), axis=-1)
    return A.logical_not(r) if invert else r


def bincount(x, weights=None, minlength=0):
    raise NotImplementedError(
        f"np.bincount's result length is max(x) + 1, which depends on the data; spmd's shapes are fixed "
        f"when tracing. Use np.histogram(x, bins=n, range=(0, n)) or "
        f"(x[..., None] == np.arange(n)).sum(0) for a fixed number of bins n (at {user_loc()})")


def histogram(a, bins=10, range=None, density=None, weights=None):
    x = A.ravel(A.asarray(a))
    t = x._tr
    if isinstance(bins, str):
        raise NotImplementedError(f"np.histogram with bins={bins!r} chooses the number of bins from the "
                                  f"data; pass a number or the edges (at {user_loc()})")
    if isinstance(bins, Tracer):
        raise NotImplementedError(f"np.histogram with traced bin edges (at {user_loc()})")
    w = None if weights is None else A.ravel(A.asarray(weights, t=t))
    if w is not None and w.shape != x.shape:
        raise ValueError(f"histogram: weights should have the same shape as a (at {user_loc()})")
    if np.ndim(bins) == 0:
        nb = int(bins)
        if nb < 1:
            raise ValueError(f"histogram: bins must be a positive integer (at {user_loc()})")
        et = A.result_dtype(x, 0.0) if x.dtype.kind == "f" else "float64"
        if range is not None:
            lo, hi = float(range[0]), float(range[1])
            if lo > hi:
                raise ValueError(f"histogram: max must be larger than min in range parameter (at {user_loc()})")
            if not (np.isfinite(lo) and np.isfinite(hi)):
                raise ValueError(f"histogram: supplied range of [{lo}, {hi}] is not finite (at {user_loc()})")
            if lo == hi:
                lo, hi = lo - 0.5, hi + 0.5
            edges = A.asarray(np.linspace(lo, hi, nb + 1, endpoint=True, dtype=et), t=t)
            first, last = lo, hi
        else:
            xf = A.astype(x, et)
            if x.shape[0] == 0:
                first, last = A.asarray(np.asarray(0.0, et), t=t), A.asarray(np.asarray(1.0, et), t=t)
            else:
                # numpy raises on a NaN range; a compiled program cannot, so NaNs are left out
                first, last = (nanmin(xf), nanmax(xf)) if xf.dtype.kind == "f" else (A.min(xf), A.max(xf))
                same = A.equal(first, last)
                first = A.where(same, A.subtract(first, 0.5), first)
                last = A.where(same, A.add(last, 0.5), last)
            # numpy's linspace: arange * step + start, the last edge exactly `last`
            step = A.true_divide(A.subtract(last, first), float(nb))
            ramp = A.asarray(np.arange(nb + 1, dtype=et), t=t)
            edges = A.add(A.multiply(ramp, step), first)
            edges = A.concatenate([A.getitem(edges, slice(0, nb)), A.reshape(last, (1,))], 0)
    else:
        e = np.asarray(bins)
        if e.ndim != 1 or (np.diff(e) < 0).any():
            raise ValueError(f"histogram: bins must increase monotonically, when an array (at {user_loc()})")
        edges = A.asarray(e, t=t)
        first, last = None, None
        nb = e.shape[0] - 1
    n = x.shape[0]
    dt = A.result_dtype(x, edges)
    xe, ee = A.astype(x, dt), A.astype(edges, dt)
    xb = A._emit(t, "broadcast_in_dim", xe, shape=(nb + 1, n), broadcast_dimensions=(1,))
    eb = A._emit(t, "broadcast_in_dim", ee, shape=(nb + 1, n), broadcast_dimensions=(0,))
    ge = A.greater_equal(xb, eb)                                   # x >= e[k]
    gt_last = A.greater(xe, A.getitem(ee, nb))                    # x > e[-1]
    if w is None:
        cnt = A.sum(A.astype(ge, "int64"), axis=1)
        over = A.sum(A.astype(gt_last, "int64"))
    else:
        wb = A._emit(t, "broadcast_in_dim", w, shape=(nb + 1, n), broadcast_dimensions=(1,))
        cnt = A.sum(A.where(ge, wb, A.zeros_like(wb)), axis=1)
        over = A.sum(A.where(gt_last, w, A.zeros_like(w)))
    tail = A.reshape(A.subtract(A.getitem(cnt, nb - 1), over), (1,))
    hist = A.concatenate([A.subtract(A.getitem(cnt, slice(0, nb - 1)), A.getitem(cnt, slice(1, nb))), tail], 0)
    if density:
        # numpy divides by the widths as float64
        widths = A.astype(A.subtract(A.getitem(edges, slice(1, None)), A.getitem(edges, slice(0, nb))), "float64")
        hist = A.true_divide(A.true_divide(hist, widths), A.sum(hist))
    return hist, edges


def interp(x, xp, fp, left=None, right=None, period=None):
    if period is not None:
        raise NotImplementedError(f"np.interp with period= (at {user_loc()})")
    t = A._trace(x, xp, fp, left, right)
    x = A.asarray(x, "float64", t)
    xp = A.asarray(xp, "float64", t)
    fp = A.asarray(fp, "float64", t)
    if xp.ndim != 1 or fp.ndim != 1:
        raise ValueError(f"interp: data points must be 1-d sequences (at {user_loc()})")
    n = xp.shape[0]
    if fp.shape[0] != n:
        raise ValueError(f"interp: fp and xp are not of the same length (at {user_loc()})")
    if n == 0:
        raise ValueError(f"interp: array of sample points is empty (at {user_loc()})")
    x0, f0 = A.getitem(xp, 0), A.getitem(fp, 0)
    xl, fl = A.getitem(xp, n - 1), A.getitem(fp, n - 1)
    lv = f0 if left is None else A.asarray(left, "float64", t)
    rv = fl if right is None else A.asarray(right, "float64", t)
    if n == 1:
        r = A.broadcast_to(f0, x.shape)
    else:
        j = A.subtract(searchsorted(xp, x, "right"), 1)
        j = A.clip(j, 0, n - 2)
        xa, xb = A.take(xp, j), A.take(xp, A.add(j, 1))
        fa, fb = A.take(fp, j), A.take(fp, A.add(j, 1))
        slope = A.true_divide(A.subtract(fb, fa), A.subtract(xb, xa))
        r = A.add(A.multiply(slope, A.subtract(x, xa)), fa)
        # numpy: a NaN result (an infinite slope) retries from the right end; equal ends give that value
        r2 = A.add(A.multiply(slope, A.subtract(x, xb)), fb)
        r = A.where(M.isnan(r), r2, r)
        r = A.where(A.logical_and(M.isnan(r), A.equal(fa, fb)), fa, r)
        r = A.where(A.equal(x, xa), fa, r)
    r = A.where(A.equal(x, xl), A.broadcast_to(fl, x.shape), r)
    r = A.where(A.less(x, x0), A.broadcast_to(lv, x.shape), r)
    r = A.where(A.greater(x, xl), A.broadcast_to(rv, x.shape), r)
    return r


__all__ = ["builtins"]


# ---------------------------------------------------------------------------- NaN-ignoring quantiles
def _pick(s, pos):
    """s[..., pos[...]] along the last dim for traced positions: a one-hot sum (local on
    every other dim; n elements read per pick)."""
    n = s.shape[-1]
    iota = A._emit(s._tr, "iota", shape=pos.shape + (n,), dtype="int64", dimension=pos.ndim)
    hit = A.equal(iota, A._emit(s._tr, "broadcast_in_dim", pos, shape=pos.shape + (n,),
                                broadcast_dimensions=tuple(range(pos.ndim))))
    sb = A.broadcast_to(s, pos.shape + (n,))
    return A.sum(A.where(hit, sb, A.zeros_like(sb)), axis=-1)


def _nanquantile(name, a, q, axis, method, keepdims, scale):
    x = A.asarray(a)
    if x.size == 0:
        # numpy returns nanmean's result for an empty array (NaN, without q's dims)
        return nanmean(x, axis, keepdims=keepdims)
    if x.dtype.kind == "c":
        raise TypeError(f"np.{name} of complex numbers is not supported in spmd (at {user_loc()})")
    if x.dtype.kind != "f":
        return _quantile(name[3:], x, q, axis, method, keepdims, scale)
    if isinstance(q, Tracer):
        raise NotImplementedError(f"np.{name} with traced q is not supported in spmd (at {user_loc()})")
    if method not in ("linear", "lower", "higher", "midpoint", "median"):
        raise NotImplementedError(f"np.{name} method={method!r} (supported: linear, lower, higher, midpoint) "
                                  f"(at {user_loc()})")
    qa = np.asarray(q, dtype=np.float64) / scale
    if (qa < 0).any() or (qa > 1).any() or np.isnan(qa).any():
        raise ValueError(f"np.{name}: {'Percentiles' if scale == 100 else 'Quantiles'} must be in the range "
                         f"[0, {int(scale)}] (at {user_loc()})")
    dt = A._float_dtype(x, q if np.ndim(q) == 0 and isinstance(q, (int, float)) else np.asarray(q, np.float64))
    y, axes = _move_last(A.astype(x, dt), axis, name)
    n = y.shape[-1]
    kept = y.shape[:-1]
    if n == 0:
        raise IndexError(f"np.{name} of an empty axis (at {user_loc()})")
    s = sort(y, axis=-1)                                              # NaNs last
    k = A.sum(A.astype(A.logical_not(M.isnan(y)), dt), axis=-1)      # non-NaN count per slice
    outs = []
    for qq in qa.ravel().tolist():
        v = A.multiply(A.maximum(A.subtract(k, 1.0), 0.0), qq)        # virtual index among the non-NaNs
        lo = A.floor(v)
        hi = A.minimum(A.add(lo, 1.0), A.maximum(A.subtract(k, 1.0), 0.0))
        if method == "lower":
            hi = lo
        elif method == "higher":
            lo = hi = A.negative(A.floor(A.negative(v)))
        if method == "median":
            hi = A.negative(A.floor(A.negative(v)))
            t = A.zeros_like(v)
        elif method == "linear":
            t = A.subtract(v, lo)
        elif method == "midpoint":          # numpy: an exact index is picked as is
            t = A.where(A.equal(v, A.floor(v)), A.zeros_like(v), A.full_like(v, 0.5))
        else:
            t = A.zeros_like(v)
        a0 = _pick(s, A.astype(lo, "int64"))
        a1 = _pick(s, A.astype(hi, "int64"))
        d = A.subtract(a1, a0)
        r = A.where(A.greater_equal(t, 0.5), A.subtract(a1, A.multiply(d, A.subtract(1.0, t))),
                    A.add(a0, A.multiply(d, t)))
        if method in ("lower", "higher"):
            r = a0                  # numpy picks these without interpolating (inf stays inf)
        elif method == "median":    # np.median of the non-NaNs: the middle one, or the mean of two
            r = A.where(A.equal(lo, hi), a0, A.multiply(A.add(a0, a1), 0.5))
        outs.append(A.where(A.equal(k, 0), A.full_like(r, np.nan), r))  # an all-NaN slice: NaN
    r = A.stack(outs, 0) if outs else None
    r = A.reshape(r, qa.shape + kept)
    if keepdims:
        shape = _keepdims_shape(x, axes) if axis is not None else (1,) * x.ndim
        r = A.reshape(r, qa.shape + shape)
    return A.astype(r, dt)


def nanpercentile(a, q, axis=None, out=None, overwrite_input=False, method="linear", keepdims=False, *,
                  weights=None, interpolation=None):
    A._no_extra("nanpercentile", (), {"out": out, "weights": weights, "interpolation": interpolation})
    return _nanquantile("nanpercentile", a, q, axis, method, keepdims, 100.0)


def nanquantile(a, q, axis=None, out=None, overwrite_input=False, method="linear", keepdims=False, *,
                weights=None, interpolation=None):
    A._no_extra("nanquantile", (), {"out": out, "weights": weights, "interpolation": interpolation})
    return _nanquantile("nanquantile", a, q, axis, method, keepdims, 1.0)


def nanmedian(a, axis=None, out=None, overwrite_input=False, keepdims=False):
    A._no_extra("nanmedian", (), {"out": out})
    x = A.asarray(a)
    if x.dtype.kind == "c":
        raise TypeError(f"np.nanmedian of complex numbers is not supported in spmd (at {user_loc()})")
    if x.dtype.kind != "f" and x.size:
        return median(x, axis, keepdims=keepdims)
    return _nanquantile("nanmedian", x, 0.5, axis, "median", keepdims, 1.0)
