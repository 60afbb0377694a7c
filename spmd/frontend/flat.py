"""x.flat of a traced array, of a numpy array the function made (a NumpyBuffer) and of an
spmd.Array: numpy's flat iterator, as far as programs index it.

numpy's flat iterator walks the array in C order whatever its memory layout, so reading
`x.flat[k]` is `x.reshape(-1)[k]` (a traced value never depends on layout), and writing
`x.flat[k] = v` writes x at the C-order positions k names: their multi-indices
(np.unravel_index) index x itself, so the write lands in x and in every view of it.
numpy repeats or cuts the values to the number of positions written (np.resize).
"""
from __future__ import annotations

import numpy as np

from ..errors import user_loc
from .trace import Tracer, resolve


class Flat:
    """What `x.flat` gives: x is a Tracer, a NumpyBuffer or an spmd.Array (eager), all of
    which index, reshape and take writes as numpy does."""

    def __init__(self, base):
        self.base = base

    def __len__(self):
        return self.base.size

    def __iter__(self):
        return iter(self.base.reshape(-1))

    def __array__(self, dtype=None, copy=None):
        return np.asarray(self.base.reshape(-1), dtype=dtype)

    def copy(self):
        return self.base.reshape(-1).copy()

    def __getitem__(self, key):
        # numpy's x.flat[k] is a copy, never a view of x
        return self.base.reshape(-1)[_flat_key(self.base, key)].copy()

    def __setitem__(self, key, value):
        x = self.base
        key = _flat_key(x, key)
        if not _static(key):             # a Tracer, or an spmd.Array of indices
            if key.dtype == np.bool_:
                if np.ndim(value):
                    raise NotImplementedError(
                        f"x.flat[mask] = values with a traced mask at {user_loc()}: numpy repeats the "
                        f"values over however many positions the mask selects, a number known only "
                        f"from the data; write a scalar, or use np.where(mask.reshape(x.shape), v, x)")
                x[key.reshape(x.shape)] = value
                return
            positions = key
        else:
            positions = np.arange(x.size)[key]
        count = int(np.prod(np.shape(positions)))
        if np.ndim(value) and np.size(value) != count:
            value = np.resize(value, (count,))
        if np.ndim(value):
            value = np.reshape(value, np.shape(positions))
        x[np.unravel_index(positions, x.shape)] = value


def _static(key) -> bool:
    return key is Ellipsis or isinstance(key, (bool, int, np.integer, slice)) or type(key) is np.ndarray


def _flat_key(x, key):
    """numpy's flat index: one index (int, slice, integer array, 1-D boolean mask)."""
    if isinstance(key, tuple) and len(key) == 1:
        key = key[0]
    if isinstance(key, list):
        key = np.asarray(key) if all(_static(k) for k in key) else np.stack(key)
    if isinstance(key, np.ndarray) and type(key) is not np.ndarray:
        key = np.ndarray.view(key, np.ndarray) if not isinstance(resolve(key), Tracer) else resolve(key)
    if isinstance(key, tuple) or np.ndim(key) > 1 and getattr(key, "dtype", None) == np.bool_:
        raise IndexError(f"too many indices for flat iterator: flat iterator is 1-dimensional "
                         f"(at {user_loc()})")
    return key
