"""numpy's set functions and selections whose result's size depends on the data:
np.intersect1d, union1d, setdiff1d, setxor1d, extract, compress (traced condition),
trim_zeros and np.unique(axis=k).

As in data_sized.py, each takes its sizes from the data with one value of a traced count
(a graph break under spmd.jit, an error naming the line without one), and computes the
result as numpy does: stable sorts, neighbours compared, positions taken by a padded
flatnonzero of the selection mask."""
from __future__ import annotations

import numpy as np

from ...errors import user_loc
from .. import core, indexing, padded, shapes
from .. import elementwise as ew
from .. import reductions as red
from ..trace import Tracer
from . import math_funcs as MF
from .data_sized import count_from_data, from_data
from .data_sized import unique as unique_flat
from .index_funcs import lexsort
from .stats import argsort, isin, searchsorted


def _flat(x, t=None, dtype=None):
    return shapes.reshape(core.asarray(x, dtype, t), (-1,))


def _positions(mask, name):
    """The positions where the traced 1-d mask holds, their number taken from the data
    (none to take from an empty mask)."""
    if mask.shape[0] == 0:
        return core.asarray(np.zeros(0, np.int64), t=mask._tr)
    return padded.flatnonzero(mask, size=count_from_data(mask, name))


def _sl(x, start=None, stop=None):
    return indexing.getitem(x, slice(start, stop))


def _first_of_groups(s, collapse_nan=True):
    """On a sorted 1-d s: True at the first element of each run of equal values (NaNs one
    run when collapse_nan, as np.unique's equal_nan)."""
    t = s._tr
    if s.shape[0] == 0:
        return core.asarray(np.zeros(0, bool), t=t)
    differs = ew.not_equal(_sl(s, 1), _sl(s, None, -1))
    if collapse_nan and s.dtype.kind in "fc":
        differs = ew.logical_and(differs, ew.logical_not(ew.logical_and(MF.isnan(_sl(s, 1)),
                                                                       MF.isnan(_sl(s, None, -1)))))
    return shapes.concatenate([core.asarray(np.ones(1, bool), t=t), differs], 0)


def _sorted(x):
    order = argsort(x, kind="stable")
    return order, indexing.getitem(x, order)


def intersect1d(ar1, ar2, assume_unique=False, return_indices=False):
    """np.intersect1d: the sorted values in both (and where asked the index of each in
    ar1 and ar2: their first occurrences, or with assume_unique, numpy's pairing of
    neighbours in the merged sort)."""
    t = core.trace_of(ar1, ar2)
    dt = core.result_dtype(ar1, ar2)
    a, b = _flat(ar1, t, dt), _flat(ar2, t, dt)
    if assume_unique:
        aux = shapes.concatenate([a, b], 0)
        perm, s = _sorted(aux)
        if s.shape[0] == 0:
            mask = core.asarray(np.zeros(0, bool), t=t)
        else:
            mask = ew.equal(_sl(s, 1), _sl(s, None, -1))
        pos = _positions(mask, "intersect1d")
        vals = indexing.getitem(_sl(s, None, -1), pos)
        if not return_indices:
            return vals
        i1 = indexing.getitem(_sl(perm, None, -1), pos)
        i2 = ew.subtract(indexing.getitem(_sl(perm, 1), pos), np.int64(a.shape[0]))
        return vals, i1, i2
    order1, s1 = _sorted(a)
    order2, s2 = _sorted(b)
    if s1.shape[0] == 0 or s2.shape[0] == 0:
        empty = core.asarray(np.zeros(0, dt), t=t)
        idx = core.asarray(np.zeros(0, np.int64), t=t)
        return (empty, idx, idx) if return_indices else empty
    at = searchsorted(s2, s1)                        # the first of s1's value in the sorted b
    at_c = ew.minimum(at, np.int64(s2.shape[0] - 1))
    found = ew.logical_and(ew.less(at, np.int64(s2.shape[0])), ew.equal(indexing.getitem(s2, at_c), s1))
    pos = _positions(ew.logical_and(_first_of_groups(s1), found), "intersect1d")
    vals = indexing.getitem(s1, pos)
    if not return_indices:
        return vals
    return vals, indexing.getitem(order1, pos), indexing.getitem(order2, indexing.getitem(at_c, pos))


def union1d(ar1, ar2):
    """np.union1d: np.unique of both, flattened and joined."""
    t = core.trace_of(ar1, ar2)
    dt = core.result_dtype(ar1, ar2)
    return unique_flat(shapes.concatenate([_flat(ar1, t, dt), _flat(ar2, t, dt)], 0))


def setdiff1d(ar1, ar2, assume_unique=False):
    """np.setdiff1d: the unique values of ar1 (ar1 as it is, with assume_unique) not in ar2."""
    t = core.trace_of(ar1, ar2)
    a = _flat(ar1, t)
    if not assume_unique:
        _, a = _sorted(a)
        keep = ew.logical_and(_first_of_groups(a), isin(a, ar2, invert=True))
    else:
        keep = isin(a, ar2, invert=True)
    return indexing.getitem(a, _positions(keep, "setdiff1d"))


def setxor1d(ar1, ar2, assume_unique=False):
    """np.setxor1d: the sorted values in exactly one of the two (numpy's own steps: each
    made unique, joined, sorted, values without an equal neighbour kept)."""
    t = core.trace_of(ar1, ar2)
    dt = core.result_dtype(ar1, ar2)
    a, b = _flat(ar1, t, dt), _flat(ar2, t, dt)
    if not assume_unique:
        a, b = unique_flat(a), unique_flat(b)
    aux = shapes.concatenate([a, b], 0)
    if aux.shape[0] == 0:
        return aux
    _, aux = _sorted(aux)
    true = core.asarray(np.ones(1, bool), t=t)
    flag = shapes.concatenate([true, ew.not_equal(_sl(aux, 1), _sl(aux, None, -1)), true], 0)
    keep = ew.logical_and(_sl(flag, 1), _sl(flag, None, -1))
    return indexing.getitem(aux, _positions(keep, "setxor1d"))


def _condition(condition, n, name):
    """A 1-d condition over n elements, as numpy reads it: a shorter one selects among the
    first elements only; a longer one may not select past n (numpy's IndexError), which a
    traced condition cannot check, so it is refused."""
    c = shapes.reshape(core.asarray(condition), (-1,))
    c = ew.not_equal(c, False if c.dtype == np.bool_ else c.dtype.type(0))
    if c.shape[0] > n:
        raise NotImplementedError(f"np.{name} at {user_loc()}: a traced condition of {c.shape[0]} elements for "
                                  f"{n}; numpy raises IndexError if one past {n} is True, which spmd.jit cannot "
                                  f"check: cut the condition to {n} elements")
    return c


def extract(condition, arr):
    """np.extract: the elements of arr (flattened) where condition (flattened) is nonzero."""
    t = core.trace_of(condition, arr)
    a = _flat(arr, t)
    if not isinstance(condition, Tracer):           # known when tracing: a static gather
        return compress(np.ravel(condition), a)
    c = _condition(core.asarray(condition, t=t), a.shape[0], "extract")
    return indexing.getitem(_sl(a, None, c.shape[0]), _positions(c, "extract"))


def compress(condition, a, axis=None, out=None):
    """np.compress: the slices of a along axis where condition is True. A condition known
    when tracing is a static gather; a traced one takes its count from the data."""
    x = core.asarray(a)
    if axis is None:
        x, axis = shapes.reshape(x, (-1,)), 0
    axis = core.normalize_axis(axis, x.ndim, "compress")
    n = x.shape[axis]
    if not isinstance(condition, Tracer):
        c = np.asarray(condition)
        if c.ndim != 1:
            raise ValueError(f"condition must be a 1-d array (numpy raises the same ValueError; np.compress at "
                             f"{user_loc()})")
        idx = np.nonzero(c)[0]
        if idx.size and idx[-1] >= n:
            raise IndexError(f"index {idx[-1]} is out of bounds for axis {axis} with size {n} (np.compress at "
                             f"{user_loc()})")
        return shapes.take(x, idx.astype(np.int64), axis=axis)
    if condition.ndim != 1:
        raise ValueError(f"condition must be a 1-d array (numpy raises the same ValueError; np.compress at "
                         f"{user_loc()})")
    c = _condition(condition, n, "compress")
    return shapes.take(x, _positions(c, "compress"), axis=axis)


def trim_zeros(filt, trim="fb", axis=None):
    """np.trim_zeros: the leading ('f') and trailing ('b') zeros cut along the axes (every
    axis by default: hyperplanes of zeros at the edges), all of them when all is zero."""
    x = core.asarray(filt)
    trim = trim.lower()
    if trim not in {"fb", "bf", "f", "b"}:
        raise ValueError(f"unexpected character(s) in `trim`: {trim!r} (np.trim_zeros at {user_loc()})")
    axes = tuple(range(x.ndim)) if axis is None else core.normalize_axes(axis, x.ndim, "trim_zeros")
    if not axes:
        return x
    nz = ew.not_equal(x, False if x.dtype == np.bool_ else x.dtype.type(0))
    ends = [core.astype(red.any(nz), "int64")]
    for d in range(x.ndim):
        others = tuple(k for k in range(x.ndim) if k != d)
        along = red.any(nz, axis=others) if others else nz
        first = red.argmax(along)
        last = ew.subtract(np.int64(x.shape[d] - 1), red.argmax(indexing.getitem(along, slice(None, None, -1))))
        ends += [core.astype(first, "int64"), core.astype(last, "int64")]
    vals = [int(v) for v in from_data(shapes.stack(ends), "trim_zeros")]
    key = []
    for d in range(x.ndim):
        if d not in axes:
            key.append(slice(None))
        elif not vals[0]:
            key.append(slice(0, 0))
        else:
            key.append(slice(vals[1 + 2 * d] if "f" in trim else None, vals[2 + 2 * d] + 1 if "b" in trim else None))
    return indexing.getitem(x, tuple(key))


def unique(ar, return_index=False, return_inverse=False, return_counts=False, axis=None, *,
           equal_nan=True, sorted=True):
    """np.unique; with axis, of the sub-arrays along it (rows for axis=0) as numpy compares
    them: sorted lexicographically (NaN last, -0.0 equal to 0.0), and two equal only when
    every element is (so rows with NaN are each their own, as numpy's structured compare)."""
    if axis is None:
        return unique_flat(ar, return_index, return_inverse, return_counts, equal_nan=equal_nan, sorted=sorted)
    x = core.asarray(ar)
    axis = core.normalize_axis(axis, x.ndim, "unique")
    moved = shapes.moveaxis(x, axis, 0)
    n, rest = moved.shape[0], moved.shape[1:]
    m = int(np.prod(rest, dtype=np.int64))
    if m == 0 and n:
        raise NotImplementedError(f"np.unique(axis={axis}) of sub-arrays with no elements (at {user_loc()})")
    rows = shapes.reshape(moved, (n, m))
    t = x._tr
    if n == 0:
        order = core.asarray(np.zeros(0, np.int64), t=t)
        new = core.asarray(np.zeros(0, bool), t=t)
        s = rows
    else:
        order = lexsort([indexing.getitem(rows, (slice(None), j)) for j in range(m - 1, -1, -1)])
        s = indexing.getitem(rows, order)
        differs = red.any(ew.not_equal(_sl(s, 1), _sl(s, None, -1)), axis=1)
        new = shapes.concatenate([core.asarray(np.ones(1, bool), t=t), differs], 0)
    k = count_from_data(new, "unique")
    starts = padded.flatnonzero(new, size=k)
    vals = shapes.moveaxis(shapes.reshape(indexing.getitem(s, starts), (k,) + rest), 0, axis)
    out = [vals]
    if return_index:
        out.append(indexing.getitem(order, starts))
    if return_inverse:
        group = ew.subtract(red.cumsum(core.astype(new, "int64")), np.int64(1))
        inv = shapes.take(group, argsort(order)) if n else group
        out.append(inv)
    if return_counts:
        ends = shapes.concatenate([_sl(starts, 1), core.asarray(np.array([n], np.int64), t=t)], 0)
        out.append(ew.subtract(ends, starts))
    return out[0] if len(out) == 1 else tuple(out)


__all__ = ["intersect1d", "union1d", "setdiff1d", "setxor1d", "extract", "compress", "trim_zeros", "unique"]
