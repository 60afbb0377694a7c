"""numpy's running and segment reductions composed from traced ops: np.nancumsum /
nancumprod, np.ediff1d, np.trapezoid, ufunc.reduceat with static indices, and
ufunc.reduce for the logical and bitwise ufuncs (a halving tree of the elementwise op)."""
from __future__ import annotations

import builtins

import numpy as np

from ...errors import user_loc
from .. import core, indexing, shapes
from .. import elementwise as ew
from .. import reductions as red
from ..trace import Tracer
from . import math_funcs as MF
from .shape_funcs import diff


def _nan_filled(a, fill):
    x = core.asarray(a)
    return ew.where(MF.isnan(x), x.dtype.type(fill), x) if x.dtype.kind in "fc" else x


@core.takes_out
def nancumsum(a, axis=None, dtype=None, out=None):
    """np.nancumsum: np.cumsum with NaN counted as zero."""
    return red.cumsum(_nan_filled(a, 0), axis=axis, dtype=dtype, out=out)


@core.takes_out
def nancumprod(a, axis=None, dtype=None, out=None):
    """np.nancumprod: np.cumprod with NaN counted as one."""
    return red.cumprod(_nan_filled(a, 1), axis=axis, dtype=dtype, out=out)


def ediff1d(ary, to_end=None, to_begin=None):
    """np.ediff1d: the differences of the flattened array, to_begin before and to_end after,
    all in ary's dtype (numpy refuses ends that do not cast to it by same_kind)."""
    x = shapes.reshape(core.asarray(ary), (-1,))
    d = ew.subtract(indexing.getitem(x, slice(1, None)), indexing.getitem(x, slice(None, -1)))
    parts = []
    for name, v in (("to_begin", to_begin), ("to_end", to_end)):
        if v is None:
            parts.append(None)
            continue
        v = core.asarray(v, t=x._tr)
        if not np.can_cast(np.dtype(v.dtype), np.dtype(x.dtype), "same_kind"):
            raise TypeError(f"dtype of `{name}` must be compatible with input `ary` under the `same_kind` "
                            f"rule (numpy raises the same TypeError; np.ediff1d at {user_loc()})")
        parts.append(shapes.reshape(core.astype(v, x.dtype.name), (-1,)))
    if parts[0] is None and parts[1] is None:
        return d
    return shapes.concatenate([p for p in (parts[0], core.astype(d, x.dtype.name), parts[1]) if p is not None], 0)


def trapezoid(y, x=None, dx=1.0, axis=-1):
    """np.trapezoid: the trapezoidal rule along axis, sample points x or spacing dx."""
    y = core.asarray(y)
    axis = core.normalize_axis(axis, y.ndim, "trapezoid")
    if x is None:
        d = dx
    else:
        x = core.asarray(x, t=y._tr)
        if x.ndim == 1:
            d = diff(x)
            shape = [1] * y.ndim
            shape[axis] = d.shape[0]
            d = shapes.reshape(d, tuple(shape))
        else:
            d = diff(x, axis=axis)
    hi = [slice(None)] * y.ndim
    lo = [slice(None)] * y.ndim
    hi[axis], lo[axis] = slice(1, None), slice(None, -1)
    pair = ew.add(indexing.getitem(y, tuple(hi)), indexing.getitem(y, tuple(lo)))
    return red.sum(ew.true_divide(ew.multiply(d, pair), 2.0), axis=axis)


# ------------------------------------------------------------------------- ufunc.reduceat
REDUCEAT = {"add": red.sum, "multiply": red.prod, "maximum": red.max, "minimum": red.min}
MAX_SEGMENTS = 1024


def reduceat(name, x, indices, axis=0, dtype=None):
    """np.<ufunc>.reduceat with indices known at trace time: for each i, the reduction of
    x[indices[i]:indices[i+1]] along axis where the indices increase, else x[indices[i]]
    (numpy's rule); the last runs to the end."""
    if name not in REDUCEAT:
        raise NotImplementedError(f"np.{name}.reduceat under spmd.jit (at {user_loc()}); supported: "
                                  f"{', '.join(sorted(REDUCEAT))}")
    if isinstance(indices, Tracer):
        raise NotImplementedError(f"np.{name}.reduceat with traced indices under spmd.jit (at {user_loc()}): "
                                  f"the indices must be known when tracing (a list or numpy array)")
    x = core.asarray(x)
    if x.ndim == 0:
        raise TypeError(f"np.{name}.reduceat: cannot reduce a 0-d array (at {user_loc()})")
    axis = core.normalize_axis(axis, x.ndim, f"{name}.reduceat")
    idx = np.asarray(indices)
    if idx.ndim != 1 or (idx.size and idx.dtype.kind not in "iu"):
        raise TypeError(f"np.{name}.reduceat: indices must be a 1-d sequence of integers (at {user_loc()})")
    n = x.shape[axis]
    for i in idx:
        if not 0 <= i < n:
            raise IndexError(f"index {i} out-of-bounds in {name}.reduceat [0, {n}) (at {user_loc()})")
    if idx.size > MAX_SEGMENTS:
        raise NotImplementedError(f"np.{name}.reduceat with {idx.size} indices under spmd.jit (at {user_loc()}): "
                                  f"each segment is its own reduction; at most {MAX_SEGMENTS} are traced")
    reduce_ = REDUCEAT[name]
    if dtype is not None:
        out_dtype = np.dtype(dtype).name
    else:
        out_dtype = red.sum_dtype(x) if name in ("add", "multiply") else x.dtype.name
    pieces = []
    for k, lo in enumerate(idx):
        hi = int(idx[k + 1]) if k + 1 < idx.size else n
        key = (slice(None),) * axis + (slice(int(lo), builtins.max(hi, int(lo) + 1)),)
        part = indexing.getitem(x, key)
        if hi > lo + 1:
            kw = {"dtype": dtype} if name in ("add", "multiply") else {}
            part = reduce_(part, axis=axis, keepdims=True, **kw)
        pieces.append(core.astype(part, out_dtype))
    if not pieces:
        return core.asarray(np.zeros(x.shape[:axis] + (0,) + x.shape[axis + 1:], out_dtype), t=x._tr)
    return shapes.concatenate(pieces, axis)


# ------------------------------------------------------------------------- ufunc.reduce
def _identity(name, dtype):
    if name in ("logical_and",):
        return True
    if name == "bitwise_and":
        return True if dtype == np.bool_ else np.dtype(dtype).type(-1)
    return False if dtype == np.bool_ or name == "logical_xor" else np.dtype(dtype).type(0)


_PAIRWISE = {"logical_xor": ew.logical_xor, "bitwise_and": ew.bitwise_and, "bitwise_or": ew.bitwise_or,
             "bitwise_xor": ew.bitwise_xor}
FOLDED = ("logical_and", "logical_or") + tuple(_PAIRWISE)


def fold_reduce(name, x, axis=0, dtype=None, keepdims=False, initial=None, where=True):
    """np.<name>.reduce for the logical and bitwise ufuncs: logical_and / logical_or as
    np.all / np.any, the others as a tree of the pairwise op over the reduced elements
    (halving each step), elements masked out by where= counting as the identity."""
    if dtype is not None:
        raise NotImplementedError(f"np.{name}.reduce with dtype= under spmd.jit (at {user_loc()})")
    x = core.asarray(x)
    if name in ("logical_and", "logical_or", "logical_xor"):
        x = ew.not_equal(x, False if x.dtype == np.bool_ else x.dtype.type(0))
    elif x.dtype.kind not in "biu":
        raise TypeError(f"ufunc '{name}' not supported for the input types (numpy raises the same TypeError; "
                        f"np.{name}.reduce at {user_loc()})")
    axes = core.normalize_axes(axis, x.ndim, f"{name}.reduce")
    ident = _identity(name, x.dtype)
    if where is not True and where is not None:
        x = ew.where(where, x, ident)
    if name in ("logical_and", "logical_or"):
        r = (red.all if name == "logical_and" else red.any)(x, axis=axes, keepdims=keepdims)
    else:
        kept = [d for d in range(x.ndim) if d not in axes]
        y = shapes.transpose(x, kept + list(axes))
        m = int(np.prod([x.shape[d] for d in axes], dtype=np.int64))
        y = shapes.reshape(y, tuple(x.shape[d] for d in kept) + (m,))
        r = _tree(_PAIRWISE[name], y, ident)
        if keepdims:
            r = shapes.reshape(r, tuple(1 if d in axes else s for d, s in enumerate(x.shape)))
    if initial is not None:
        r = (ew.logical_and if name == "logical_and" else ew.logical_or if name == "logical_or"
             else _PAIRWISE[name])(r, core.asarray(initial, r.dtype.name, r._tr))
    return r


def _tree(op, y, ident):
    """op over y's last dim (any length, empty included): pad to a power of two with the
    identity, then combine the halves until one element is left."""
    m = y.shape[-1]
    size = 1
    while size < m:
        size *= 2
    if size != m:
        pad = core.asarray(np.full(y.shape[:-1] + (size - m,), ident, y.dtype), t=y._tr)
        y = shapes.concatenate([y, pad], -1)
    lead = (slice(None),) * (y.ndim - 1)
    while size > 1:
        size //= 2
        y = op(indexing.getitem(y, lead + (slice(0, size),)), indexing.getitem(y, lead + (slice(size, None),)))
    return shapes.reshape(y, y.shape[:-1])


__all__ = ["nancumsum", "nancumprod", "ediff1d", "trapezoid", "reduceat", "REDUCEAT", "fold_reduce", "FOLDED"]
