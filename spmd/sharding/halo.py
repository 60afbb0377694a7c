"""Halo exchange: data that moves across shard borders along one dim (slice, pad and
concatenate on a sharded dim; x[1:] - x[:-1] is the classic case).

The one primitive is a *window*: along dim `dim`, split over the mesh axes `axes` in k
chunks, an output of global size m is read from a source of global size n_src as

    out[j] = src[j * stride + offset]        (fill where that index is outside [0, n_src))

optionally kept to a range of output indices [keep_lo, keep_hi) (fill elsewhere): a slice
of x padded back into x's shape (`p[:, -1] = p[:, -2]`, a boundary condition) is a window
whose kept rows all lie on one device, which then needs no other device's data.

where shard i of the source holds src[i*c_src : (i+1)*c_src) and shard i of the output
must hold out[i*c_out : (i+1)*c_out). Every device needs a contiguous source range; for
each relative shard distance h (a "hop") the devices exchange the part of their chunk
the device h places before them needs, with one collective_permute over `axes`. The
received pieces are concatenated into a buffer, each device takes its window with a
dynamic_slice whose start is a linear function of axis_index, then applies the stride
and masks the positions that are fill.

The plan is worked out for all k shards at once with numpy (one vectorised pass), so it
does not grow with the device count in Python work; when the hops are many (a shift by
many shards) `window_plan` returns None and the caller gathers the dim instead.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
from ..ir.ops.names import COLLECTIVE_PERMUTE, CONCATENATE

MAX_HOPS = 4


def chunk(n, k):
    """The rows each of k shards holds of a dim of size n (the last may hold fewer)."""
    return -(-n // k) if k > 0 else n


class WindowPlan(NamedTuple):
    pieces: tuple      # (hop h, lo, hi): rows [lo, hi) of the chunk of device i + h
    scale: int         # dynamic_slice start on the buffer = axis_index * scale + offset
    offset: int
    pad_low: int
    pad_high: int
    width: int         # rows taken before the stride
    empty: bool        # no device needs any source data: the output is all fill


def window_plan(k, c_src, n_src, c_out, m, stride, offset, max_hops=MAX_HOPS, keep=None):
    i = np.arange(k, dtype=np.int64)
    keep_lo, keep_hi = keep if keep is not None else (0, m)
    j0 = np.maximum(i * c_out, keep_lo)
    j1 = np.minimum(np.minimum((i + 1) * c_out, m), keep_hi)
    valid = j0 < j1
    width = (c_out - 1) * stride + 1 if c_out else 0
    if not valid.any() or c_src == 0:
        return WindowPlan((), 0, 0, 0, 0, width, True)
    iv, j0, j1 = i[valid], j0[valid], j1[valid]
    u = j0 * stride + offset                       # where each window starts (source index)
    a = np.maximum(0, u)
    b = np.minimum(n_src, (j1 - 1) * stride + offset + 1)
    need = a < b
    if not need.any():
        return WindowPlan((), 0, 0, 0, 0, width, True)
    iv, u, a, b = iv[need], u[need], a[need], b[need]
    h_min = int((a // c_src - iv).min())
    h_max = int(((b - 1) // c_src - iv).max())
    if sum(1 for h in range(h_min, h_max + 1) if h != 0) > max_hops:
        return None
    pieces = []
    for h in range(h_min, h_max + 1):
        cs = (iv + h) * c_src
        lo = np.maximum(0, a - cs)
        hi = np.minimum(c_src, b - cs)
        hit = lo < hi
        lo_h = int(lo[hit].min()) if hit.any() else c_src
        hi_h = int(hi[hit].max()) if hit.any() else c_src
        # pieces must join into one contiguous source range
        if h > h_min:
            lo_h = 0
        if h < h_max:
            hi_h = c_src
        pieces.append((h, lo_h, max(lo_h, hi_h)))
    lo0 = pieces[0][1]
    scale = c_out * stride - c_src
    off0 = offset - h_min * c_src - lo0
    off = iv * scale + off0                        # window start within the buffer
    pad_low = max(0, int(-off.min()))
    buf = sum(hi - lo for _, lo, hi in pieces)
    need_len = max(int((off + width).max()) + pad_low, width)
    pad_high = max(0, need_len - (buf + pad_low))
    return WindowPlan(tuple(pieces), scale, off0 + pad_low, pad_low, pad_high, width, False)


def window_bytes(plan, row_elems, itemsize):
    """Bytes a device receives for this window (every hop but 0)."""
    return sum((hi - lo) * row_elems * itemsize for h, lo, hi in plan.pieces if h != 0)


def window_emit(em, x, dim, axes, k, plan, c_out, m, stride, offset, n_src, fill=None, keep=None):
    """Emit the window: local x (chunk of the source) -> local chunk of the output."""
    out_shape = tuple(c_out if d == dim else s for d, s in enumerate(x.shape))
    if plan.empty:
        z = em.full(False if x.dtype == "bool" else 0, out_shape, x.dtype)
        return z if fill is None else em.select(em.full(False, out_shape, "bool"), z, fill)
    parts = []
    for h, lo, hi in plan.pieces:
        p = em.slice_dim(x, dim, lo, hi)
        if h != 0:
            # device i receives from device i + h: pairs are (sender, receiver)
            pairs = tuple((j, j - h) for j in range(k) if 0 <= j - h < k)
            p = em.emit(COLLECTIVE_PERMUTE, p, axes=tuple(axes), pairs=pairs, group_size=k)
        parts.append(p)
    buf = parts[0] if len(parts) == 1 else em.emit(CONCATENATE, *parts, dimension=dim)
    buf = em.pad_dim(buf, dim, plan.pad_low, plan.pad_high)
    if plan.scale == 0:      # every device takes the same window: a static slice
        y = em.slice_dim(buf, dim, plan.offset, plan.offset + plan.width)
    else:
        y = em.dynamic_slice_dim(buf, dim, em.affine(axes, plan.scale, plan.offset), plan.width)
    if stride > 1:
        y = em.slice_dim(y, dim, 0, plan.width, stride)
    last = (m - 1) * stride + offset
    if fill is not None and (offset < 0 or last >= n_src):
        src = em.positions(y.shape, dim, axes, c_out, scale=stride, offset=offset)
        ok = em.and_(em.compare(src, 0, "GE"), em.compare(src, n_src, "LT"))
        y = em.select(ok, y, fill)
    if keep is not None and tuple(keep) != (0, m):
        out = em.positions(y.shape, dim, axes, c_out)
        ok = em.and_(em.compare(out, keep[0], "GE"), em.compare(out, keep[1], "LT"))
        y = em.select(ok, y, fill)
    return y


# -- ghost layers ------------------------------------------------------------------------------
def ghost_rows(plan, c):
    """(rows from the device before, rows from the device after) that `plan` takes, when
    it is a same-size window reaching at most one device either way; else None."""
    if plan is None or plan.scale != 0:
        return None
    below = above = 0
    for h, lo, hi in plan.pieces:
        if hi <= lo or h == 0:
            continue
        if h == -1:
            below = c - lo
        elif h == 1:
            above = hi
        else:
            return None
    return below, above


def extend(em, x, dim, axes, k, below, above):
    """x (a device's chunk along `dim`) with `below` rows of the device before it and
    `above` rows of the device after it around it: a ghost layer. Devices at the ends get
    zeros there. One collective_permute each way."""
    c = x.shape[dim]
    parts = []
    if below:
        edge = em.slice_dim(x, dim, c - below, c)
        parts.append(em.emit(COLLECTIVE_PERMUTE, edge, axes=tuple(axes), group_size=k,
                             pairs=tuple((j, j + 1) for j in range(k - 1))))
    parts.append(x)
    if above:
        edge = em.slice_dim(x, dim, 0, above)
        parts.append(em.emit(COLLECTIVE_PERMUTE, edge, axes=tuple(axes), group_size=k,
                             pairs=tuple((j, j - 1) for j in range(1, k))))
    return parts[0] if len(parts) == 1 else em.emit(CONCATENATE, *parts, dimension=dim)
