"""Partition rule of the fft op (ir/ops/fft.py): the pencil decomposition. Transformed
dims that are whole on a device are transformed locally; a transformed dim that arrives
split is made whole by an all_to_all that moves its split to a dim the transform does not
need now (a batch dim, or one already transformed), never by gathering the array. Only
an array whose every dim still needs transforming and has no other dim to hold the
split is gathered, with a ReshardWarning naming the user's line."""
from __future__ import annotations

from ...ir import Op
from ...ir.ops.names import FFT
from .partition_context import PartitionContext


def _ready(kind, last, pending, whole):
    """The pending dims one local transform can do now. rfft transforms its real axis
    first (the others are c2c on its complex result), irfft its real axis last."""
    if kind == "rfft" and last in pending:
        return whole if last in whole else []
    if kind == "irfft" and last in pending and len(whole) < len(pending):
        return [d for d in whole if d != last]
    return whole


def _next_split(kind, last, pending, spec):
    """The split dim the transform needs whole next."""
    if kind == "rfft" and last in pending:
        return last
    if kind == "irfft":
        return next((d for d in pending if spec[d] and d != last), last)
    return next(d for d in pending if spec[d])


def _stage(ctx, x, kind, axes, n, norm, done_now, shape):
    """Emit one local transform over `done_now` (whole on every device); returns the
    local value and the new global shape."""
    last = axes[-1]
    dims = [d for d in axes if d in done_now]
    shape = list(shape)
    if kind == "rfft" and last in dims:
        sub_kind = "rfft"
        shape[last] = n // 2 + 1
    elif kind == "irfft" and last in dims:
        sub_kind = "irfft"
        shape[last] = n
    else:
        sub_kind = "ifft" if kind == "irfft" else ("fft" if kind == "rfft" else kind)
    sub_n = n if sub_kind in ("rfft", "irfft") else shape[dims[-1]]
    return ctx.em.emit(FFT, x, kind=sub_kind, axes=tuple(dims), n=sub_n, norm=norm), shape


def _fft(ctx: PartitionContext, op: Op):
    xv = op.operands[0]
    kind, axes, n, norm = (op.attrs[k] for k in ("kind", "axes", "n", "norm"))
    lv, have = ctx.env[xv]
    if have.partial:                   # settle a pending sum first
        lv = ctx.reshard(lv, have, have.replace(partial=()), xv.shape)
    spec = [tuple(have.dim_axes(d)) for d in range(xv.ndim)]
    shape = list(xv.shape)
    pending = list(axes)
    while pending:
        ready = _ready(kind, axes[-1], pending, [d for d in pending if not spec[d]])
        if ready:
            lv, shape = _stage(ctx, lv, kind, axes, n, norm, ready, shape)
            pending = [d for d in pending if d not in ready]
            continue
        # the next dim to transform is split: move its split to a dim not needed now
        need = _next_split(kind, axes[-1], pending, spec)
        k = ctx.axes_size(spec[need])
        cands = [d for d in range(len(shape)) if d != need]

        def rank(d):
            # unsplit first, long enough to hold the split, then a batch dim, then one
            # already transformed, then one still to do; evenly split, then the longest
            g = k * ctx.axes_size(spec[d])
            role = 0 if d not in axes else (1 if d not in pending else 2)
            return (bool(spec[d]), shape[d] < g, role, shape[d] % g != 0, -shape[d])
        cands.sort(key=rank)
        old = ctx.sh(spec)
        new = list(spec)
        if cands:
            t = cands[0]
            new[t], new[need] = spec[t] + spec[need], ()
        else:
            ctx.warn_gathered(xv, have, "the FFT needs the whole axis and no other dim can hold the split; "
                              "split another (batch) dim to keep it local", dims=[need])
            new[need] = ()
        lv = ctx.reshard(lv, old, ctx.sh(new), tuple(shape))
        spec = new
    return lv, ctx.sh(spec)


# op name -> the rule for the whole op
OPS = {
    "fft": _fft,
}
