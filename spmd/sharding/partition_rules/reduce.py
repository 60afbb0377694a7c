"""Partition rule of the cumulative op (ir/ops/reduce.py): a scan along a split axis
without gathering it."""
from __future__ import annotations

from ...ir import Op
from ...ir.ops.names import ADD, BROADCAST_IN_DIM, CUMULATIVE, MAXIMUM, MINIMUM, MULTIPLY
from ...ir.ops.reduce import identity
from ...ir.ops.registry import zero_of
from .partition_context import PartitionContext

# the elementwise op that combines two partial results of a cumulative reduction of a kind
_COMBINE = {"sum": ADD, "prod": MULTIPLY, "max": MAXIMUM, "min": MINIMUM}


def _cumulative(ctx: PartitionContext, op: Op):
    """A scan along a split axis, never gathering it: each device scans its shard, the
    shards' totals are all-gathered (one value per shard and row), and each device
    combines its scan with the exclusive scan of the totals before it."""
    res, xv = op.result, op.operands[0]
    kind, ax, rev = op.attrs["kind"], op.attrs["axis"], op.attrs["reverse"]
    target = ctx.sharding_of(res)
    spec = [target.dim_axes(d) for d in range(res.ndim)]
    partial = ctx.carry_all(op, spec) if kind == "sum" else ()
    x = ctx.get(xv, ctx.sh(spec, partial))
    em = ctx.em
    axes = spec[ax]
    if not axes or xv.shape[ax] == 0:
        y = em.emit(CUMULATIVE, x, **op.attrs)
        return ctx.finish(y, ctx.sh(spec, partial), target, res.shape, res.dtype)
    k, c = ctx.axes_size(axes), x.shape[ax]
    # the combining identity: for a float sum -0.0, the one zero that leaves every value (a
    # scan of -0.0s is -0.0s in numpy; adding a +0.0 offset would make them +0.0)
    ident = zero_of(res.dtype) if kind == "sum" else identity(kind, res.dtype)
    # padding at the end of the last shard must not reach a reversed scan
    x = em.mask_dim(x, ax, axes, xv.shape[ax], ident)
    y = em.emit(CUMULATIVE, x, **op.attrs)
    total = em.slice_dim(y, ax, 0, 1) if rev else em.slice_dim(y, ax, c - 1, c)
    whole = list(spec)
    whole[ax] = ()
    tshape = tuple(k if d == ax else n for d, n in enumerate(res.shape))
    totals = ctx.reshard(total, ctx.sh(spec, partial), ctx.sh(whole, partial), tshape)   # all_gather
    incl = em.emit(CUMULATIVE, totals, kind=kind, axis=ax, reverse=rev)
    excl = em.slice_dim(em.pad_dim(incl, ax, 0, 1, ident), ax, 1, k + 1) if rev else \
        em.slice_dim(em.pad_dim(incl, ax, 1, 0, ident), ax, 0, k)
    mine = em.dynamic_slice_dim(excl, ax, em.affine(axes, 1, 0), 1)
    mine = em.emit(BROADCAST_IN_DIM, mine, shape=y.shape, broadcast_dimensions=tuple(range(y.ndim)))
    out = em.emit(_COMBINE[kind], y, mine)
    return ctx.finish(out, ctx.sh(spec, partial), target, res.shape, res.dtype)


# op name -> the rule for the whole op
OPS = {
    "cumulative": _cumulative,
}
