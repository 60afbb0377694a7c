"""Indexing ops: dynamic_slice, dynamic_update_slice (start indices are scalar operands,
clamped so the window stays in bounds, as in StableHLO), and gather / scatter in their
`take` form: along one axis with an integer index array (indices are clamped; scatter
adds its updates, so gather's VJP is scatter and scatter's is gather)."""
import numpy as np

from ..factors import einsum_rule, letters
from .elementwise import ALL, aval
from .registry import OpDef, check, register, zero_of

INTS = ("int32", "int64")


# -- partition handlers (see OpDef.partition_local; P is the partitioner's context) --------
def _clamped_start(P, s, n, w):
    """A start index scalar as int64, clamped so the window [s, s+w) fits in n."""
    em = P.em
    if s.dtype != "int64":
        s = em.emit("convert", s, dtype="int64")
    s = em.emit("minimum", s, em.const(n - w, "int64"))
    return em.emit("maximum", s, em.const(0, "int64"))


def _partition_dynamic_slice(P, op, rule, assign, locals_, shardings, have):
    """Sharded looked-up dims: take what this device holds of the window, zeros for the
    rest; the sum over the dim's axes is the window (the result is partial)."""
    em = P.em
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
        s = _clamped_start(P, starts[d], n, w)
        rel = em.emit("iota", shape=(w,), dtype="int64", dimension=0)
        rel = em.emit("add", rel, em.bcast(em.emit("subtract", s, em.affine(axes, c, 0)), (w,)))
        ok = P.em.in_range(rel, 0, c)
        x = em.emit("gather", x, P.em.clip(rel, 0, max(c - 1, 0)), axis=d) if c else \
            em.full(zero_of(x.dtype), tuple(w if k == d else s_ for k, s_ in enumerate(x.shape)), x.dtype)
        x = em.select(em.bcast(ok, x.shape, (d,)), x, zero_of(x.dtype))
        local_starts[d] = em.const(0, "int64")
    if tuple(sizes) == tuple(x.shape):
        return x
    return em.emit("dynamic_slice", x, *local_starts, slice_sizes=tuple(sizes))


def _partition_dynamic_update_slice(P, op, rule, assign, locals_, shardings, have):
    """Sharded updated dims: each device writes the part of the window it holds."""
    em = P.em
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
        s = _clamped_start(P, starts[d], n, w)
        rel = em.positions((c,), 0, axes, c)          # global index of each local row
        rel = em.emit("subtract", rel, em.bcast(s, (c,)))
        ok = P.em.in_range(rel, 0, w)
        u = em.emit("gather", u, P.em.clip(rel, 0, w - 1), axis=d)
        mask = em.and_(mask, em.bcast(ok, x.shape, (d,)))
        local_starts[d] = em.const(0, "int64")
    y = em.emit("dynamic_update_slice", x, u, *local_starts)
    return y if mask is None else em.emit("select", mask, y, x)


def _take_rel(P, idx, n, axes, c):
    """Indices into a dim of size n split over axes: (local index clipped, in-this-shard mask)."""
    em = P.em
    gi = idx if idx.dtype == "int64" else em.emit("convert", idx, dtype="int64")
    gi = P.em.clip(gi, 0, max(n - 1, 0))
    rel = em.emit("subtract", gi, em.bcast(em.affine(axes, c, 0), gi.shape))
    return P.em.clip(rel, 0, max(c - 1, 0)), P.em.in_range(rel, 0, c)


def _partition_gather(P, op, rule, assign, locals_, shardings, have):
    em = P.em
    x, idx = locals_
    ax = op.attrs["axis"]
    axes = shardings[0].dim_axes(ax)
    if not axes:
        return em.emit("gather", x, idx, axis=ax)
    rel, ok = _take_rel(P, idx, op.operands[0].shape[ax], axes, x.shape[ax])
    y = em.emit("gather", x, rel, axis=ax)
    ok = em.bcast(ok, y.shape, tuple(range(ax, ax + idx.ndim)))
    return em.select(ok, y, zero_of(y.dtype))


def _partition_scatter(P, op, rule, assign, locals_, shardings, have):
    em = P.em
    locals_ = P.mask_reduction_dims(op, rule, assign, locals_, shardings)
    x, idx, upd = locals_
    ax = op.attrs["axis"]
    axes = shardings[0].dim_axes(ax)
    if axes:
        idx, ok = _take_rel(P, idx, op.operands[0].shape[ax], axes, x.shape[ax])
        upd = em.select(em.bcast(ok, upd.shape, tuple(range(ax, ax + idx.ndim))), upd, zero_of(upd.dtype))
    return em.emit("scatter", x, idx, upd, axis=ax)


def _starts_ok(x, starts):
    check(len(starts) == len(x.shape), f"need {len(x.shape)} start indices, got {len(starts)}")
    for s in starts:
        check(s.shape == () and s.dtype in INTS, f"start indices must be integer scalars, got {s.dtype}{list(s.shape)}")


def clamp_starts(shape, sizes, starts):
    return tuple(int(min(max(int(s), 0), n - k)) for s, n, k in zip(starts, shape, sizes))


def _ds_infer(x, *starts, slice_sizes):
    _starts_ok(x, starts)
    check(len(slice_sizes) == len(x.shape) and all(0 <= k <= n for k, n in zip(slice_sizes, x.shape)),
          f"slice_sizes {list(slice_sizes)} do not fit shape {list(x.shape)}")
    return aval(slice_sizes, x.dtype)


def _ds_ref(x, *starts, slice_sizes):
    st = clamp_starts(x.shape, slice_sizes, starts)
    return x[tuple(slice(s, s + k) for s, k in zip(st, slice_sizes))]


def _zeros(g, shape, dtype):
    z = g.emit("constant", value=np.zeros((), dtype))
    return g.emit("broadcast_in_dim", z, shape=shape, broadcast_dimensions=())


def _ds_vjp(g, op, ct):
    x, *starts = op.operands
    return (g.emit("dynamic_update_slice", _zeros(g, x.shape, x.dtype), ct, *starts),) + (None,) * len(starts)


def _window_factors(x_aval, window_shape):
    """Dims the window covers whole pass through; the sliced ones are `sliced`."""
    a = letters(len(x_aval.shape))
    w = "".join(c if k == n else "_" for c, k, n in zip(a, window_shape, x_aval.shape))
    sliced = "".join(c for c, k, n in zip(a, window_shape, x_aval.shape) if k != n)
    return a, w, sliced


def _ds_factors(ins, outs, attrs):
    # a sliced dim may stay split: each device reads the part of the window it holds,
    # zeros elsewhere, and the window is their sum -- a reduction factor
    a, w, sliced = _window_factors(ins[0], attrs["slice_sizes"])
    return einsum_rule(",".join([a] + [""] * (len(ins) - 1)) + "->" + w, ins, outs, reduction=sliced)


def _ds_pieces(out, shapes, attrs, offset):
    """The operand at the index moved by each start (clamped into the operand, as numpy's
    reference clamps it), read once per kernel."""
    index = []
    for d, ((terms, c), n, k) in enumerate(zip(out, shapes[0], attrs["slice_sizes"])):
        index.append((terms, c) if k == n else (tuple(terms) + ((offset(1 + d, 0, n - k), 1),), c))
    return [(0, (), tuple(index))], None


register(OpDef("dynamic_slice", "indexing", _ds_infer, _ds_ref, _ds_vjp, _ds_factors, None,
               lambda ins, out, attrs: 0, ALL, linear=((0,),), split_replicate="partial",
               partition_local=_partition_dynamic_slice, fusion="reindex", index_pieces=_ds_pieces,
               lowering="pieces", lowers_complex=True))


def _dus_infer(x, u, *starts):
    _starts_ok(x, starts)
    check(u.dtype == x.dtype, f"update dtype {u.dtype} differs from operand dtype {x.dtype}")
    check(len(u.shape) == len(x.shape) and all(k <= n for k, n in zip(u.shape, x.shape)),
          f"update shape {list(u.shape)} does not fit operand shape {list(x.shape)}")
    return aval(x.shape, x.dtype)


def _dus_ref(x, u, *starts):
    st = clamp_starts(x.shape, u.shape, starts)
    out = x.copy()
    out[tuple(slice(s, s + k) for s, k in zip(st, u.shape))] = u
    return out


def _dus_vjp(g, op, ct):
    x, u, *starts = op.operands
    dx = g.emit("dynamic_update_slice", ct, _zeros(g, u.shape, u.dtype), *starts)
    du = g.emit("dynamic_slice", ct, *starts, slice_sizes=u.shape)
    return (dx, du) + (None,) * len(starts)


def _dus_factors(ins, outs, attrs):
    # a sliced dim may stay split on the operand and result alike: each device writes the
    # part of the window it holds (the update is whole on that dim)
    a, w, _ = _window_factors(ins[0], ins[1].shape)
    return einsum_rule(",".join([a, w] + [""] * (len(ins) - 2)) + "->" + a, ins, outs)


register(OpDef("dynamic_update_slice", "indexing", _dus_infer, _dus_ref, _dus_vjp, _dus_factors, None,
               lambda ins, out, attrs: 0, ALL, linear=((0, 1),), split_replicate="local",
               partition_local=_partition_dynamic_update_slice, lowering="block_copy"))


# -- gather / scatter (take along an axis) --------------------------------------------------
def _gather_shape(x_shape, idx_shape, axis):
    return tuple(x_shape[:axis]) + tuple(idx_shape) + tuple(x_shape[axis + 1:])


def _gather_infer(x, idx, axis):
    check(0 <= axis < len(x.shape), f"axis {axis} out of range for rank {len(x.shape)}")
    check(idx.dtype in INTS, f"indices must be integers, got {idx.dtype}")
    check(x.shape[axis] > 0 or int(np.prod(idx.shape)) == 0, f"cannot gather from an empty axis {axis}")
    return aval(_gather_shape(x.shape, idx.shape, axis), x.dtype)


def _gather_ref(x, idx, axis):
    if x.shape[axis] == 0:
        return np.zeros(_gather_shape(x.shape, idx.shape, axis), x.dtype)
    return np.take(x, idx, axis=axis, mode="clip")


def _gather_vjp(g, op, ct):
    x, idx = op.operands
    return g.emit("scatter", _zeros(g, x.shape, x.dtype), idx, ct, axis=op.attrs["axis"]), None


def _take_letters(x_nd, idx_nd, axis):
    a = letters(x_nd)
    i = letters(idx_nd, start=x_nd)
    return a, i, a[:axis] + i + a[axis + 1:]


def _gather_factors(ins, outs, attrs):
    # the indexed dim may stay split: each device looks up the rows it holds, zeros
    # elsewhere, and the result is their sum -- a reduction factor
    ax = attrs["axis"]
    a, i, out = _take_letters(len(ins[0].shape), len(ins[1].shape), ax)
    return einsum_rule(f"{a},{i}->{out}", ins, outs, reduction=a[ax])


register(OpDef("gather", "indexing", _gather_infer, _gather_ref, _gather_vjp, _gather_factors, None,
               lambda ins, out, attrs: 0, ALL, linear=((0,),), split_replicate="partial",
               partition_local=_partition_gather, lowering="take_rows"))


def _scatter_infer(x, idx, upd, axis):
    check(0 <= axis < len(x.shape), f"axis {axis} out of range for rank {len(x.shape)}")
    check(idx.dtype in INTS, f"indices must be integers, got {idx.dtype}")
    check(upd.dtype == x.dtype, f"updates dtype {upd.dtype} differs from operand dtype {x.dtype}")
    want = _gather_shape(x.shape, idx.shape, axis)
    check(tuple(upd.shape) == want, f"updates shape {list(upd.shape)} should be {list(want)}")
    check(x.shape[axis] > 0 or int(np.prod(idx.shape)) == 0, f"cannot scatter into an empty axis {axis}")
    return aval(x.shape, x.dtype)


def _scatter_ref(x, idx, upd, axis):
    out = np.moveaxis(x.copy(), axis, 0)
    if out.shape[0] == 0:
        return x.copy()
    i = np.clip(idx, 0, out.shape[0] - 1)
    u = np.moveaxis(upd, list(range(axis, axis + idx.ndim)), list(range(idx.ndim)))
    if x.dtype == np.bool_:
        np.logical_or.at(out, i, u)
    else:
        np.add.at(out, i, u)
    return np.moveaxis(out, 0, axis)


def _scatter_vjp(g, op, ct):
    x, idx, upd = op.operands
    return ct, None, g.emit("gather", ct, idx, axis=op.attrs["axis"])


def _scatter_factors(ins, outs, attrs):
    ax = attrs["axis"]
    a, i, u = _take_letters(len(ins[0].shape), len(ins[1].shape), ax)
    # updates split along the index dims each add into the whole operand: a partial sum;
    # the indexed dim may stay split on operand and result: each device adds what lands in it
    return einsum_rule(f"{a},{i},{u}->{a}", ins, outs, reduction=i)


register(OpDef("scatter", "indexing", _scatter_infer, _scatter_ref, _scatter_vjp, _scatter_factors, None,
               lambda ins, out, attrs: 0, ALL, linear=((0, 2),), split_replicate="local",
               reduction_kind=lambda attrs: "sum", accumulates_into=0, partition_local=_partition_scatter,
               lowering="add_rows"))
