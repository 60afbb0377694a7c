"""The one way spmd says it gathers a split dim the user did not ask to gather.

Some ops cannot run on a split dim (sort along it, a matrix factorization, an FFT axis
its pencils cannot move): the partitioner gathers that dim whole on every device. That
is a plan, never a silent one: each such gather warns once per user line, with a
ReshardWarning naming the line, the op, the array and the bytes each device receives.
Gathers the user wrote (spmd.shard to a replicated sharding, out_shardings, .numpy())
and the collectives the cost model picks among ways to split an op that can run split
do not warn.

Where the gather lands is not always at the op: propagation keeps a split out of the
values an op needs whole, so the gather may happen where the split meets them (a
transpose before a sort, the result of a matmul split by rows before an SVD).
`whole_dims_gathered` walks back from the op through the ops that pass a split through
(elementwise, transpose, reshape) or carry it (a contraction's or a reduction's kept dims)
to the value that was split,
so the warning names the op that needed the gather and the array it gathers.
"""
from __future__ import annotations

import numpy as np

from ..errors import warn_at
from ..ir.mesh import Sharding
from .reshard import ReshardWarning

MAX_WALK = 32          # ops walked back from an op to find where its data was split


def received_bytes(shape, dtype, have: Sharding, dims) -> int:
    """Bytes each device receives to hold `dims` of a value of `shape` whole (from `have`)."""
    k = 1
    for d in dims:
        k *= have.mesh.axes_size(have.dim_axes(d)) if have.dim_axes(d) else 1
    whole = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
    return whole - whole // max(k, 1)


def warn_gather(what: str, v, have: Sharding, why: str, loc, dims=None, nbytes=None):
    """Warn (ReshardWarning, from the user's line `loc`) that `what` (the op and its line)
    gathers the split `dims` of global value v (laid out by `have`; all its split dims if
    None) whole on every device, and why. nbytes: what each device receives, where the
    gathered value is not v (one computed from it, split alike)."""
    if dims is None:
        dims = [d for d in range(v.ndim) if have.dim_axes(d)]
    if nbytes is None:
        nbytes = received_bytes(v.shape, v.dtype, have, dims)
    warn_at(f"spmd: {what} gathers dim{'s' if len(dims) != 1 else ''} {', '.join(map(str, dims))} of "
            f"{v.dtype}{list(v.shape)} (split as {have.text()}) whole on every device, {nbytes} bytes "
            f"received by each: {why}", ReshardWarning, loc)


def _factor_dims(fmap, factors):
    return [d for d, fs in enumerate(fmap) if set(fs) & factors]


def whole_dims_gathered(op, operand: int, dims, annotated=()):
    """For operand `operand` of op, whose `dims` op needs whole and which propagation left
    unsplit: the value upstream (through pass-through ops) whose matching dims are split,
    as (value, its split dims), or None. The gather of those dims is op's doing, unless
    the user annotated a value on the way (spmd.shard to replicated: a gather they asked
    for)."""
    v, ds = op.operands[operand], set(dims)
    for _ in range(MAX_WALK):
        if not ds:
            return None
        sh = v.sharding
        if sh is not None:
            split = [d for d in ds if sh.for_rank(v.ndim).dim_axes(d)]
            if split:
                return v, sorted(split)
        if v in annotated:      # the user pinned it whole there: a gather they asked for
            return None
        p = v.producer
        if p is None or len(p.results) != 1 or p.opdef.priority > 1 or p.opdef.factors is None:
            return None
        try:
            r = p.opdef.factors([o.aval for o in p.operands], [p.result.aval], p.attrs)
        except Exception:       # a rule that does not apply here: nothing to follow
            return None
        factors = {f for d in ds for f in r.results[0][d]}
        nxt = None
        for i, fmap in enumerate(r.operands):
            od = _factor_dims(fmap, factors)
            if od and p.operands[i].ndim and (nxt is None or p.operands[i].size > nxt[0].size):
                nxt = (p.operands[i], set(od))
        if nxt is None:
            return None
        v, ds = nxt
    return None


__all__ = ["warn_gather", "whole_dims_gathered", "received_bytes", "ReshardWarning"]
