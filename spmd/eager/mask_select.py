"""Eager numpy with data-dependent shapes on spmd.Arrays: `x[mask]`, `np.nonzero`,
`np.argwhere`, `np.flatnonzero`, `np.count_nonzero`, without gathering the input.

Each device selects from its own block (a gather-free local step), the devices of the
split axes all-gather their counts (one small collective), and an all_to_all moves each
device's selection to the block of the 1-d result it belongs to (the result is split
like the input's leading dim; shards are padded to the same size as always). Supported
where the input is split along dim 0 only (or replicated) and the mask covers its leading
dims -- then the devices' blocks, in their order along the split axes, are numpy's
row-major order; anything else falls back to numpy (programs.py warns).
"""
from __future__ import annotations

import numpy as np

from ..frontend import core
from ..ir.mesh import Sharding
from ..runtime.array import Array, device_put
from .programs import run


def supported(x: Array) -> bool:
    spec = x.sharding.spec
    return x.ndim >= 1 and all(e is None for e in spec[1:])


class _Select:
    """The per-device program: inputs [x] or [x, mask] (padded local blocks); outputs the
    device's block of the result and the result's length."""
    num_outputs = 2

    def __init__(self, shape, sharding: Sharding, mode, mask_ndim=0):
        self.shape, self.sharding, self.mode, self.k = tuple(shape), sharding, mode, mask_ndim
        self.axes = sharding.dim_axes(0) if sharding.spec else ()

    def __call__(self, inputs, comm):
        d = comm.rank
        box = self.sharding.shard_box(self.shape, d)
        sl = tuple(slice(0, b - a) for a, b in box)
        x = np.asarray(inputs[0])[sl]
        if self.mode == "mask":
            vals = x[np.asarray(inputs[1])[sl[:self.k]]]
        else:
            idx = np.nonzero(x)
            vals = np.stack(idx, axis=-1).astype(np.int64) if idx else np.zeros((0, 0), np.int64)
            if vals.size or vals.shape[0]:
                vals[:, 0] += box[0][0]
        cnt = vals.shape[0]
        if not self.axes:
            return [np.ascontiguousarray(vals), np.array([cnt], np.int64)]
        k = len(comm.group(self.axes))
        j = comm.group_index(self.axes)
        counts = np.asarray(comm.all_gather(np.array([cnt], np.int64), self.axes, 0)).reshape(-1)
        n = int(counts.sum())
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        c = -(-n // k)
        rest = vals.shape[1:]
        buf = np.zeros((k, c) + rest, vals.dtype)
        s0 = int(starts[j])
        for t in range(k):
            lo, hi = max(s0, t * c), min(s0 + cnt, (t + 1) * c)
            if hi > lo:
                buf[t, lo - t * c:hi - t * c] = vals[lo - s0:hi - s0]
        recv = np.asarray(comm.all_to_all(buf, self.axes, 0, 0)).reshape((k, c) + rest)
        out = np.zeros((c,) + rest, vals.dtype)
        for s in range(k):
            lo, hi = max(int(starts[s]), j * c), min(int(starts[s] + counts[s]), (j + 1) * c)
            if hi > lo:
                out[lo - j * c:hi - j * c] = recv[s, lo - j * c:hi - j * c]
        return [out, np.array([n], np.int64)]


def select(x: Array, mask=None) -> Array:
    """x[mask] (mode "mask", mask of x's leading dims) or np.argwhere(x) (mask None), split
    like x's leading dim."""
    rt = x._runtime
    mesh = x.sharding.mesh
    k = np.ndim(mask) if mask is not None else 0
    laid = Sharding(mesh, x.sharding.spec[:k])          # the mask split as x's leading dims
    if mask is not None and (not isinstance(mask, Array) or mask.sharding != laid):
        mask = device_put(np.asarray(mask), laid) if not isinstance(mask, Array) else _reshard(mask, laid)
    prog = _Select(x.shape, x.sharding, "mask" if mask is not None else "nonzero", k)
    devices = rt.local_devices(mesh)
    args = {d: [x._handles[d]] + ([mask._handles[d]] if mask is not None else []) for d in devices}
    outs = rt.run(prog, mesh, args)
    n = int(rt.get({devices[0]: outs[devices[0]][1]})[devices[0]][0])
    axes = prog.axes
    entry = None if not axes else (axes[0] if len(axes) == 1 else tuple(axes))
    if mask is not None:
        shape, dtype, spec = (n,) + x.shape[k:], x.dtype, (entry,) + (None,) * (x.ndim - k)
    else:
        shape, dtype, spec = (n, x.ndim), np.dtype(np.int64), (entry, None)
    return Array(shape, dtype, Sharding(mesh, spec), {d: outs[d][0] for d in devices}, rt)


def by_rows(x: Array) -> Array:
    """x split along its first dim by every mesh axis it is split by (one all_to_all where
    it is split along other dims, never a gather): the layout select() takes, whose blocks'
    order is numpy's row-major order of the selection."""
    axes = [a for e in x.sharding.spec if e is not None for a in ((e,) if isinstance(e, str) else e)]
    entry = None if not axes else (axes[0] if len(axes) == 1 else tuple(axes))
    return _reshard(x, Sharding(x.sharding.mesh, (entry,) + (None,) * (x.ndim - 1)))


def _reshard(a, sharding):
    return run("function", "reshard", core.asarray, (a,), out_sharding=sharding, views_of_first=False)
