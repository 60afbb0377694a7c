"""Partition rules of the indexing family (ir/ops/indexing.py): a looked-up or updated
dim that is split stays split. The generic partitioning keeps such a dim split (the ops'
OpDef.split_replicate); these rules compute each device's part: a lookup takes what the
device holds and zeros elsewhere (the result is a pending sum), an update writes what
the device holds (no communication)."""
from __future__ import annotations

from ...ir import Op
from ...ir.ops.names import (
    ADD, CONVERT, DYNAMIC_SLICE, DYNAMIC_UPDATE_SLICE, GATHER, IOTA, MAXIMUM, MINIMUM, SCATTER,
    SELECT, SUBTRACT
)
from ...ir.ops.registry import zero_of
from .partition_context import PartitionContext


def _clamped_start(ctx, s, n, w):
    """A start index scalar as int64, clamped so the window [s, s+w) fits in n."""
    em = ctx.em
    if s.dtype != "int64":
        s = em.emit(CONVERT, s, dtype="int64")
    s = em.emit(MINIMUM, s, em.const(n - w, "int64"))
    return em.emit(MAXIMUM, s, em.const(0, "int64"))


def _dynamic_slice(ctx: PartitionContext, op: Op, rule, assign, locals_, shardings, have):
    """Sharded looked-up dims: take what this device holds of the window, zeros for the
    rest; the sum over the dim's axes is the window (the result is partial)."""
    em = ctx.em
    x, *starts = locals_
    xv = op.operands[0]
    sizes = list(op.attrs["slice_sizes"])
    sx = shardings[0]
    local_starts = list(starts)
    for d, w in enumerate(sizes):
        axes = sx.dim_axes(d)
        n = xv.shape[d]
        if w == n or not axes:
            if w == n:
                sizes[d] = x.shape[d]
            continue
        c = x.shape[d]
        s = _clamped_start(ctx, starts[d], n, w)
        rel = em.emit(IOTA, shape=(w,), dtype="int64", dimension=0)
        rel = em.emit(ADD, rel, em.bcast(em.emit(SUBTRACT, s, em.affine(axes, c, 0)), (w,)))
        ok = ctx.em.in_range(rel, 0, c)
        x = em.emit(GATHER, x, ctx.em.clip(rel, 0, max(c - 1, 0)), axis=d) if c else \
            em.full(zero_of(x.dtype), tuple(w if k == d else s_ for k, s_ in enumerate(x.shape)), x.dtype)
        x = em.select(em.bcast(ok, x.shape, (d,)), x, zero_of(x.dtype))
        local_starts[d] = em.const(0, "int64")
    if tuple(sizes) == tuple(x.shape):
        return x
    return em.emit(DYNAMIC_SLICE, x, *local_starts, slice_sizes=tuple(sizes))


def _dynamic_update_slice(ctx: PartitionContext, op: Op, rule, assign, locals_, shardings, have):
    """Sharded updated dims: each device writes the part of the window it holds."""
    em = ctx.em
    x, u, *starts = locals_
    xv, uv = op.operands[0], op.operands[1]
    sx = shardings[0]
    local_starts = list(starts)
    mask = None
    for d in range(xv.ndim):
        axes = sx.dim_axes(d)
        n, w = xv.shape[d], uv.shape[d]
        if w == n or not axes:
            continue
        if w == 0:
            return x
        c = x.shape[d]
        s = _clamped_start(ctx, starts[d], n, w)
        rel = em.positions((c,), 0, axes, c)          # global index of each local row
        rel = em.emit(SUBTRACT, rel, em.bcast(s, (c,)))
        ok = ctx.em.in_range(rel, 0, w)
        u = em.emit(GATHER, u, ctx.em.clip(rel, 0, w - 1), axis=d)
        mask = em.and_(mask, em.bcast(ok, x.shape, (d,)))
        local_starts[d] = em.const(0, "int64")
    y = em.emit(DYNAMIC_UPDATE_SLICE, x, u, *local_starts)
    return y if mask is None else em.emit(SELECT, mask, y, x)


def _take_rel(ctx, idx, n, axes, c):
    """Indices into a dim of size n split over axes: (local index clipped, in-this-shard mask)."""
    em = ctx.em
    gi = idx if idx.dtype == "int64" else em.emit(CONVERT, idx, dtype="int64")
    gi = ctx.em.clip(gi, 0, max(n - 1, 0))
    rel = em.emit(SUBTRACT, gi, em.bcast(em.affine(axes, c, 0), gi.shape))
    return ctx.em.clip(rel, 0, max(c - 1, 0)), ctx.em.in_range(rel, 0, c)


def _gather(ctx: PartitionContext, op: Op, rule, assign, locals_, shardings, have):
    em = ctx.em
    x, idx = locals_
    ax = op.attrs["axis"]
    axes = shardings[0].dim_axes(ax)
    if not axes:
        return em.emit(GATHER, x, idx, axis=ax)
    rel, ok = _take_rel(ctx, idx, op.operands[0].shape[ax], axes, x.shape[ax])
    y = em.emit(GATHER, x, rel, axis=ax)
    ok = em.bcast(ok, y.shape, tuple(range(ax, ax + idx.ndim)))
    return em.select(ok, y, zero_of(y.dtype))


def _scatter(ctx: PartitionContext, op: Op, rule, assign, locals_, shardings, have):
    em = ctx.em
    locals_ = ctx.mask_reduction_dims(op, rule, assign, locals_, shardings)
    x, idx, upd = locals_
    ax = op.attrs["axis"]
    axes = shardings[0].dim_axes(ax)
    if axes:
        idx, ok = _take_rel(ctx, idx, op.operands[0].shape[ax], axes, x.shape[ax])
        upd = em.select(em.bcast(ok, upd.shape, tuple(range(ax, ax + idx.ndim))), upd, zero_of(upd.dtype))
    return em.emit(SCATTER, x, idx, upd, axis=ax)


# op name -> the local computation inside the generic partitioning
LOCAL = {
    "dynamic_slice": _dynamic_slice,
    "dynamic_update_slice": _dynamic_update_slice,
    "gather": _gather,
    "scatter": _scatter,
}
