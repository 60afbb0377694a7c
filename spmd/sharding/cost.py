"""The communication cost model: how many bytes one device receives when a value is
moved from one sharding to another. Propagation uses it to decide conflicts (keep the
split whose loss would move the most bytes; reshard the cheaper side).

It is a closed form, not a plan: per dim, the axes both shardings share as a major
prefix stay; the others are

    added (the value was replicated over them)      a local slice            0
    pending sum, and the target splits a dim on it   reduce_scatter   (G-1)/G x L
    pending sum, the target neither splits nor sums  all_reduce      2(G-1)/G x L
    split, and the target splits another dim on it   all_to_all       (G-1)/G x L
    split, and the target does not split on it       all_gather        (G-1) x L

where G is the product of the axes' sizes and L the local bytes at that point. The
moves are charged in that order (slices first: they shrink what the rest carries;
gathers last: they grow it), which is also how a good plan orders them. The reshard
planner (reshard.py) finds the actual collectives; this model only needs to rank
choices, cheaply and deterministically.
"""
from __future__ import annotations

import numpy as np

from .rules import axes_size


def _prefix(a, b):
    n = 0
    while n < len(a) and n < len(b) and a[n] == b[n]:
        n += 1
    return n


def local_elems(mesh, shape, dims) -> int:
    """Elements per device (padded) of `shape` split as `dims` (axes per dim)."""
    n = 1
    for size, axes in zip(shape, dims):
        k = axes_size(mesh, axes)
        n *= -(-size // k) if k > 1 else size
    return n


def dims_reshard_bytes(mesh, shape, itemsize, src, dst, src_partial=(), dst_partial=()) -> float:
    """Bytes one device receives to go from `src` to `dst` (axes per dim, major to
    minor) with the pending sums `src_partial` -> `dst_partial`."""
    src = [tuple(a) for a in src] + [()] * (len(shape) - len(src))
    dst = [tuple(a) for a in dst] + [()] * (len(shape) - len(dst))
    removed, added = [], []
    for s, t in zip(src, dst):
        k = _prefix(s, t)
        removed += s[k:]
        added += t[k:]
    L = float(local_elems(mesh, shape, src) * itemsize)
    cost = 0.0
    def size(a):
        return axes_size(mesh, (a,))

    sliced = [a for a in added if a not in removed and a not in src_partial]
    for a in sliced:
        L /= size(a)
    for a in src_partial:
        if a in dst_partial:
            continue
        g = size(a)
        if a in added:                       # reduce_scatter onto the dim that wants it
            cost += L * (g - 1) / g
            L /= g
        else:                                # all_reduce
            cost += 2 * L * (g - 1) / g
    for a in removed:
        g = size(a)
        if a in added:                       # all_to_all: the split moves to another place
            cost += L * (g - 1) / g
        else:                                # all_gather
            cost += L * (g - 1)
            L *= g
    return cost


def reshard_bytes(src, dst, shape, dtype) -> float:
    """Bytes one device receives to reshard a `shape`/`dtype` value from Sharding `src`
    to Sharding `dst` (same mesh)."""
    n = len(shape)
    return dims_reshard_bytes(src.mesh, shape, np.dtype(dtype).itemsize,
                              [src.dim_axes(d) for d in range(n)], [dst.dim_axes(d) for d in range(n)],
                              src.partial, dst.partial)


def value_bytes(v) -> int:
    """Global bytes of a Value."""
    return v.size * np.dtype(v.dtype).itemsize
