"""Indexing on spmd.Arrays outside of jit, reads and writes, through the traced indexing
(frontend/indexing.py) as one-op programs (programs.py).

An integer index is a program input, bounds-checked here as numpy does, so a per-sample
loop `for i in range(n): x[i] ...` compiles once; slices, None and ... are static. Basic
indexing gives a view (views.py), so `row = x[1]; row[2] = 0` writes x as numpy does.
`x[mask]` with a boolean mask of x's shape selects on each device (mask_select.py); a write
`x[key] = v` runs the traced write on x's root (programs.write).
"""
from __future__ import annotations

import numpy as np

from ..errors import TraceError
from ..frontend import indexing
from ..frontend.trace import Tracer, current_trace
from ..runtime.array import Array
from . import mask_select
from .programs import Dynamic, in_numpy, int_range, is_dynamic_scalar, numpy_setitem, run, write


def getitem(x, key):
    if _is_mask(key):
        if key.shape == x.shape[:key.ndim] and key.ndim:
            # local selections, counts all-gathered; x split along other dims is moved to rows first
            return mask_select.select(x if mask_select.supported(x) else mask_select.by_rows(x), key)
        return in_numpy("operator", "getitem", (x, key), {}, "boolean mask indexing with a mask of x's "
                        "trailing dims")
    ks = key if isinstance(key, tuple) else (key,)
    if ks and _is_mask(ks[0]) and _is_basic(ks[1:]) and mask_select.supported(x):
        # x[mask, rest...] is x[:, ..., rest...][mask]: the rest selects a view, the mask its leading dims
        return getitem(getitem(x, (slice(None),) * ks[0].ndim + tuple(ks[1:])), ks[0])
    return run("operator", "getitem", _getitem, (x,) + program_key(x, key),
               fallback=lambda why: in_numpy("operator", "getitem", (x, key), {}, why))


def _getitem(x, *key):
    return indexing.getitem(x, key)


def setitem(x, key, value):
    """x[key] = value, numpy's way: the write reaches x's root and every view of it. With
    a boolean mask in the key, the value may give one entry per selected element (the
    mask's count is read first and checked, as numpy checks it)."""
    if isinstance(value, Tracer) or current_trace() is not None:
        raise TraceError("writing a traced value into an spmd.Array outside of its jit function")
    if getattr(x, "numpy_scalar", False):
        raise TypeError(f"'numpy.{x.dtype.name}' object does not support item assignment (numpy raises the same "
                        f"TypeError: this 0-d spmd.Array stands for numpy's scalar result)")
    ks = key if isinstance(key, tuple) else (key,)
    masks = [k for k in ks if _is_mask(k) and isinstance(k, Array)]
    if len(masks) == 1 and np.ndim(value) > 0:
        count = int(np.count_nonzero(masks[0]))
        write(x, indexing.set_compacted, (ks, value, count), numpy_setitem_compacted, "x[...] = v")
        return
    key = program_key(x, key) if not _is_mask(key) else (key,)
    value = Dynamic(value) if is_dynamic_scalar(value, int_range([x.dtype])) else value
    write(x, indexing.setitem, (key, value), numpy_setitem, "x[...] = v")


def numpy_setitem_compacted(g, key, value, count):
    g[key] = value


def _is_mask(key):
    return isinstance(key, (Array, np.ndarray)) and key.dtype == np.bool_


def _is_basic(ks):
    """Is the key numpy basic indexing (a view)? ints, slices, None, ..."""
    return all(k is None or k is Ellipsis or isinstance(k, slice) or
               (isinstance(k, (int, np.integer)) and not isinstance(k, (bool, np.bool_))) for k in ks)


def program_key(x, key) -> tuple:
    """The key as a tuple, with each integer of a basic key a 0-d int64 ndarray (a
    program input), bounds-checked as numpy does."""
    ks = key if isinstance(key, tuple) else (key,)
    if not _is_basic(ks):
        _check_index_arrays(x, ks)
        return ks
    out, d = [], 0          # d: the dim of x the next entry indexes
    n_real = sum(1 for k in ks if k is not None and k is not Ellipsis)
    for k in ks:
        if k is Ellipsis:
            d += x.ndim - n_real
        elif k is not None:
            if isinstance(k, (int, np.integer)) and d < x.ndim:
                size = x.shape[d]
                if not -size <= int(k) < size:
                    raise IndexError(f"index {int(k)} is out of bounds for axis {d} with size {size}")
                k = np.asarray(np.int64(int(k) % size))
            d += 1
        out.append(k)
    return tuple(out)


def _check_index_arrays(x, ks):
    """Integer index arrays in a key are program inputs, and a traced index cannot raise:
    check them against their dims here, as numpy does."""
    n_real = sum(np.ndim(k) if _is_mask(k) else 1 for k in ks if k is not None and k is not Ellipsis)
    d = 0
    for k in ks:
        if k is Ellipsis:
            d += x.ndim - n_real
        elif _is_mask(k):
            d += k.ndim
        elif k is not None:
            if isinstance(k, (Array, np.ndarray)) and k.dtype.kind in "iu" and k.size and d < x.ndim:
                lo, hi, n = int(np.min(k)), int(np.max(k)), x.shape[d]
                if lo < -n or hi >= n:
                    raise IndexError(f"index {lo if lo < -n else hi} is out of bounds for axis {d} with size {n}")
            d += 1
