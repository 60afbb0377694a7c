"""Indexing ops: dynamic_slice, dynamic_update_slice (start indices are scalar operands,
clamped so the window stays in bounds, as in StableHLO), and gather / scatter in their
`take` form: along one axis with an integer index array (indices are clamped; scatter
adds its updates, so gather's VJP is scatter and scatter's is gather)."""
import numpy as np

from ..factors import einsum_rule, letters
from .elementwise import ALL, aval
from .names import BROADCAST_IN_DIM, CONSTANT, DYNAMIC_SLICE, DYNAMIC_UPDATE_SLICE, GATHER, SCATTER
from .registry import OpDef, Reindex, check, register

INTS = ("int32", "int64")


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
    z = g.emit(CONSTANT, value=np.zeros((), dtype))
    return g.emit(BROADCAST_IN_DIM, z, shape=shape, broadcast_dimensions=())


def _ds_vjp(g, op, ct):
    x, *starts = op.operands
    return (g.emit(DYNAMIC_UPDATE_SLICE, _zeros(g, x.shape, x.dtype), ct, *starts),) + (None,) * len(starts)


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


register(OpDef("dynamic_slice", family="indexing", infer=_ds_infer, ref=_ds_ref, vjp=_ds_vjp, factors=_ds_factors,
               flops=lambda ins, out, attrs: 0, dtypes=ALL, linear=((0,),), split_replicate="partial",
               fusion="reindex",
               lowering="pieces", lowers_complex=True,
               reindex=Reindex(index_pieces=_ds_pieces)))


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
    dx = g.emit(DYNAMIC_UPDATE_SLICE, ct, _zeros(g, u.shape, u.dtype), *starts)
    du = g.emit(DYNAMIC_SLICE, ct, *starts, slice_sizes=u.shape)
    return (dx, du) + (None,) * len(starts)


def _dus_factors(ins, outs, attrs):
    # a sliced dim may stay split on the operand and result alike: each device writes the
    # part of the window it holds (the update is whole on that dim)
    a, w, _ = _window_factors(ins[0], ins[1].shape)
    return einsum_rule(",".join([a, w] + [""] * (len(ins) - 2)) + "->" + a, ins, outs)


register(OpDef("dynamic_update_slice", family="indexing", infer=_dus_infer, ref=_dus_ref, vjp=_dus_vjp,
               factors=_dus_factors, flops=lambda ins, out, attrs: 0, dtypes=ALL, linear=((0, 1),),
               split_replicate="local", lowering="block_copy"))


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
    return g.emit(SCATTER, _zeros(g, x.shape, x.dtype), idx, ct, axis=op.attrs["axis"]), None


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


register(OpDef("gather", family="indexing", infer=_gather_infer, ref=_gather_ref, vjp=_gather_vjp,
               factors=_gather_factors, flops=lambda ins, out, attrs: 0, dtypes=ALL, linear=((0,),),
               split_replicate="partial", lowering="take_rows"))


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
    return ct, None, g.emit(GATHER, ct, idx, axis=op.attrs["axis"])


def _scatter_factors(ins, outs, attrs):
    ax = attrs["axis"]
    a, i, u = _take_letters(len(ins[0].shape), len(ins[1].shape), ax)
    # updates split along the index dims each add into the whole operand: a partial sum;
    # the indexed dim may stay split on operand and result: each device adds what lands in it
    return einsum_rule(f"{a},{i},{u}->{a}", ins, outs, reduction=i)


register(OpDef("scatter", family="indexing", infer=_scatter_infer, ref=_scatter_ref, vjp=_scatter_vjp,
               factors=_scatter_factors, flops=lambda ins, out, attrs: 0, dtypes=ALL, linear=((0, 2),),
               split_replicate="local", reduction_kind=lambda attrs: "sum", accumulates_into=0,
               lowering="add_rows"))
