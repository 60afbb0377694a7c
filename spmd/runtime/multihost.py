"""Per-process data: building global Arrays from each process's part, and gathering
per-process values (JAX's names and semantics).

    spmd.make_array_from_process_local_data(sharding, local_data, global_shape=None) -> Array
    spmd.process_allgather(x, tiled=False) -> np.ndarray

With one process (local, ray: the driver holds every device) a process's part is the
whole array. Under MPI (one device per process) it is the part of the global array
that this process's device holds: the block of every dimension split over mesh axes,
whole along dimensions that are not split. The global shape, when not given, is the
sum of the distinct blocks along each split dimension (so a ragged last block is
fine); every process's part is checked against it, and processes that hold replicas
of one block must give equal data.
"""
from __future__ import annotations

import numpy as np

from ..errors import ShardingError
from ..ir.mesh import Sharding
from ..tree import tree_map
from .array import Array, device_put, padded
from .consistency import value_hash
from .current_runtime import get_runtime


def process_allgather(x, tiled=False):
    """Every process's value of x (a pytree of arrays), stacked on a new leading axis
    in process order (tiled=True: concatenated along axis 0). An spmd.Array is already
    global: its global value is returned, as JAX does for fully addressable arrays."""
    rt = get_runtime()

    def one(v):
        if isinstance(v, Array):
            return v.numpy()
        v = np.asarray(v)
        parts = rt.allgather_object(v, "spmd.process_allgather")
        shapes = {p.shape for p in parts}
        if len(shapes) > 1 and not tiled:
            raise ShardingError(f"spmd.process_allgather: the processes' values have different shapes "
                                f"{[list(p.shape) for p in parts]}; stacking needs one shape (tiled=True "
                                f"concatenates along axis 0)")
        return np.concatenate([np.atleast_1d(p) for p in parts], axis=0) if tiled else np.stack(parts)

    return tree_map(one, x)


def make_array_from_process_local_data(sharding, local_data, global_shape=None) -> Array:
    """A global Array from each process's part of it (see the module docstring)."""
    if not isinstance(sharding, Sharding):
        raise ShardingError(f"spmd.make_array_from_process_local_data takes a Sharding, got {sharding!r}")
    rt = get_runtime()
    local_data = np.asarray(local_data)
    sh = sharding.for_rank(local_data.ndim, f"local data of shape {list(local_data.shape)}")
    if rt.process_count() <= 1:
        if global_shape is not None and tuple(global_shape) != local_data.shape:
            raise ShardingError(f"spmd.make_array_from_process_local_data: one process holds every device, "
                                f"so its data is the global array: shape {list(local_data.shape)}, but "
                                f"global_shape={list(global_shape)}")
        return device_put(local_data, sh, runtime=rt)
    devices = rt.local_devices(sh.mesh)
    if len(devices) != 1:
        raise ShardingError("spmd.make_array_from_process_local_data: a process with several of the mesh's "
                            "devices is not supported yet")
    me = devices[0]
    mine = (sh.shard_index(me), local_data.shape, str(local_data.dtype), value_hash(local_data))
    parts = rt.allgather_object(mine, "spmd.make_array_from_process_local_data")   # process p: device p
    dtypes = {p[2] for p in parts}
    if len(dtypes) > 1:
        raise ShardingError(f"spmd.make_array_from_process_local_data: the processes' parts have different "
                            f"dtypes: {[p[2] for p in parts]}")
    if global_shape is None:
        shape = []
        for d in range(local_data.ndim):
            blocks = {}
            for idx, shp, _, _ in parts:
                blocks.setdefault(idx[d], shp[d])
            shape.append(sum(blocks.values()) if sh.dim_shards(d) > 1 else local_data.shape[d])
        global_shape = tuple(shape)
    global_shape = tuple(int(n) for n in global_shape)
    for p, (idx, shp, _, h) in enumerate(parts):
        box = sh.shard_box(global_shape, p)
        want = tuple(b - a for a, b in box)
        if tuple(shp) != want:
            raise ShardingError(f"spmd.make_array_from_process_local_data: rank {p} gave a part of shape "
                                f"{list(shp)}; the global array {list(global_shape)} split by {sh.text()} "
                                f"gives it the block {[list(b) for b in box]}, shape {list(want)}")
    by_block = {}
    for p, (idx, _, _, h) in enumerate(parts):
        by_block.setdefault(idx, {}).setdefault(h, []).append(p)
    for idx, hs in by_block.items():
        if len(hs) > 1:
            raise ShardingError(f"spmd.make_array_from_process_local_data: ranks {sorted(sum(hs.values(), []))} "
                                f"hold replicas of one block of {sh.text()} but gave different data "
                                f"({'; '.join(f'ranks {rs} agree' for rs in hs.values())})")
    local = sh.local_shape(global_shape)
    box = tuple((0, n) for n in local_data.shape)
    buf = padded(local_data, box, local)
    return Array(global_shape, local_data.dtype, sh, {me: rt.put(me, buf)}, rt)
