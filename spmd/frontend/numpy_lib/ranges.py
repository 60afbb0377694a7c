"""np.linspace, np.logspace and np.geomspace with traced start / stop (num static): numpy's
own arithmetic, step by step, so the values are numpy's to the bit."""
from __future__ import annotations

import operator

import numpy as np

from ...errors import user_loc
from .. import core, indexing, shapes
from .. import elementwise as ew
from .. import reductions as red
from . import math_funcs as MF


def _float_dtype(*xs):
    """numpy's result_type(start, stop) made inexact (ints and bools give float64)."""
    dt = np.dtype(core.result_dtype(*xs))
    return dt if dt.kind in "fc" else np.dtype(np.float64)


def _num(num, name):
    num = operator.index(num)
    if num < 0:
        raise ValueError(f"Number of samples, {num}, must be non-negative (np.{name} at {user_loc()})")
    return num


def _last_along0(y, value):
    """y with y[-1, ...] = value (numpy's `y[-1, ...] = stop`)."""
    head = indexing.getitem(y, slice(None, -1))
    return shapes.concatenate([head, shapes.reshape(core.astype(value, y.dtype), (1,) + y.shape[1:])], 0)


def linspace(start, stop, num=50, endpoint=True, retstep=False, dtype=None, axis=0, *, device=None):
    num = _num(num, "linspace")
    if device not in (None, "cpu"):
        raise ValueError(f"np.linspace: device={device!r} is not supported (at {user_loc()})")
    t = core.trace_of(start, stop)
    dt = _float_dtype(start, stop)
    start, stop = core.asarray(start, t=t), core.asarray(stop, t=t)
    div = (num - 1) if endpoint else num
    delta = ew.subtract(core.astype(stop, dt.name), core.astype(start, dt.name))
    nd = delta.ndim
    y = core.asarray(np.arange(0, num, dtype=dt).reshape((-1,) + (1,) * nd), t=t)
    if div > 0:
        step = ew.true_divide(delta, dt.type(div))
        # numpy divides first where a step is zero (denormal deltas, gh-5437): for an array
        # delta, when any of its steps is
        zero = red.any(ew.equal(step, dt.type(0)))
        y = ew.where(zero, ew.multiply(ew.true_divide(y, dt.type(div)), delta), ew.multiply(y, step))
    else:
        step = np.nan             # numpy's undefined step is a Python float
        y = ew.multiply(y, delta)
    y = ew.add(y, start)
    if endpoint and num > 1:
        y = _last_along0(y, core.broadcast_to(core.astype(stop, y.dtype), y.shape[1:]))
    if axis != 0:
        y = shapes.moveaxis(y, 0, axis)
    if dtype is not None:
        if np.issubdtype(dtype, np.integer):
            y = ew.floor(y)
        y = core.astype(y, np.dtype(dtype).name)
    return (y, step) if retstep else y


def logspace(start, stop, num=50, endpoint=True, base=10.0, dtype=None, axis=0):
    t = core.trace_of(start, stop, base)
    start, stop, base = (core.asarray(a, t=t) for a in (start, stop, base))
    nd = max(start.ndim, stop.ndim, base.ndim)
    start, stop, base = (shapes.reshape(a, (1,) * (nd - a.ndim) + a.shape) for a in (start, stop, base))
    base = shapes.expand_dims(base, axis)
    y = linspace(start, stop, num=num, endpoint=endpoint, axis=axis)
    r = ew.power(base, y)
    return r if dtype is None else core.astype(r, np.dtype(dtype).name)


def geomspace(start, stop, num=50, endpoint=True, dtype=None, axis=0):
    """np.geomspace. numpy raises ValueError when start or stop is zero; a traced value
    cannot raise, so there the whole result is NaN (never a plausible sequence)."""
    num = _num(num, "geomspace")
    t = core.trace_of(start, stop)
    start, stop = core.asarray(start, t=t), core.asarray(stop, t=t)
    dt = np.result_type(np.dtype(start.dtype), np.dtype(stop.dtype), float(num),
                        np.zeros((), dtype if dtype is not None else np.float64))
    if dt.kind == "c":
        raise NotImplementedError(f"np.geomspace of complex values under spmd.jit (at {user_loc()}): start, stop "
                                  f"and dtype={dt.name} make a complex sequence, which spmd.jit does not trace")
    start, stop = core.astype(start, dt.name), core.astype(stop, dt.name)
    has_zero = ew.logical_or(red.any(ew.equal(start, dt.type(0))), red.any(ew.equal(stop, dt.type(0))))
    out_sign = ew.sign(start)
    start = ew.true_divide(start, out_sign)
    stop = ew.true_divide(stop, out_sign)
    result = logspace(MF.log10(start), MF.log10(stop), num=num, endpoint=endpoint, base=10.0, dtype=dt)
    if num > 0:
        rows = [shapes.expand_dims(core.broadcast_to(start, result.shape[1:]), 0)]
        middle = indexing.getitem(result, slice(1, -1) if (num > 1 and endpoint) else slice(1, None))
        rows.append(middle)
        if num > 1 and endpoint:
            rows.append(shapes.expand_dims(core.broadcast_to(stop, result.shape[1:]), 0))
        result = shapes.concatenate(rows, 0)
    result = ew.multiply(result, out_sign)
    result = ew.where(has_zero, dt.type(np.nan), result)
    if axis != 0:
        result = shapes.moveaxis(result, 0, axis)
    return core.astype(result, np.dtype(dtype).name if dtype is not None else dt.name)


__all__ = ["linspace", "logspace", "geomspace"]
