"""numpy's functions whose result's size depends on the data: np.nonzero, flatnonzero,
argwhere, one-argument np.where, np.unique, np.bincount.

A compiled program has fixed shapes, so each takes its size from the data with one
`int()` of a traced count: under spmd.jit that is a graph break (spmd/jit/graph_breaks.py:
the part before runs and gives the count, the rest is compiled for it, once per count),
and without one, an error naming the user's line. With the size known, the result is
computed exactly as numpy's, with the padded forms of padded.py and static shapes."""
from __future__ import annotations

import numpy as np

from ...errors import ConcreteValueError, user_loc
from .. import core, indexing, padded, shapes
from ..masked import Masked, Positions
from ..trace import Tracer
from ...ir.ops.names import IOTA
from ...ir.ops.value_ranges import extremes, int_range
from ..value_bounds import known
from .. import elementwise as ew
from .. import functionalize as fz
from .. import reductions as red
from . import math_funcs as MF
from .stats import argsort, count_nonzero


_INSTEAD = {
    "nonzero": "the positions padded to a length you choose, spmd.numpy.nonzero(x, size=n)",
    "unique": "np.sort(x) and its neighbours (np.diff) at a fixed size",
    "bincount": "np.histogram(x, bins=n, range=(0, n)) or (x[..., None] == np.arange(n)).sum(0) for n bins",
    "intersect1d": "np.isin(a, b), a mask of a's elements",
    "setdiff1d": "np.isin(a, b, invert=True), a mask of a's elements",
    "extract": "np.where(condition, x, 0), the selection as a mask at x's size",
    "compress": "np.where(condition, x, 0), the selection as a mask at x's size",
}


def from_data(t, name):
    """The traced t's value, which np.<name>'s result size depends on: taken from the data
    (a graph break), or an error naming the line where the trace cannot."""
    if t._tr.oracle is None:
        loc = user_loc()
        raise ConcreteValueError(
            f"np.{name} at {loc}: its result's size depends on the data, which spmd.jit takes from the data "
            f"with a graph break; here it cannot (spmd.jit(..., fallback=False), or inside a loop body). "
            f"Keep the shape fixed instead: {_INSTEAD.get(name, _INSTEAD['nonzero'])}.", loc)
    return np.asarray(t._concrete(f"the size of np.{name}'s result"))


def count_from_data(x, name="nonzero") -> int:
    """The number of nonzero elements of the traced x, taken from the data."""
    return int(from_data(count_nonzero(x), name))


def flatnonzero(a):
    """np.flatnonzero: np.nonzero of the flattened array (a selection, as there)."""
    return nonzero(shapes.reshape(core.asarray(a), (-1,)))[0]


def nonzero(a):
    """np.nonzero: per dim, the positions of the nonzero elements, each numpy's
    `position[x != 0]` for that dim's positions: a selection (masked.Masked), compacted
    (its length taken from the data) only by the uses that need that (returning it,
    indexing with it, ...); `np.nonzero(c)[0][-1]`, reductions and elementwise math take
    none."""
    x = core.asarray(a)
    if x.ndim == 0:
        raise ValueError(f"Calling nonzero on 0d arrays is not allowed (numpy raises the same ValueError; "
                         f"at {user_loc()}). Use np.atleast_1d(scalar).nonzero() instead")
    t = x._tr
    mask = x if x.dtype.kind == "b" else ew.not_equal(x, x.dtype.type(0))
    out = tuple(indexing.getitem(Tracer(t.emit(IOTA, shape=tuple(x.shape), dtype="int64", dimension=d), t), mask)
                for d in range(x.ndim))
    return (Positions(out[0].plan, out[0].vals, out[0].loc),) if x.ndim == 1 else out


def argwhere(a):
    """np.argwhere: the rows of positions P[mask] (P[..., d]: each element's position along
    dim d), a selection of rows as np.nonzero's are of elements, so `np.argwhere(c)[0]`
    (the first position where c holds) takes no length from the data."""
    x = core.asarray(a)
    if x.ndim == 0:
        x = shapes.reshape(x, (1,))
        # numpy: (1, 0) where the value is nonzero, (0, 0) where not
        return indexing.getitem(padded.argwhere(x, size=count_from_data(x)), (slice(None), slice(0, 0)))
    t = x._tr
    mask = x if x.dtype.kind == "b" else ew.not_equal(x, x.dtype.type(0))
    positions = shapes.stack([Tracer(t.emit(IOTA, shape=tuple(x.shape), dtype="int64", dimension=d), t)
                              for d in range(x.ndim)], axis=-1)
    return indexing.getitem(positions, mask)


def where(condition, x=None, y=None):
    """np.where: with one argument np.nonzero(condition); with three, elementwise."""
    if x is None and y is None:
        return nonzero(condition)
    if x is None or y is None:
        raise ValueError(f"either both or neither of x and y should be given (numpy raises the same "
                         f"ValueError; at {user_loc()})")
    return ew.where(condition, x, y)


def bincount(x, weights=None, minlength=0):
    """Counts (or summed weights) of each value 0..max(x), at least minlength of them.
    The length needs no value of the data when the trace bounds x (ir/ops/value_ranges.py: e.g.
    np.clip(k, 0, n - 1) with minlength=n); x[mask] (and weights w[mask] through the
    same mask) is counted where it is, the unselected elements weighing nothing (with
    weights, whether any is selected is taken from the data: numpy's result is int64
    zeros when none is)."""
    x, mask, weights = _selected(x, weights)
    if x.ndim != 1:
        raise ValueError(f"object too deep for desired array (np.bincount takes a 1-d array; at {user_loc()})")
    if x.dtype.kind not in "iub":
        raise TypeError(f"Cannot cast array data from {x.dtype!r} to dtype('int64') according to the rule 'safe' "
                        f"(numpy raises the same TypeError for np.bincount; at {user_loc()})")
    if minlength < 0:
        raise ValueError(f"'minlength' must not be negative (at {user_loc()})")
    x = core.astype(x, "int64")
    t = x._tr
    if weights is not None and (x.shape[0] == 0 or (mask is not None and not bool(
            from_data(red.any(mask), "bincount")))):
        weights = None          # numpy counts no elements as int64 zeros, weights or not
    lo, hi = int_range(x.value, t.ranges)
    exact = extremes(x.value, t.ranges) if mask is None else None
    if x.shape[0] == 0:
        lo, hi = 0, -1
    elif exact is not None:
        lo, hi = exact
    elif lo is None or lo < 0 or hi is None or hi + 1 > minlength:
        # the length from the data: the selected elements' least and greatest (-1 if none)
        big = np.int64(np.iinfo(np.int64).max)
        least = x if mask is None else ew.where(mask, x, big)
        most = x if mask is None else ew.where(mask, x, np.int64(-1))
        lo, hi = (int(v) for v in from_data(shapes.stack([red.min(least), red.max(most)]), "bincount"))
        lo = min(lo, 0) if hi < 0 else lo
    if lo < 0:
        raise ValueError(f"'list' argument must have no negative elements (numpy raises the same ValueError "
                         f"for np.bincount; at {user_loc()})")
    n = max(hi + 1, minlength)
    if weights is None:
        w, dtype = core.asarray(np.ones(x.shape, np.int64), t=t), np.int64
    else:
        w = core.asarray(weights, t=t)
        if w.shape != x.shape:
            raise ValueError(f"The weights and list don't have the same length (at {user_loc()})")
        dtype = np.complex128 if w.dtype.kind == "c" else np.float64
        w = core.astype(w, dtype)
    if mask is not None:
        w = ew.where(mask, w, dtype(0))
    out = fz.new_array(core.asarray(np.zeros(n, dtype), t=t))
    indexing.scatter_add(out, x, w)
    return out


def _selected(x, weights):
    """np.bincount's x and weights as traced arrays, and the mask (flattened) where x is
    numpy's x[mask] selecting whole elements (a 1-d selection; weights None or selected
    through the same mask); a selection otherwise is compacted (its length from the data)."""
    if isinstance(x, Masked) and tuple(x.plan.sel) == (None,):
        plan = x.plan
        whole = tuple(plan.mask.shape) == tuple(x.vals.shape)
        same = weights is None or (isinstance(weights, Masked) and x.aligned(weights))
        if whole and same:
            flat = lambda a: shapes.reshape(a, (-1,))        # noqa: E731
            return flat(x.vals), flat(plan.mask), (None if weights is None else flat(weights.vals))
    if isinstance(x, Masked):
        x = x.compact("np.bincount")
    if isinstance(weights, Masked):
        weights = weights.compact("np.bincount's weights")
    return core.asarray(x), None, weights


def unique(ar, return_index=False, return_inverse=False, return_counts=False, axis=None, *,
           equal_nan=True, sorted=True):
    """np.unique of the flattened array (axis=None): the sorted distinct values, and
    where asked the first index of each, the inverse (input-shaped) and the counts."""
    if axis is not None:
        raise NotImplementedError(f"np.unique with axis={axis!r} under spmd.jit (at {user_loc()}); "
                                  f"np.unique of the flattened array is supported")
    x = core.asarray(ar)
    flat = shapes.reshape(x, (-1,))
    m = flat.shape[0]
    order = argsort(flat, kind="stable")
    s = indexing.getitem(flat, order)
    if m == 0:
        new = core.asarray(np.zeros(0, bool), t=x._tr)
    else:
        differs = ew.not_equal(indexing.getitem(s, slice(1, None)), indexing.getitem(s, slice(None, -1)))
        if equal_nan and s.dtype.kind in "fc":
            both_nan = ew.logical_and(MF.isnan(indexing.getitem(s, slice(1, None))),
                                      MF.isnan(indexing.getitem(s, slice(None, -1))))
            differs = ew.logical_and(differs, ew.logical_not(both_nan))
        first = core.asarray(np.ones(1, bool), t=x._tr)
        new = shapes.concatenate([first, differs], 0)
    n = count_from_data(new, "unique")
    starts = padded.flatnonzero(new, size=n)
    out = [indexing.getitem(s, starts)]
    if return_index:
        out.append(indexing.getitem(order, starts))
    if return_inverse:
        group = ew.subtract(red.cumsum(core.astype(new, "int64")), np.int64(1))
        inv = fz.new_array(core.asarray(np.zeros(m, np.int64), t=x._tr))
        indexing.setitem(inv, order, group)
        known(inv, 0, n - 1, attained=True)          # every group has an element
        out.append(shapes.reshape(inv, x.shape) if x.ndim else inv)
    if return_counts:
        ends = shapes.concatenate([indexing.getitem(starts, slice(1, None)),
                                   core.asarray(np.array([m], np.int64), t=x._tr)], 0)
        out.append(ew.subtract(ends, starts))
    return out[0] if len(out) == 1 else tuple(out)


__all__ = ["from_data", "count_from_data", "flatnonzero", "nonzero", "argwhere", "where", "bincount", "unique"]
