"""np.convolve and np.correlate under jit: numpy's discrete linear convolution of two
1-d arrays, as one gather of the zero-padded longer array (each output's window, a
constant index table) and one product with the reversed shorter one; a correlation is
the convolution with the second array reversed and conjugated, in every mode and either
order of lengths."""
from __future__ import annotations

import numpy as np

from ...errors import user_loc
from .. import contractions, core, elementwise, indexing, shapes

MODES = {"full": "full", "same": "same", "valid": "valid", 2: "full", 1: "same", 0: "valid",
         "f": "full", "s": "same", "v": "valid"}


def convolve(a, v, mode="full"):
    t = core.trace_of(a, v)
    x, w = core.asarray(a, t=t), core.asarray(v, t=t)
    if x.ndim > 1 or w.ndim > 1:
        raise ValueError(f"object too deep for desired array: np.convolve takes 1-d arrays, got "
                         f"{list(x.shape)} and {list(w.shape)} (at {user_loc()})")
    x, w = shapes.reshape(x, (-1,)), shapes.reshape(w, (-1,))
    if mode not in MODES:
        raise ValueError(f"mode must be one of 'valid', 'same', or 'full' (got {mode!r}) (at {user_loc()})")
    mode = MODES[mode]
    if w.shape[0] > x.shape[0]:           # numpy convolves the longer with the shorter
        x, w = w, x
    n, m = x.shape[0], w.shape[0]
    if n == 0 or m == 0:
        raise ValueError(f"{'a' if n == 0 else 'v'} cannot be empty (at {user_loc()})")
    dt = core.result_dtype(x, w)
    x, w = core.astype(x, dt), core.astype(w, dt)
    # full[k] = sum_j x[k - j] w[j] = sum_i xp[k + i] w[m - 1 - i], xp: x with m - 1 zeros each side
    xp = shapes.concatenate([core.zeros_like(x, shape=(m - 1,)), x, core.zeros_like(x, shape=(m - 1,))], 0) \
        if m > 1 else x
    first = {"full": 0, "same": (m - 1) - m // 2, "valid": m - 1}[mode]
    count = {"full": n + m - 1, "same": n, "valid": n - m + 1}[mode]
    windows = indexing.getitem(xp, np.arange(first, first + count)[:, None] + np.arange(m)[None, :])
    return contractions.matmul(windows, indexing.getitem(w, slice(None, None, -1)))


def correlate(a, v, mode="valid"):
    t = core.trace_of(a, v)
    w = core.asarray(v, t=t)
    if w.ndim > 1:
        raise ValueError(f"object too deep for desired array: np.correlate takes 1-d arrays, got "
                         f"{list(w.shape)} for v (at {user_loc()})")
    return convolve(a, elementwise.conjugate(indexing.getitem(shapes.reshape(w, (-1,)), slice(None, None, -1))), mode)
