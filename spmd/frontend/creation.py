"""Array creation that works inside spmd.jit: `import spmd.numpy as snp`.

numpy's creation functions (np.zeros, np.arange, ...) take no array argument, so numpy
never hands them to spmd: inside a traced function they make plain numpy arrays. That
is fine for constants, but a plain array cannot hold a traced value, so a preallocated
buffer filled in a loop (`buf = np.zeros((n, d)); buf[i] = f(x[i])`) needs a traced
buffer. These functions make one while tracing (a broadcast constant or an iota, which
propagation can shard; writes into it work as in numpy) and are numpy's own outside.
`np.zeros_like(x, shape=...)` works too.
"""
from __future__ import annotations

import builtins

import numpy as np

from ..ir.ops.names import IOTA
from . import core
from . import elementwise as ew
from .functionalize import new_array
from .trace import Tracer, current_trace


def _shape(shape):
    return (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(s) for s in shape)


def full(shape, fill_value, dtype=None):
    t = current_trace()
    if t is None and not isinstance(fill_value, Tracer):
        return np.full(shape, fill_value, dtype)
    shape = _shape(shape)
    if dtype is not None:
        core.check_int_fits(fill_value, dtype)
    if isinstance(fill_value, Tracer):
        v = core.astype(fill_value, dtype or fill_value.dtype)
    else:
        v = core.asarray(np.array(fill_value, dtype=dtype if dtype is not None else None), t=t)
    return new_array(core.broadcast_to(v, shape))


def zeros(shape, dtype=float):
    return full(shape, 0, dtype)


def ones(shape, dtype=float):
    return full(shape, 1, dtype)


def empty(shape, dtype=float):
    return full(shape, 0, dtype)


def zeros_like(a, dtype=None, shape=None):
    return np.zeros_like(a, dtype=dtype, shape=shape)


def ones_like(a, dtype=None, shape=None):
    return np.ones_like(a, dtype=dtype, shape=shape)


def empty_like(a, dtype=None, shape=None):
    return np.zeros_like(a, dtype=dtype, shape=shape)


def full_like(a, fill_value, dtype=None, shape=None):
    return np.full_like(a, fill_value, dtype=dtype, shape=shape)


def _iota(t, n, dtype):
    return Tracer(t.emit(IOTA, shape=(n,), dtype=dtype, dimension=0), t)


def arange(start, stop=None, step=1, dtype=None):
    t = current_trace()
    if t is None:
        return np.arange(start, stop, step, dtype=dtype)
    lo, hi = (0, start) if stop is None else (start, stop)
    n = builtins.max(int(np.ceil((hi - lo) / step)), 0)
    kind = np.arange(lo, lo + step, step, dtype=dtype).dtype          # numpy's dtype rule
    dt = kind.name
    if kind.kind in "iu":
        r = ew.add(ew.multiply(_iota(t, n, "int64"), int(step)), int(lo))
    else:
        r = ew.add(ew.multiply(_iota(t, n, "float64"), float(step)), float(lo))
    return new_array(core.astype(r, dt))


def linspace(start, stop, num=50, endpoint=True, dtype=None):
    t = current_trace()
    if t is None:
        return np.linspace(start, stop, num, endpoint=endpoint, dtype=dtype)
    div = (num - 1) if endpoint else num
    step = (stop - start) / div if div > 0 else 0.0
    r = ew.add(ew.multiply(_iota(t, num, "float64"), float(step)), float(start))
    if endpoint and num > 1:
        r = ew.where(ew.equal(_iota(t, num, "int64"), num - 1), float(stop), r)
    return new_array(core.astype(r, dtype or "float64"))


def eye(N, M=None, k=0, dtype=float):
    t = current_trace()
    if t is None:
        return np.eye(N, M, k, dtype=dtype)
    M = N if M is None else M
    i = Tracer(t.emit(IOTA, shape=(N, M), dtype="int64", dimension=0), t)
    j = Tracer(t.emit(IOTA, shape=(N, M), dtype="int64", dimension=1), t)
    return new_array(core.astype(ew.equal(ew.add(i, k), j), dtype))


def identity(n, dtype=float):
    return eye(n, dtype=dtype)


def array(obj, dtype=None, copy=True):
    if current_trace() is None:
        return np.array(obj, dtype=dtype, copy=copy)
    return new_array(core.asarray(obj, dtype, t=current_trace()))


def asarray(obj, dtype=None):
    if current_trace() is None:
        return np.asarray(obj, dtype=dtype)
    return core.asarray(obj, dtype, t=current_trace())


__all__ = ["zeros", "ones", "empty", "full", "zeros_like", "ones_like", "empty_like", "full_like",
           "arange", "linspace", "eye", "identity", "array", "asarray"]
