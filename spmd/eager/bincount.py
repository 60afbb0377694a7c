"""np.bincount of an spmd.Array without gathering it: the result's length (max(x) + 1, at
least minlength) is read from the mesh by two replicated reductions (a few bytes), and the
counting runs sharded at that length as one program, as under jit where the trace bounds
x (np.clip(x, 0, n - 1) with minlength=n)."""
from __future__ import annotations

import numpy as np

from ..frontend import elementwise as ew
from ..frontend.numpy_lib import data_sized
from ..runtime.array import Array
from .programs import run


def bincount(x, weights=None, minlength=0):
    """numpy's np.bincount(x, weights, minlength) for an spmd.Array x; None where numpy's
    own checks or casts decide (not 1-d, empty, not a signed or 32-bit unsigned integer
    array, a minlength that is not an int)."""
    if not isinstance(x, Array) or x.ndim != 1 or x.size == 0 or x.dtype.kind not in "iu" \
            or (x.dtype.kind == "u" and x.dtype.itemsize > 4) or not isinstance(minlength, (int, np.integer)) \
            or minlength < 0:
        return None
    if int(np.min(x)) < 0:
        raise ValueError("'list' argument must have no negative elements (numpy raises the same ValueError)")
    n = max(int(np.max(x)) + 1, int(minlength))
    return run("function", "bincount", _counted, (x, weights), {"length": n},
               fallback=lambda why: None)


def _counted(x, weights, length):
    return data_sized.bincount(ew.clip(x, 0, length - 1), weights, minlength=length)
