"""Partition rules of the shape family (ir/ops/shape.py): constants and iotas in local
pieces, and the ops that move data along a split dim (slice, pad, concatenate, reverse,
roll) by halo windows (halo.py) instead of gathers.

A pad of a slice of x (a stencil's term, a boundary condition) reads a ghost layer of
x's chunk, one per x and layout, shared by every such term of the program.
"""
from __future__ import annotations

from ...ir import Op
from ...ir.ops.names import (
    COLLECTIVE_PERMUTE, CONCATENATE, CONSTANT, CONVERT, IOTA, PAD, REVERSE, ROLL, SELECT, SLICE
)
from ...ir.ops.registry import producer_is, zero_of
from .. import halo
from .partition_context import PartitionContext


def _iota(ctx: PartitionContext, op: Op, rule, assign, locals_, shardings, have):
    a = op.attrs
    d = a["dimension"]
    shape = have.local_shape(op.result.shape)
    axes = have.dim_axes(d)
    if not axes:
        return ctx.em.emit(IOTA, shape=shape, dtype=a["dtype"], dimension=d)
    pos = ctx.em.positions(shape, d, axes, halo.chunk(op.result.shape[d], ctx.axes_size(axes)))
    return pos if a["dtype"] == "int64" else ctx.em.emit(CONVERT, pos, dtype=a["dtype"])


def _constant(ctx: PartitionContext, op: Op):
    """The whole constant on every device, then a local slice to the result's sharding."""
    res = op.result
    local = ctx.em.emit(CONSTANT, value=op.attrs["value"])
    rep = ctx.sh((None,) * res.ndim)
    return ctx.reshard(local, rep, ctx.sharding_of(res), res.shape), ctx.sharding_of(res)


def _slice(ctx: PartitionContext, op: Op):
    res, xv = op.result, op.operands[0]
    target = ctx.sharding_of(res)
    spec = [target.dim_axes(d) for d in range(res.ndim)]
    partial = ctx.carry_all(op, spec)
    x = ctx.get(xv, ctx.sh(spec, partial))
    start, limit, stride = op.attrs["start"], op.attrs["limit"], op.attrs["stride"]
    em = ctx.em
    # dims that are whole on every device: one local slice
    st = [0 if spec[d] else start[d] for d in range(xv.ndim)]
    lim = [x.shape[d] if spec[d] else limit[d] for d in range(xv.ndim)]
    sd = [1 if spec[d] else stride[d] for d in range(xv.ndim)]
    if (st, lim, sd) != ([0] * xv.ndim, list(x.shape), [1] * xv.ndim):
        x = em.emit(SLICE, x, start=tuple(st), limit=tuple(lim), stride=tuple(sd))
    cur = [res.shape[d] if not spec[d] else xv.shape[d] for d in range(xv.ndim)]
    for d in range(xv.ndim):
        n, m = xv.shape[d], res.shape[d]
        if not spec[d] or (start[d] == 0 and stride[d] == 1 and m == n):
            continue
        k = ctx.axes_size(spec[d])
        c_out = halo.chunk(m, k)
        plan = halo.window_plan(k, x.shape[d], n, c_out, m, stride[d], start[d])
        if plan is None:
            x, whole = ctx.gather_fallback(x, tuple(cur), spec, partial, d)
            x = em.slice_dim(x, d, start[d], limit[d], stride[d])
            cur[d] = m
            x = ctx.reshard(x, ctx.sh(whole, partial), ctx.sh(spec, partial), tuple(cur))
        else:
            x = halo.window_emit(em, x, d, spec[d], k, plan, c_out, m, stride[d], start[d], n)
            cur[d] = m
    return ctx.finish(x, ctx.sh(spec, partial), target, res.shape, res.dtype)


def _padded_slice(op):
    """(x, start, limit) when pad's operand is a slice of x with stride 1 and the pad has no
    interior padding: together one window of x, kept to the slice's rows."""
    if not producer_is(op.operands[0], SLICE) or any(op.attrs["interior"]):
        return None
    s = op.operands[0].producer
    if any(st != 1 for st in s.attrs["stride"]):
        return None
    return s.operands[0], s.attrs["start"], s.attrs["limit"]


def _pad(ctx: PartitionContext, op: Op):
    target = ctx.sharding_of(op.result)
    spec = [target.dim_axes(d) for d in range(op.result.ndim)]
    partial = ctx.carry_all(op, spec)
    if _constant_expression(op.operands[0]) and any(spec) and not partial:
        return _pad_of_constant(ctx, op, spec, partial, target)
    sliced = _padded_slice(op)
    if sliced is not None and any(spec):
        out = _pad_of_slice(ctx, op, spec, partial, target, *sliced)
        if out is not None:
            return out
    return _pad_plain(ctx, op, spec, partial, target)


def _constant_expression(v) -> bool:
    """Is v a constant, or a constant only re-indexed (broadcast, reshaped...)?"""
    while v.producer is not None and v.producer.opdef.fusion == "reindex" and len(v.producer.operands) == 1:
        v = v.producer.operands[0]
    return producer_is(v, CONSTANT)


def _emit_whole(em, v):
    """Emit v (a constant expression) whole, in the per-device program."""
    p = v.producer
    if producer_is(v, CONSTANT):
        return em.emit(CONSTANT, value=p.attrs["value"])
    return em.emit(p.name, _emit_whole(em, p.operands[0]), **p.attrs)


def _pad_of_constant(ctx, op, spec, partial, target):
    """A constant (or a splat) is on every device: each pads it whole and keeps its own
    part (no communication; `p[-1, :] = 5.0` on a split p)."""
    res = op.result
    whole = ctx.sh((), partial)
    x = _emit_whole(ctx.em, op.operands[0])             # the whole of it, on every device
    v = ctx.get(op.operands[1], ctx.sh((), partial))
    padded = ctx.em.emit(PAD, x, v, **op.attrs)
    return ctx.finish(ctx.reshard(padded, whole, ctx.sh(spec, partial), res.shape), ctx.sh(spec, partial), target,
                      res.shape, res.dtype)


def _pad_plain(ctx, op, spec, partial, target):
    res, xv, vv = op.result, op.operands[0], op.operands[1]
    x = ctx.get(xv, ctx.sh(spec, partial))
    v = ctx.get(vv, ctx.sh((), partial))
    low, high, interior = op.attrs["low"], op.attrs["high"], op.attrs["interior"]
    em = ctx.em
    # whole dims pad locally; split dims get their interior padding locally (each shard
    # also pads after its last element, so shards stay equal) and their edges by a window
    lo = [0 if spec[d] else low[d] for d in range(xv.ndim)]
    hi = [interior[d] if spec[d] else high[d] for d in range(xv.ndim)]
    if any(lo) or any(hi) or any(interior):
        x = em.emit(PAD, x, v, low=tuple(lo), high=tuple(hi), interior=tuple(interior))
    # global sizes as laid out now: split dims not yet done hold k equal chunks
    cur = [res.shape[d] if not spec[d] else x.shape[d] * ctx.axes_size(spec[d]) for d in range(xv.ndim)]
    for d in range(xv.ndim):
        m = res.shape[d]
        if not spec[d] or (low[d] == 0 and high[d] == 0 and interior[d] == 0):
            cur[d] = m
            continue
        k = ctx.axes_size(spec[d])
        n = xv.shape[d]
        n_src = n + max(n - 1, 0) * interior[d]     # the interior-padded source size
        c_out = halo.chunk(m, k)
        plan = halo.window_plan(k, x.shape[d], n_src, c_out, m, 1, -low[d])
        if plan is None:
            # shards are equal after the local interior padding: gather them whole
            gshape = tuple(cur[:d]) + (x.shape[d] * k,) + tuple(cur[d + 1:])
            xs, whole = ctx.gather_fallback(x, gshape, spec, partial, d)
            xs = em.slice_dim(xs, d, 0, n_src)
            xs = em.pad_dim(xs, d, low[d], high[d], v)
            cur[d] = m
            x = ctx.reshard(xs, ctx.sh(whole, partial), ctx.sh(spec, partial), tuple(cur))
        else:
            x = halo.window_emit(em, x, d, spec[d], k, plan, c_out, m, 1, -low[d], n_src, fill=v)
            cur[d] = m
    return ctx.finish(x, ctx.sh(spec, partial), target, res.shape, res.dtype)


def _pad_of_slice(ctx, op, spec, partial, target, xv, start, limit):
    """pad(slice(x)) back into x's shape (a stencil's term, a boundary condition): each
    split dim is a window of x kept to the slice's rows. Every such term of one x reads
    one ghost-layered copy of x's chunk (one exchange of x's edges, corners included,
    however many terms: the halo exchange a programmer writes by hand); a term reaching
    further is its own window, and a device whose kept rows it holds itself needs nothing.
    None when a window would take too many hops."""
    res = op.result
    needs = _ghost_needs(ctx, op, spec, xv, start, limit)
    if needs is not None:
        return _padded_slice_from_ghosts(ctx, op, spec, partial, target, xv, start, limit)
    v = ctx.get(op.operands[1], ctx.sh((), partial))
    low, high = op.attrs["low"], op.attrs["high"]
    em = ctx.em
    x = ctx.get(xv, ctx.sh(spec, partial))
    st = [0 if spec[d] else start[d] for d in range(res.ndim)]
    lim = [x.shape[d] if spec[d] else limit[d] for d in range(res.ndim)]
    if (st, lim) != ([0] * res.ndim, list(x.shape)):
        x = em.emit(SLICE, x, start=tuple(st), limit=tuple(lim), stride=(1,) * res.ndim)
    lo = [0 if spec[d] else low[d] for d in range(res.ndim)]
    hi = [0 if spec[d] else high[d] for d in range(res.ndim)]
    if any(lo) or any(hi):
        x = em.emit(PAD, x, v, low=tuple(lo), high=tuple(hi), interior=(0,) * res.ndim)
    for d in range(res.ndim):
        if not spec[d]:
            continue
        k, m, n = ctx.axes_size(spec[d]), res.shape[d], xv.shape[d]
        c_out, offset, keep = halo.chunk(m, k), start[d] - low[d], (low[d], low[d] + limit[d] - start[d])
        plan = halo.window_plan(k, x.shape[d], n, c_out, m, 1, offset, keep=keep)
        if plan is None:                   # far from where it lands: the pad of the slice
            return None
        x = halo.window_emit(em, x, d, spec[d], k, plan, c_out, m, 1, offset, n, fill=v, keep=keep)
    return ctx.finish(x, ctx.sh(spec, partial), target, res.shape, res.dtype)


def _ghost_needs(ctx, op, spec, xv, start, limit):
    """{split dim: (rows from the device before, rows from the device after)} this
    pad-of-slice reads, when it can read them from a ghost layer (it is the same size
    as x along split dims and reaches at most one device either way); else None."""
    res, low = op.result, op.attrs["low"]
    if ctx.sharding_of(res).replace(partial=()).spec != ctx.sh(spec).spec:
        return None
    needs = {}
    for d in range(res.ndim):
        if not spec[d]:
            continue
        k, n = ctx.axes_size(spec[d]), xv.shape[d]
        if res.shape[d] != n:
            return None
        c = halo.chunk(n, k)
        plan = halo.window_plan(k, c, n, c, n, 1, start[d] - low[d], keep=(low[d], low[d] + limit[d] - start[d]))
        rows = halo.ghost_rows(plan, c)
        if rows is None:
            return None
        needs[d] = rows
    return needs


def _ghosts(ctx, xv, spec):
    """{split dim: (below, above)}: the ghost layer of x laid out by spec that serves
    every pad-of-slice of x the program has (the most any of them needs)."""
    key = ("ghosts", xv, tuple(spec))
    got = ctx.cache.get(key)
    if got is None:
        got = {d: (0, 0) for d in range(xv.ndim) if spec[d]}
        for s in ctx.users(xv):
            if not producer_is(s.results[0], SLICE):
                continue
            for pad in ctx.users(s.result):
                if not producer_is(pad.results[0], PAD) or _padded_slice(pad) is None:
                    continue
                needs = _ghost_needs(ctx, pad, spec, xv, s.attrs["start"], s.attrs["limit"])
                for d, (b, a) in (needs or {}).items():
                    got[d] = (max(got[d][0], b), max(got[d][1], a))
        ctx.cache[key] = got
    return got


def _padded_slice_from_ghosts(ctx, op, spec, partial, target, xv, start, limit):
    res, em = op.result, ctx.em
    low, high = op.attrs["low"], op.attrs["high"]
    ghosts = _ghosts(ctx, xv, spec)
    key = ("ghosted", xv, tuple(spec), partial)
    ext = ctx.cache.get(key)
    if ext is None:
        ext = ctx.get(xv, ctx.sh(spec, partial))
        for d, (below, above) in ghosts.items():
            ext = halo.extend(em, ext, d, spec[d], ctx.axes_size(spec[d]), below, above)
        ctx.cache[key] = ext
    v = ctx.get(op.operands[1], ctx.sh((), partial))
    st, lim, lo, hi = [], [], [], []
    for d in range(res.ndim):
        if spec[d]:
            c = halo.chunk(res.shape[d], ctx.axes_size(spec[d]))
            first = start[d] - low[d] + ghosts[d][0]
            # rows outside the ghost layer are never kept: any value will do there
            ext = em.pad_dim(ext, d, max(0, -first), max(0, first + c - ext.shape[d]))
            first = max(0, first)
            st.append(first)
            lim.append(first + c)
            lo.append(0)
            hi.append(0)
        else:
            st.append(start[d])
            lim.append(limit[d])
            lo.append(low[d])
            hi.append(high[d])
    x = em.emit(SLICE, ext, start=tuple(st), limit=tuple(lim), stride=(1,) * res.ndim)
    if any(lo) or any(hi):
        x = em.emit(PAD, x, v, low=tuple(lo), high=tuple(hi), interior=(0,) * res.ndim)
    mask = None
    for d in range(res.ndim):
        keep = (low[d], low[d] + limit[d] - start[d])
        if spec[d] and keep != (0, res.shape[d]):
            pos = em.positions(x.shape, d, spec[d], halo.chunk(res.shape[d], ctx.axes_size(spec[d])))
            mask = em.and_(mask, em.and_(em.compare(pos, keep[0], "GE"), em.compare(pos, keep[1], "LT")))
    if mask is not None:
        x = em.select(mask, x, v)
    return ctx.finish(x, ctx.sh(spec, partial), target, res.shape, res.dtype)


def _concatenate(ctx: PartitionContext, op: Op):
    res = op.result
    target = ctx.sharding_of(res)
    spec = [target.dim_axes(d) for d in range(res.ndim)]
    partial = ctx.carry_all(op, spec)
    d = op.attrs["dimension"]
    xs = [ctx.get(o, ctx.sh(spec, partial)) for o in op.operands]
    em = ctx.em
    if not spec[d]:
        out = xs[0] if len(xs) == 1 else em.emit(CONCATENATE, *xs, dimension=d)
        return ctx.finish(out, ctx.sh(spec, partial), target, res.shape, res.dtype)
    k = ctx.axes_size(spec[d])
    m = res.shape[d]
    c_out = halo.chunk(m, k)
    plans, off = [], 0
    for o, x in zip(op.operands, xs):
        n = o.shape[d]
        plans.append(None if n == 0 else halo.window_plan(k, x.shape[d], n, c_out, m, 1, -off))
        off += n
    if any(p is None for p, o in zip(plans, op.operands) if o.shape[d]):
        whole = list(spec)
        whole[d] = ()
        gathered = [ctx.gather_fallback(x, o.shape, spec, partial, d)[0] if o.shape[d] else x
                    for o, x in zip(op.operands, xs)]
        out = em.emit(CONCATENATE, *gathered, dimension=d)
        out = ctx.reshard(out, ctx.sh(whole, partial), ctx.sh(spec, partial), res.shape)
        return ctx.finish(out, ctx.sh(spec, partial), target, res.shape, res.dtype)
    out, pos, off = None, None, 0
    for o, x, plan in zip(op.operands, xs, plans):
        n = o.shape[d]
        if n:
            y = halo.window_emit(em, x, d, spec[d], k, plan, c_out, m, 1, -off, n)
            if out is None:
                out = y
            else:
                if pos is None:
                    pos = em.positions(y.shape, d, spec[d], c_out)
                out = em.emit(SELECT, em.compare(pos, off, "GE"), y, out)
        off += n
    if out is None:
        out = em.full(zero_of(res.dtype), ctx.sh(spec).local_shape(res.shape), res.dtype)
    return ctx.finish(out, ctx.sh(spec, partial), target, res.shape, res.dtype)


def _reverse(ctx: PartitionContext, op: Op):
    """A reversed split dim: each device reverses its chunk, the chunks trade places with
    their mirror devices (one collective_permute of a chunk), and, when the dim does not
    divide evenly, a halo of the padding's width moves the result into place. Nothing is
    gathered."""
    res, xv = op.result, op.operands[0]
    target = ctx.sharding_of(res)
    spec = [target.dim_axes(d) for d in range(res.ndim)]
    partial = ctx.carry_all(op, spec)
    em = ctx.em
    x = ctx.get(xv, ctx.sh(spec, partial))
    x = em.emit(REVERSE, x, dimensions=tuple(op.attrs["dimensions"]))
    for d in op.attrs["dimensions"]:
        if not spec[d]:
            continue
        k, n = ctx.axes_size(spec[d]), res.shape[d]
        c = x.shape[d]
        if k == 1:
            continue
        own = x
        x = em.emit(COLLECTIVE_PERMUTE, x, axes=tuple(spec[d]), group_size=k,
                    pairs=tuple((j, k - 1 - j) for j in range(k) if j != k - 1 - j))
        if k % 2:                              # the middle device keeps its own chunk
            mid = em.compare(em.bcast(em.axis_index(spec[d]), x.shape), (k - 1) // 2, "EQ")
            x = em.emit(SELECT, mid, own, x)
        shift = k * c - n                      # the padding, now at the front
        if shift:
            plan = halo.window_plan(k, c, k * c, c, n, 1, shift)
            x = halo.window_emit(em, x, d, spec[d], k, plan, c, n, 1, shift, k * c)
    return ctx.finish(x, ctx.sh(spec, partial), target, res.shape, res.dtype)


def _rotate_chunks(em, x, d, axes, k, c, t):
    """The k chunks of size c along d (the whole of an evenly split dim), rotated by t
    rows: chunk j becomes the last r rows of chunk j - q - 1 then the first c - r of chunk
    j - q (t = q c + r). At most two collective_permutes, none for a part that stays."""
    q, r = divmod(t % (k * c), c)

    def moved(part, hop):
        hop %= k
        if hop == 0:
            return part
        return em.emit(COLLECTIVE_PERMUTE, part, axes=tuple(axes), group_size=k,
                       pairs=tuple((j, (j + hop) % k) for j in range(k)))
    parts = []
    if r:
        parts.append(moved(em.slice_dim(x, d, c - r, c), q + 1))
    if c - r:
        parts.append(moved(em.slice_dim(x, d, 0, c - r), q))
    return parts[0] if len(parts) == 1 else em.emit(CONCATENATE, *parts, dimension=d)


def _roll(ctx: PartitionContext, op: Op):
    """A rolled split dim moves rows between devices shift / chunk apart: one neighbour's
    edge for a small shift (numpy's periodic stencils), never a gather. A split that is
    not even rolls the padded chunks twice, by the shift and by the shift plus the
    padding, and each device keeps the rows of the one that lands them right."""
    res, xv = op.result, op.operands[0]
    target = ctx.sharding_of(res)
    spec = [target.dim_axes(d) for d in range(res.ndim)]
    partial = ctx.carry_all(op, spec)
    em = ctx.em
    x = ctx.get(xv, ctx.sh(spec, partial))
    d, s = op.attrs["dimension"], op.attrs["shift"]
    k = ctx.axes_size(spec[d]) if spec[d] else 1
    if k == 1:
        y = em.emit(ROLL, x, shift=s, dimension=d)
        return ctx.finish(y, ctx.sh(spec, partial), target, res.shape, res.dtype)
    n, c = res.shape[d], x.shape[d]
    pad = k * c - n
    y = _rotate_chunks(em, x, d, spec[d], k, c, s)
    if pad:
        wrapped = _rotate_chunks(em, x, d, spec[d], k, c, s + pad)
        y = em.emit(SELECT, em.compare(em.positions(y.shape, d, spec[d], c), s, "LT"), wrapped, y)
    return ctx.finish(y, ctx.sh(spec, partial), target, res.shape, res.dtype)


# op name -> the rule for the whole op
OPS = {
    "constant": _constant,
    "slice": _slice,
    "pad": _pad,
    "concatenate": _concatenate,
    "reverse": _reverse,
    "roll": _roll,
}

# op name -> the local computation inside the generic partitioning
LOCAL = {
    "iota": _iota,
}
