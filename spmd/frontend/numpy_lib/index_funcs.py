"""numpy's index arithmetic and selection functions with static result shapes, on Tracers:
np.unravel_index, np.ravel_multi_index, np.lexsort, np.choose, np.delete, np.resize,
np.piecewise, np.apply_along_axis and sliding_window_view, composed from traced ops
(elementwise index math, stable argsorts, selects, static gathers and slices).

Traced indices cannot raise numpy's IndexError / ValueError for out-of-range values: as in
np.take, mode="raise" then behaves as "clip" where numpy offers a mode, and elsewhere
(unravel_index, ravel_multi_index's "raise") the arithmetic runs unchecked."""
from __future__ import annotations

import builtins
import operator

import numpy as np

from ...errors import user_loc
from .. import core, indexing, shapes
from .. import elementwise as ew
from ..trace import Tracer
from .stats import argsort


def unravel_index(indices, shape, order="C"):
    """np.unravel_index: the coordinates of flat indices into an array of `shape`."""
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(int(s) for s in shape)
    if order not in ("C", "F"):
        raise ValueError(f"only 'C' or 'F' order is permitted (np.unravel_index at {user_loc()})")
    idx = core.asarray(indices)
    if idx.dtype.kind not in "iu":
        raise TypeError(f"only int indices permitted (numpy raises the same TypeError; np.unravel_index at "
                        f"{user_loc()})")
    idx = core.astype(idx, "int64")
    dims = list(shape) if order == "C" else list(shape)[::-1]
    if not dims:
        return ()
    out = []
    rest = idx
    for d in reversed(dims[1:]):
        out.append(ew.mod(rest, np.int64(d)))
        rest = ew.floor_divide(rest, np.int64(d))
    out.append(rest)
    out = out[::-1]
    return tuple(out if order == "C" else out[::-1])


def ravel_multi_index(multi_index, dims, mode="raise", order="C"):
    """np.ravel_multi_index: flat indices of coordinate arrays into an array of `dims`;
    mode per dim: "wrap" (modulo), "clip", "raise" (unchecked when traced)."""
    dims = (dims,) if isinstance(dims, (int, np.integer)) else tuple(int(s) for s in dims)
    coords = list(multi_index)
    if len(coords) != len(dims):
        raise ValueError(f"parameter multi_index must be a sequence of length {len(dims)} "
                         f"(np.ravel_multi_index at {user_loc()})")
    modes = (mode,) * len(dims) if isinstance(mode, str) else tuple(mode)
    if order not in ("C", "F"):
        raise ValueError(f"only 'C' or 'F' order is permitted (np.ravel_multi_index at {user_loc()})")
    t = core.trace_of(*coords)
    cs = [core.asarray(c, t=t) for c in coords]
    for c in cs:
        if c.dtype.kind not in "iu":
            raise TypeError(f"only int indices permitted (np.ravel_multi_index at {user_loc()})")
    shape = np.broadcast_shapes(*[c.shape for c in cs])
    cs = [core.broadcast_to(core.astype(c, "int64"), shape) for c in cs]
    fixed = []
    for c, d, m in zip(cs, dims, modes):
        if m == "wrap":
            c = ew.mod(c, np.int64(d))
        elif m == "clip":
            c = ew.clip(c, np.int64(0), np.int64(builtins.max(d - 1, 0)))
        elif m != "raise":
            raise ValueError(f"clipmode must be one of 'clip', 'raise', or 'wrap' (np.ravel_multi_index at "
                             f"{user_loc()})")
        fixed.append(c)
    order_dims = range(len(dims)) if order == "C" else range(len(dims) - 1, -1, -1)
    r = None
    for k in order_dims:
        r = fixed[k] if r is None else ew.add(ew.multiply(r, np.int64(dims[k])), fixed[k])
    return r


def lexsort(keys, axis=-1):
    """np.lexsort: the stable order sorting by the last key, ties by the one before, ..."""
    if isinstance(keys, Tracer):
        ks = [indexing.getitem(keys, i) for i in range(keys.shape[0])]     # a 1-d array: 0-d keys
    else:
        ks = list(keys)
    if not ks:
        raise TypeError(f"need sequence of keys with len > 0 in lexsort (np.lexsort at {user_loc()})")
    t = core.trace_of(*ks)
    ks = [core.asarray(k, t=t) for k in ks]
    shape = ks[0].shape
    if any(k.shape != shape for k in ks):
        raise ValueError(f"all keys need to be the same shape (np.lexsort at {user_loc()})")
    if not shape:
        return core.asarray(np.int64(0), t=t)
    axis = core.normalize_axis(axis, len(shape), "lexsort")
    order = argsort(ks[0], axis=axis)
    for k in ks[1:]:
        order = indexing.take_along_axis(order, argsort(indexing.take_along_axis(k, order, axis), axis=axis), axis)
    return order


def _indices_from(which):
    def f(arr, k=0):
        """np.triu_indices_from / tril_indices_from: numpy's positions for arr's shape (the
        shape is all they read, known while tracing)."""
        if arr.ndim != 2:
            raise ValueError(f"input array must be 2-d (np.{which}_from at {user_loc()})")
        return getattr(np, which)(arr.shape[-2], k=k, m=arr.shape[-1])
    f.__name__ = f"{which}_from"
    return f


triu_indices_from = _indices_from("triu_indices")
tril_indices_from = _indices_from("tril_indices")


def choose(a, choices, out=None, mode="raise"):
    """np.choose: choices[a] elementwise, all broadcast together. mode="raise" with a
    traced a out of range raises numpy's ValueError after the run (core.error_at_run)."""
    if isinstance(choices, Tracer):
        cs = [indexing.getitem(choices, i) for i in range(choices.shape[0])]
    else:
        cs = list(choices)
    if not cs:
        raise ValueError(f"0-length sequence (np.choose at {user_loc()})")
    t = core.trace_of(a, *cs)
    idx = core.asarray(a, t=t)
    if idx.dtype.kind not in "biu":
        raise TypeError(f"Cannot cast array data from {idx.dtype} to int64 according to the rule 'safe' "
                        f"(np.choose at {user_loc()})")
    dt = core.result_dtype(*cs)
    cs = [core.asarray(c, dt, t) for c in cs]
    n = len(cs)
    idx = core.astype(idx, "int64")
    if mode == "wrap":
        idx = ew.mod(idx, np.int64(n))
    elif mode in ("clip", "raise"):
        if mode == "raise":
            # numpy's ValueError, after the run where the choices are of the data
            ew.error_if_outside(idx, 0, n, ValueError, "invalid entry in choice array")
        idx = ew.clip(idx, np.int64(0), np.int64(n - 1))
    else:
        raise ValueError(f"clipmode must be one of 'clip', 'raise', or 'wrap' (np.choose at {user_loc()})")
    shape = np.broadcast_shapes(idx.shape, *[c.shape for c in cs])
    r = core.broadcast_to(cs[0], shape)
    for i, c in enumerate(cs[1:], 1):
        r = ew.where(ew.equal(idx, np.int64(i)), c, r)
    return core.broadcast_to(r, shape)


def delete(arr, obj, axis=None):
    """np.delete at positions known when tracing: numpy's own np.delete on the positions
    says which are kept (its rules and errors), one static gather takes them."""
    if isinstance(obj, Tracer):
        raise NotImplementedError(f"np.delete at traced positions (at {user_loc()}): the positions must be known "
                                  f"when tracing")
    x = core.asarray(arr)
    if axis is None:
        x, axis = shapes.reshape(x, (-1,)), 0
    axis = core.normalize_axis(axis, x.ndim, "delete")
    kept = np.delete(np.arange(x.shape[axis]), obj)
    if kept.size == x.shape[axis]:
        return shapes.copy(x)
    return shapes.take(x, kept.astype(np.int64), axis=axis)


def resize(a, new_shape):
    """np.resize: a's elements repeated in order to fill new_shape (zeros when a is empty)."""
    shape = (new_shape,) if isinstance(new_shape, (int, np.integer)) else tuple(new_shape)
    shape = tuple(operator.index(s) for s in shape)
    if any(s < 0 for s in shape):
        raise ValueError(f"all elements of `new_shape` must be non-negative (np.resize at {user_loc()})")
    x = shapes.reshape(core.asarray(a), (-1,))
    size = int(np.prod(shape, dtype=np.int64))
    if x.shape[0] == 0 or size == 0:
        return core.asarray(np.zeros(shape, x.dtype), t=x._tr)
    reps = -(-size // x.shape[0])
    y = shapes.tile(x, reps) if reps > 1 else x
    return shapes.reshape(indexing.getitem(y, slice(0, size)), shape)


def piecewise(x, condlist, funclist, *args, **kw):
    """np.piecewise: each function (or constant) where its condition holds, the later ones
    over the earlier, 0 elsewhere (or the extra last function where none holds). numpy calls
    each function on its selected elements; here each is called on the whole array and its
    results are kept where selected, so a function must work elementwise (a function whose
    result is not x's shape, a reduction say, is refused)."""
    x = core.asarray(x)
    t = x._tr
    # numpy's reading of condlist: one condition unless its first element is an array
    if isinstance(condlist, Tracer):
        one = condlist.ndim == 0 or (condlist.ndim == 1 and x.ndim != 0)
        conds = [condlist] if one else [indexing.getitem(condlist, i) for i in range(condlist.shape[0])]
    elif np.isscalar(condlist) or (not isinstance(condlist[0], (list, np.ndarray, Tracer)) and x.ndim != 0):
        conds = [condlist]
    else:
        conds = list(condlist)
    conds = [_selection(core.astype(core.asarray(c, t=t), "bool"), x) for c in conds]
    n, n2 = len(conds), len(funclist)
    if n == n2 - 1:
        none = conds[0]
        for c in conds[1:]:
            none = ew.logical_or(none, c)
        conds.append(ew.logical_not(none))
    elif n != n2:
        raise ValueError(f"with {n} condition(s), either {n} or {n + 1} functions are expected "
                         f"(numpy raises the same ValueError; np.piecewise at {user_loc()})")
    y = core.zeros_like(x)
    for cond, func in zip(conds, funclist):
        if callable(func):
            v = func(x, *args, **kw)
            if isinstance(v, Tracer) and v.shape != x.shape:
                raise NotImplementedError(
                    f"np.piecewise at {user_loc()}: a function gave shape {list(v.shape)} on the whole array "
                    f"of shape {list(x.shape)}; under spmd.jit each function is applied to the whole array and "
                    f"kept where its condition holds, so it must work elementwise")
        else:
            v = func
        y = ew.where(cond, core.astype(core.asarray(v, t=t), x.dtype.name), y)
    return y


def _selection(cond, x):
    """A condition as numpy's y[cond] reads it: a mask of x's leading dims (a 0-d one: all)."""
    if cond.shape != x.shape[:cond.ndim]:
        raise IndexError(f"boolean index did not match indexed array: condition of shape {list(cond.shape)} for "
                         f"an array of shape {list(x.shape)} (numpy raises the same IndexError; np.piecewise at "
                         f"{user_loc()})")
    cond = shapes.reshape(cond, cond.shape + (1,) * (x.ndim - cond.ndim))
    return core.broadcast_to(cond, x.shape)


MAX_APPLY_CALLS = 128


def apply_along_axis(func1d, axis, arr, *args, **kwargs):
    """np.apply_along_axis: func1d traced once per 1-d slice along axis (at most
    MAX_APPLY_CALLS slices), the results stacked where axis was."""
    x = core.asarray(arr)
    axis = core.normalize_axis(axis, x.ndim, "apply_along_axis")
    xm = shapes.moveaxis(x, axis, -1)
    outer = xm.shape[:-1]
    if 0 in outer:
        raise ValueError(f"Cannot apply_along_axis when any iteration dimensions are 0 (numpy raises the same "
                         f"ValueError; at {user_loc()})")
    calls = int(np.prod(outer, dtype=np.int64))
    if calls > MAX_APPLY_CALLS:
        raise NotImplementedError(
            f"np.apply_along_axis at {user_loc()}: {calls} slices of shape {list(x.shape)} along axis {axis}; "
            f"spmd.jit traces the function once per slice and does so for at most {MAX_APPLY_CALLS}. Write the "
            f"function on the whole array with axis={axis} instead")
    res = []
    for ind in np.ndindex(*outer):
        res.append(core.asarray(func1d(indexing.getitem(xm, ind), *args, **kwargs), t=x._tr))
    first = res[0]
    if any(r.shape != first.shape for r in res):
        raise ValueError(f"np.apply_along_axis at {user_loc()}: the function's results differ in shape")
    res = [core.astype(r, first.dtype.name) for r in res]
    buff = shapes.reshape(shapes.stack(res, 0), outer + first.shape)
    # numpy puts the result's dims where axis was
    nd_out = len(outer)
    perm = list(range(axis)) + list(range(nd_out, nd_out + first.ndim)) + list(range(axis, nd_out))
    return shapes.transpose(buff, perm)


MAX_SLICED_WINDOW = 32


def sliding_window_view(x, window_shape, axis=None, *, subok=False, writeable=False):
    """numpy's sliding_window_view: every window of window_shape along the given axes, the
    window dims appended. Each window dim is the stack of its shifted slices (slices of a
    split dim exchange halos), or, for wide windows, one static gather."""
    if writeable:
        raise NotImplementedError(f"sliding_window_view(writeable=True) under spmd.jit (at {user_loc()}): its "
                                  f"windows overlap in memory, which traced arrays do not")
    y = core.asarray(x)
    window = (window_shape,) if isinstance(window_shape, (int, np.integer)) else tuple(window_shape)
    window = tuple(operator.index(w) for w in window)
    if any(w < 0 for w in window):
        raise ValueError(f"`window_shape` cannot contain negative values (at {user_loc()})")
    if axis is None:
        if len(window) != y.ndim:
            raise ValueError(f"Since axis is `None`, must provide window_shape for all dimensions of `x`; got "
                             f"{len(window)} window_shape elements and `x.ndim` is {y.ndim} (at {user_loc()})")
        axes = tuple(range(y.ndim))
    else:
        axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
        axes = tuple(core.normalize_axis(a, y.ndim, "sliding_window_view") for a in axes)
        if len(window) != len(axes):
            raise ValueError(f"Must provide matching length window_shape and axis; got {len(window)} "
                             f"window_shape elements and {len(axes)} axes elements (at {user_loc()})")
    trimmed = list(y.shape)
    for ax, w in zip(axes, window):
        if trimmed[ax] < w:
            raise ValueError(f"window shape cannot be larger than input array shape (at {user_loc()})")
        trimmed[ax] -= w - 1
    for ax, w in zip(axes, window):
        n = y.shape[ax] - w + 1
        if w <= MAX_SLICED_WINDOW:
            lead = (slice(None),) * ax
            parts = [shapes.expand_dims(indexing.getitem(y, lead + (slice(j, j + n),)), -1) for j in range(w)]
            y = shapes.concatenate(parts, -1) if parts else core.asarray(
                np.zeros(y.shape[:ax] + (n,) + y.shape[ax + 1:] + (0,), y.dtype), t=y._tr)
        else:
            idx = (np.arange(n)[:, None] + np.arange(w)[None, :]).astype(np.int64)
            y = shapes.moveaxis(shapes.take(y, idx, axis=ax), ax + 1, -1)
    return y


__all__ = ["unravel_index", "ravel_multi_index", "lexsort", "choose", "delete", "resize", "piecewise",
           "apply_along_axis", "sliding_window_view"]
