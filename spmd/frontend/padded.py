"""numpy's positions of nonzero elements, padded to a length given in advance:
`spmd.numpy.nonzero(a, size=n)`, `flatnonzero`, `argwhere`.

numpy's np.nonzero has as many positions as the data has nonzero elements, which a
compiled program cannot have. These take `size`: the first `size` positions in numpy's
order, then `fill_value` where there are fewer (JAX's jnp.nonzero(..., size=) contract).
While tracing, the positions come from a running count of the nonzero elements and one
scatter into `size` slots (plus a slot for the ones past `size`); outside of tracing they
are numpy's own, cut or padded.
"""
from __future__ import annotations

import numpy as np

from ..ir.ops.names import IOTA, SCATTER, SLICE
from . import core, shapes
from . import elementwise as ew
from . import reductions as red
from .trace import Tracer, current_trace


def flatnonzero(a, *, size, fill_value=0):
    """The flat indices of a's first `size` nonzero elements, fill_value after the last."""
    size = int(size)
    if current_trace() is None and not isinstance(a, Tracer):
        idx = np.flatnonzero(a)[:size]
        return np.concatenate([idx, np.full(size - idx.size, fill_value, idx.dtype)])
    x = core.asarray(a)
    t = x._tr
    nz = shapes.reshape(ew.not_equal(x, False if x.dtype == np.bool_ else 0), (-1,))
    n = nz.shape[0]
    if n == 0 or size == 0:
        return core.asarray(np.full(size, fill_value, np.int64), t=t)
    slot = ew.subtract(red.cumsum(core.astype(nz, "int64")), np.int64(1))
    slot = ew.where(ew.logical_and(nz, ew.less(slot, np.int64(size))), slot, np.int64(size))
    position = core.emit(t, IOTA, shape=(n,), dtype="int64", dimension=0)
    # each of the first `size` slots receives exactly one position; the rest go to slot `size`
    got = core.emit(t, SCATTER, core.asarray(np.zeros(size + 1, np.int64), t=t), slot, position, axis=0)
    got = shapes.reshape(core.emit(t, SLICE, got, start=(0,), limit=(size,), stride=(1,)), (size,))
    filled = ew.less(core.emit(t, IOTA, shape=(size,), dtype="int64", dimension=0),
                     red.sum(core.astype(nz, "int64")))
    return ew.where(filled, got, np.int64(fill_value))


def nonzero(a, *, size, fill_value=0):
    """np.nonzero's tuple of index arrays (one per dim), each of length `size`."""
    shape = np.shape(a) if not isinstance(a, Tracer) else a.shape
    flat = flatnonzero(a, size=size, fill_value=-1)
    out = []
    for d in range(len(shape)):
        stride = int(np.prod(shape[d + 1:], dtype=np.int64))
        if isinstance(flat, Tracer):
            i = ew.mod(ew.floor_divide(flat, np.int64(stride)), np.int64(shape[d]))
            out.append(ew.where(ew.less(flat, np.int64(0)), np.int64(fill_value), i))
        else:
            out.append(np.where(flat < 0, fill_value, (flat // stride) % shape[d]))
    return tuple(out)


def argwhere(a, *, size, fill_value=0):
    """np.argwhere's (size, ndim) positions."""
    idx = nonzero(a, size=size, fill_value=fill_value)
    if not idx or not isinstance(idx[0], Tracer):
        return np.stack(idx, axis=-1) if idx else np.zeros((size, 0), np.int64)
    return shapes.stack(idx, axis=-1)


__all__ = ["nonzero", "flatnonzero", "argwhere"]
