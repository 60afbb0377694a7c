"""Partition rule of order_statistic (ir/ops/select.py: what median, percentile and
quantile pick): a distributed selection along a split axis, never gathering the axis.

Each search (a row and a rank) narrows a bracket of values that holds its element, with
exact counts summed over the group each round; only small things cross the wire:

0. the group's non-NaN count per row (an all_reduce), the searches' first state;
1. a guess: a regular sample of every shard (all_gather, ~SAMPLE elements a row and
   device), two candidates around each target; the group counts the elements below and
   at most each (all_reduce), and the bracket becomes the part that holds the target;
   Each device then keeps its elements in that bracket, sorted, when they are as few
   as a good guess leaves (keep_cap): the later rounds read them, not its shard;
2. rounds that cannot fail: each device offers QUANTILES of its bracketed elements at
   even sorted places (its least and greatest among them); between two neighbouring
   offers of the group a device holds fewer than 1/(QUANTILES-1) of its bracketed
   elements, so after enough rounds (fixed by the shard's length) at most CAP remain;
3. those few are all-gathered and the sought one picked.

The element found is one of x's, exactly: the interpolation numpy does after is the
front end's. NaN sorts last (a rank past the row's non-NaN elements gives NaN); the
padding of an uneven split is NaN. A split axis of integers or bools is gathered (with a
ReshardWarning): the front end hands float rows to every interpolating method.
"""
from __future__ import annotations

import numpy as np

from ...ir import Op
from ...ir.ops.names import ALL_GATHER, ALL_REDUCE, ORDER_STATISTIC, SELECT_STEP, SORT
from .partition_context import PartitionContext

SAMPLE = 2048         # sample elements a shard row offers to the guess
SPREAD = 4            # the guess's candidates: this many standard deviations either side of the target
QUANTILES = 257       # offers per device and search in a round that cannot fail
CAP = 16              # bracketed elements per device and search left for the last gather


def rounds_and_cap(m: int) -> tuple:
    """(rounds, cap): the rounds after which a device holds at most `cap` bracketed
    elements of a search, from at most m (its shard's length)."""
    t = QUANTILES - 1
    bound, rounds = m, 0
    while bound > CAP:
        # strictly between two neighbouring offers of this device: ceil((c-1)/t) - 1 at most
        bound = max(-(-(bound - 1) // t) - 1, 0)
        rounds += 1
    return rounds, max(bound, 1)


def keep_cap(m: int, group: int, dtype) -> int:
    """How many bracketed elements a device keeps sorted after the guess: a few times
    what a guess leaves (its candidates SPREAD standard deviations of a binomial either
    side of the target, in a sample of group * min(m, SAMPLE)). The count is kept in x's
    dtype: only float32 and float64 hold it exactly (others keep none)."""
    if np.dtype(dtype) not in (np.float32, np.float64):
        return 0
    s = group * min(m, SAMPLE)
    share = (2 * SPREAD * 0.5 * np.sqrt(s) + 6) / s       # the bracket's share of the row, at most
    return int(min(m, max(256, 3 * share * m)))


def _order_statistic(ctx: PartitionContext, op: Op):
    res = op.result
    xv, rv = op.operands
    nd = xv.ndim
    target = ctx.sharding_of(res)
    rows = [target.dim_axes(d) for d in range(nd - 1)]
    used = {a for ax in rows for a in ax}
    last = tuple(a for a in ctx.env[xv][1].dim_axes(nd - 1) if a not in used)
    if last and (np.dtype(xv.dtype).kind != "f" or xv.shape[-1] == 0):
        ctx.warn_gathered(xv, ctx.env[xv][1], f"a selection along a split axis of {xv.dtype} "
                          f"gathers it (the distributed one is for floats)")
        last = ()
    x = ctx.get(xv, ctx.sh(rows + [last]))
    ranks = ctx.get(rv, ctx.sh(rows + [()]))
    out_sh = ctx.sh(rows + [()])
    em = ctx.em
    if not last:
        return ctx.finish(em.emit(ORDER_STATISTIC, x, ranks), out_sh, target, res.shape, res.dtype)

    group = dict(axes=last, group_size=ctx.axes_size(last))
    m, n = x.shape[-1], xv.shape[-1]

    def step(stage, *operands, **attrs):
        return em.emit(SELECT_STEP, *operands, stage=stage, **attrs)

    def total(v):
        return em.emit(ALL_REDUCE, v, reduction="sum", **group)

    def offers(v):
        return em.emit(ALL_GATHER, v, dimension=v.ndim - 1, **group)

    x = step("rows", em.mask_dim(x, nd - 1, last, n, np.nan))
    nvalid = total(step("nvalid", x))
    st = step("init", ranks, nvalid, n=n)
    # 1. a guess from a sample
    sample = offers(step("sample", x, size=min(m, SAMPLE)))
    cands = step("guess", st, sample, nvalid, spread=SPREAD)
    st = step("narrow", st, cands, total(step("counts", x, st, cands)))
    # the bracket the guess left, sorted, where it is as small as a good guess leaves it:
    # the later rounds read that, not x
    kept = step("keep", x, st, cap=keep_cap(m, ctx.axes_size(last), xv.dtype))
    # 2. rounds that cannot fail
    rounds, cap = rounds_and_cap(m)
    for _ in range(rounds):
        cands = em.emit(SORT, offers(step("quantiles", st, x, kept, count=QUANTILES)), axis=nd)
        st = step("narrow", st, cands, total(step("counts", x, st, cands, kept)))
    # 3. the few left
    out = step("finish", st, offers(step("bracket", x, st, kept, cap=cap)))
    return ctx.finish(out, out_sh, target, res.shape, res.dtype)


# op name -> the rule for the whole op
OPS = {
    "order_statistic": _order_statistic,
}
