"""numpy's shape functions on Tracers: reshape, transpose and their relatives, joining
(concatenate, stack), tile and take. The plain functions compute values; the view_*
forms are what numpy users call (np.reshape, x.T, np.ravel, ...): their result is a view
of the argument where numpy's is, so a write through it reaches the argument
(functionalize.py)."""
from __future__ import annotations

import builtins

import numpy as np

from ..errors import ShapeError, user_loc
from ..ir import dtypes
from ..ir.ops.names import CONCATENATE, GATHER, RESHAPE, TRANSPOSE
from . import core
from . import elementwise as ew
from . import functionalize as fz
from . import index_bounds
from . import views
from .trace import Hint, Tracer


def reshape(x, shape, order="C"):
    if order != "C":
        raise NotImplementedError(f"reshape with order={order!r} (at {user_loc()})")
    x = core.asarray(x)
    if isinstance(shape, (int, np.integer)):
        shape = (shape,)
    shape = [int(s) for s in shape]
    if shape.count(-1) > 1:
        raise ShapeError(f"reshape at {user_loc()}: only one dimension can be -1, got {shape}")
    if -1 in shape:
        known = int(np.prod([s for s in shape if s != -1], dtype=np.int64))
        if known == 0 or x.size % known:
            raise ShapeError(f"cannot reshape {list(x.shape)} into {shape} (at {user_loc()})")
        shape[shape.index(-1)] = x.size // known
    shape = tuple(shape)
    return x if shape == x.shape else core.emit(x._tr, RESHAPE, x, shape=shape)


def transpose(x, axes=None):
    x = core.asarray(x)
    if axes is not None and len(axes) != x.ndim:
        raise ShapeError(f"transpose at {user_loc()}: axes {list(axes)} do not match the {x.ndim} dims "
                         f"of {list(x.shape)}")
    if axes is None:
        perm = tuple(reversed(range(x.ndim)))
    else:
        perm = tuple(core.normalize_axis(a, x.ndim, "transpose") for a in axes)
    if sorted(perm) != list(range(x.ndim)):
        raise ShapeError(f"axes {axes} do not permute the {x.ndim} dims of {list(x.shape)} (at {user_loc()})")
    return x if perm == tuple(range(x.ndim)) else core.emit(x._tr, TRANSPOSE, x, permutation=perm)


def swapaxes(x, a, b):
    x = core.asarray(x)
    p = list(range(x.ndim))
    a, b = core.normalize_axis(a, x.ndim, "swapaxes"), core.normalize_axis(b, x.ndim, "swapaxes")
    p[a], p[b] = p[b], p[a]
    return transpose(x, p)


def moveaxis(x, source, destination):
    x = core.asarray(x)
    src = [core.normalize_axis(s, x.ndim, "moveaxis") for s in np.atleast_1d(source)]
    dst = [core.normalize_axis(d, x.ndim, "moveaxis") for d in np.atleast_1d(destination)]
    if len(src) != len(dst) or len(set(src)) != len(src) or len(set(dst)) != len(dst):
        raise ShapeError(f"moveaxis at {user_loc()}: bad source {source} / destination {destination}")
    order = [n for n in range(x.ndim) if n not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return transpose(x, order)


def expand_dims(x, axis):
    x = core.asarray(x)
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    nd = x.ndim + len(axes)
    axes = sorted(core.normalize_axis(a, nd, "expand_dims") for a in axes)
    if len(set(axes)) != len(axes):
        raise ShapeError(f"expand_dims at {user_loc()}: repeated axis in {axis}")
    shape, it = [], iter(x.shape)
    for d in range(nd):
        shape.append(1 if d in axes else next(it))
    return reshape(x, shape)


def squeeze(x, axis=None):
    x = core.asarray(x)
    if axis is None:
        axes = [d for d, s in enumerate(x.shape) if s == 1]
    else:
        axes = core.normalize_axes(axis, x.ndim, "squeeze")
    for a in axes:
        if x.shape[a] != 1:
            raise ShapeError(f"cannot squeeze axis {a} of size {x.shape[a]} (at {user_loc()})")
    return reshape(x, [s for d, s in enumerate(x.shape) if d not in axes])


def ravel(x):
    return reshape(x, (-1,))


@core.takes_out
def concatenate(xs, axis=0, out=None, dtype=None, casting="same_kind", **kw):
    core.no_extra("concatenate", (), kw)
    xs = list(xs)
    if not xs:
        raise ShapeError(f"need at least one array to concatenate (at {user_loc()})")
    if out is not None:
        if dtype is not None:
            raise TypeError(f"concatenate() only takes `out` or `dtype` as an argument, but both were provided "
                            f"(at {user_loc()})")
        return fz.store_out(out, concatenate(xs, axis), "np.concatenate", casting=casting)
    t = core.trace_of(*xs)
    dt = dtypes.canon(dtype) if dtype else core.result_dtype(*xs)
    for x in (xs if dtype or casting != "same_kind" else ()):
        # numpy casts each array to dtype= under casting= (same_kind: float to int raises)
        src = np.asarray(core.sample(x)).dtype
        if not np.can_cast(src, dt, casting):
            raise TypeError(f"Cannot cast array data from {src!r} to dtype({dt!r}) according to the rule "
                            f"{casting!r} (at {user_loc()})")
    ts = [core.asarray(x, dt, t) for x in xs]
    if axis is None:
        ts, axis = [reshape(x, (-1,)) for x in ts], 0
    nd = ts[0].ndim
    if nd == 0:
        raise ShapeError(f"zero-dimensional arrays cannot be concatenated (at {user_loc()})")
    axis = core.normalize_axis(axis, nd, "concatenate")
    return core.emit(t, CONCATENATE, *ts, dimension=axis)


@core.takes_out
def stack(xs, axis=0, out=None, dtype=None, casting="same_kind", **kw):
    core.no_extra("stack", (), kw)
    xs = list(xs)
    if not xs:
        raise ShapeError(f"need at least one array to stack (at {user_loc()})")
    xs = [core.asarray(x, t=core.trace_of(*xs)) for x in xs]
    if len({x.shape for x in xs}) > 1:
        raise ShapeError(f"all input arrays must have the same shape to stack, got "
                         f"{[list(x.shape) for x in xs]} (at {user_loc()})")
    nd = xs[0].ndim + 1
    axis = core.normalize_axis(axis, nd, "stack")
    return concatenate([expand_dims(x, axis) for x in xs], axis, out=out, dtype=dtype, casting=casting)


def tile(x, reps):
    x = core.asarray(x)
    reps = (reps,) if isinstance(reps, int) else tuple(reps)
    nd = builtins.max(x.ndim, len(reps))
    x = reshape(x, (1,) * (nd - x.ndim) + x.shape)
    reps = (1,) * (nd - len(reps)) + reps
    # broadcast a new axis before each dim, then merge the pairs
    inter = []
    for r, s in zip(reps, x.shape):
        inter += [r, s]
    y = core.broadcast_to(reshape(x, [v for s in x.shape for v in (1, s)]), inter)
    return reshape(y, [r * s for r, s in zip(reps, x.shape)])


def take(x, indices, axis=None, out=None, mode=None):
    """np.take. Indices known at trace time are checked like numpy's; traced ones out of
    range raise numpy's IndexError after the run (index_bounds.py)."""
    x = core.asarray(x)
    if axis is None:
        x, axis = reshape(x, (-1,)), 0
    axis = core.normalize_axis(axis, x.ndim, "take")
    n = x.shape[axis]
    if mode not in (None, "raise", "clip", "wrap"):
        raise ValueError(f"take: mode {mode!r} is not one of 'raise', 'wrap', 'clip' (at {user_loc()})")
    if not isinstance(indices, Tracer):
        idx = np.asarray(indices)
        if idx.size == 0:
            idx = idx.astype(np.int64)
        if idx.dtype.kind not in "iu":
            raise TypeError(f"take: indices must be integers, got {idx.dtype} (at {user_loc()})")
        idx = idx.astype(np.int64)
        if idx.size == 0 or 0 in x.shape[:axis]:
            # numpy checks the indices once per element before the axis: none here (an empty result)
            return core.full_like(x, 0, shape=x.shape[:axis] + idx.shape + x.shape[axis + 1:])
        if mode == "clip":
            idx = np.clip(idx, 0, builtins.max(n - 1, 0))
        elif mode == "wrap" and n:
            idx = idx % n
        elif idx.size and (idx.min() < -n or idx.max() >= n):
            raise IndexError(f"take: index {idx.min() if idx.min() < -n else idx.max()} is out of bounds "
                             f"for axis {axis} with size {n} (at {user_loc()})")
        else:
            idx = np.where(idx < 0, idx + n, idx)
        return core.emit(x._tr, GATHER, x, core.asarray(idx, t=x._tr), axis=axis)
    idx = indices
    if idx.dtype.kind not in "iu":
        raise TypeError(f"take: indices must be integers, got {idx.dtype} (at {user_loc()})")
    if idx.dtype.name not in ("int32", "int64"):
        idx = core.astype(idx, "int64")          # numpy's intp (a shard's offset is subtracted from it)
    if mode == "wrap":
        idx = ew.mod(idx, n)
    elif mode != "clip":
        index_bounds.check(idx, n, axis)
        idx = ew.where(ew.less(idx, 0), ew.add(idx, n), idx)   # numpy's negative indices
    return core.emit(x._tr, GATHER, x, idx, axis=axis)


# -- numpy's forms that return views: a write through the result reaches x ------------------
def _reshape_method(x, *shape, order="C"):
    return reshape(x, shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape, order)


def _transpose_method(x, *axes):
    return transpose(x, (axes[0] if len(axes) == 1 and isinstance(axes[0], (tuple, list)) else axes) or None)


def copy(x, order="K", subok=False):
    """np.copy: a new array holding the same (immutable SSA) value, laid out like x
    (order="K"; "C" / "F" / "A" as numpy takes them), also of a numpy scalar."""
    x = core.asarray(x)
    r = core.order_like(fz.fresh(x), x)
    if fz.is_scalar(x):
        return fz.new_array(r)
    if order == "C" or (order == "A" and not x._layout().flags.f_contiguous):
        r._hint = None
    elif order in ("F", "A"):
        shape = r.shape
        r._hint = Hint(lambda: views.dense(shape, tuple(range(len(shape)))[::-1]))
    r._ensure_buffer()
    return r


def astype(x, dtype, copy=True, **kw):
    """ndarray.astype (order="K"): a new array laid out like x alone (views.order_of)."""
    x = core.asarray(x)
    r = core.astype(x, dtype)
    return r if r is x else core.order_like(r, x)


def array(x, dtype=None, copy=True, **kw):
    """np.array of a traced array: a new array (0-d ones too) laid out like x alone."""
    x = core.asarray(x)
    r = core.order_like(fz.fresh(core.asarray(x, dtype)), x)
    r._ensure_buffer()
    return r


def copy_method(x, order="C"):
    """ndarray.copy: C order unless told otherwise; a numpy scalar's copy is a scalar."""
    x = core.asarray(x)
    return fz.fresh(x) if fz.is_scalar(x) else copy(x, order)

view_transpose = fz.as_view(transpose, "transpose")
view_transpose_method = fz.as_view(_transpose_method, "transpose")
view_swapaxes = fz.as_view(swapaxes, "transpose")
view_moveaxis = fz.as_view(moveaxis, "transpose")


def _takes_copy(g):
    """numpy 2.1's reshape(..., copy=): True copies always, False raises numpy's ValueError
    where the result cannot be a view, None (the default) views where it can."""
    def h(x, *args, copy=None, **kwargs):
        r = g(x, *args, **kwargs)
        if copy is None or not isinstance(r, Tracer) or not isinstance(x, Tracer):
            return r
        if copy:
            return copy_method(r)
        if not fz.is_scalar(x) and not fz.is_view_of(r, x):
            raise ValueError(f"Unable to avoid creating a copy while reshaping (at {user_loc()})")
        return r
    h.__name__, h.__doc__ = g.__name__, g.__doc__
    h.depends_on_layout = g.depends_on_layout
    return h


view_reshape = _takes_copy(fz.as_view(reshape, "reshape"))


def set_shape(x, shape):
    """`x.shape = shape`: numpy turns x itself into a view of its memory in the new shape
    (other views of that memory keep theirs), and refuses where that needs a copy."""
    if x._buf is not None and x._buf.arg is not None and not x._view:
        raise NotImplementedError(
            f"`x.shape = {shape}` on an argument of a traced function (at {user_loc()}): numpy would change "
            f"the caller's array, which spmd does not do; use `x = x.reshape({shape})`")
    r = view_reshape(x, shape)
    if r._buf is None or r._buf is not x._buf:
        raise AttributeError(f"Incompatible shape for in-place modification. Use `.reshape()` to make a copy "
                             f"with the desired shape ({list(x.shape)} -> {shape}, at {user_loc()})")
    x._val, x._buf, x._view, x._ver, x._hint = r._val, r._buf, r._view, r._ver, r._hint
view_reshape_method = _takes_copy(fz.as_view(_reshape_method, "reshape"))
_view_ravel_c = fz.as_view(lambda x: ravel(x), "ravel")


def _ravel_perm(x, order):
    """The axis order numpy's ravel / flatten(order=) read x's elements in, as a
    permutation (None: C order). "F": first index fastest; "A": F if x is Fortran- and not
    C-contiguous; "K": the order x's elements sit in memory (x is a view's strides)."""
    if order is None or order == "C" or x.ndim < 2:
        if order not in (None, "C", "F", "A", "K"):
            raise ValueError(f"order must be one of 'C', 'F', 'A', or 'K' (got {order!r})")
        return None
    if order == "F":
        return tuple(range(x.ndim))[::-1]
    if order not in ("A", "K"):
        raise ValueError(f"order must be one of 'C', 'F', 'A', or 'K' (got {order!r})")
    lay = fz.layout_of(x) if isinstance(x, Tracer) else None
    if lay is None or lay.flags.c_contiguous:
        return None
    if order == "A":
        return tuple(range(x.ndim))[::-1] if lay.flags.f_contiguous else None
    if builtins.any(st < 0 for st in lay.strides):
        raise NotImplementedError(f"ravel / flatten with order='K' of a view with negative strides "
                                  f"(at {user_loc()}); use order='C' or 'F'")
    perm = tuple(sorted(range(x.ndim), key=lambda d: -lay.strides[d]))     # stable: ties keep C order
    return None if perm == tuple(range(x.ndim)) else perm


def view_ravel(x, order="C"):
    """np.ravel / x.ravel(order): a view where numpy's is (x is contiguous in that order)."""
    x = core.asarray(x)
    perm = _ravel_perm(x, order)
    if perm is None:
        return _view_ravel_c(x)
    return _view_ravel_c(view_transpose(x, perm))


def flatten(x, order="C"):
    x = core.asarray(x)
    perm = _ravel_perm(x, order)
    return copy(ravel(x if perm is None else transpose(x, perm)))


# their order "K" / "A" reads x's strides (see functionalize.as_view)
view_ravel.depends_on_layout = flatten.depends_on_layout = True


view_squeeze = fz.as_view(squeeze, "reshape")
view_expand_dims = fz.as_view(expand_dims, "reshape")


def view_broadcast_to(x, shape, subok=False, what="np.broadcast_to's result"):
    """np.broadcast_to: a read-only view of x (its elements repeated without a copy)."""
    x = core.asarray(x)
    r = core.broadcast_to(x, shape)
    shape = r.shape
    return fz.read_only_view(x, r, what, lambda t, v: core.broadcast_to(Tracer(v, t), shape).value,
                             lambda a: np.broadcast_to(a, shape))


def stand_in(x):
    """An ndarray with x's shape and dtype, for numpy to read them: a zero-stride view,
    nothing allocated."""
    if not (hasattr(x, "shape") and hasattr(x, "dtype")):
        x = core.asarray(x)
    return np.broadcast_to(np.empty((), x.dtype), x.shape)


def metadata(func):
    """np.shape / np.ndim / np.size of x: numpy's own function on x's stand-in, so every
    argument means what it means in the installed numpy (np.size's axis: an int, negative,
    and since numpy 2.4 a tuple), errors included."""
    def f(x, *args, **kwargs):
        return func(stand_in(x), *args, **kwargs)
    f.__name__ = f.__qualname__ = func.__name__
    return f
