"""numpy's write semantics on traced arrays, as functionalization.

A traced array that has been written, or that another array is a view of, refers to a
`Buffer`: a mutable cell holding the current IR Value of its *base* array. A view
(basic indexing, .T / transpose, reshape / ravel where numpy gives a view, squeeze,
expand_dims) keeps the base's Buffer and a *view chain*: the steps that derive the
view from the base. Each step knows both directions:

    fwd(base value)             -> the view's value          (slice, reshape, ...)
    back(base value, new view)  -> the base's new value       (pad+select, reshape back, ...)

A write (`x[i] = v`, `x += v`, `out=`, `np.copyto`, ...) computes the written array's
new value, runs it back through the chain to a new base value and stores that in the
Buffer, bumping its version. Reading any Tracer of that Buffer re-derives its value
from the base's current value when the version moved. So a write through any view is
seen by the base and every other view of it, as in numpy, and the IR stays SSA.

A write into a static slice goes back as pad + select (not dynamic_update_slice), so the
partitioner keeps it local: each device selects within its own shard, and the update
needs only a halo shift where its sharding is offset from the base's.
"""
from __future__ import annotations

import numpy as np

from ..errors import TraceError


class Buffer:
    """The current value of a base array. `arg` is the jit argument leaf it came from
    (written arguments are returned to the caller), `version` counts writes."""
    __slots__ = ("value", "version", "arg", "shadow")

    def __init__(self, value, arg=None):
        self.value = value
        self.version = 0
        self.arg = arg
        self.shadow = None        # a memory-free ndarray with the base's layout (see layout)


# -- view steps: (kind, params); fwd and back emit IR through the trace ---------------------
def _const(t, v, dtype):
    return t.emit("constant", value=np.array(v, dtype=dtype))


def _full(t, v, shape, dtype):
    return t.emit("broadcast_in_dim", _const(t, v, dtype), shape=tuple(shape), broadcast_dimensions=())


def _rev_index(t, n):
    return t.emit("constant", value=np.arange(n - 1, -1, -1, dtype="int64"))


def _window_mask(t, shape, start, sizes, stride):
    """True where a strided window of `shape` lies: compares of iotas, which every device
    makes for its own shard."""
    mask = None
    for d, (n, s, k, st) in enumerate(zip(shape, start, sizes, stride)):
        if k == n:
            continue
        i = t.emit("iota", shape=tuple(shape), dtype="int64", dimension=d)
        conds = [t.emit("compare", i, _full(t, s, shape, "int64"), direction="GE"),
                 t.emit("compare", i, _full(t, s + (k - 1) * st + 1, shape, "int64"), direction="LT")]
        if st > 1:
            r = t.emit("remainder", t.emit("subtract", i, _full(t, s, shape, "int64")), _full(t, st, shape, "int64"))
            conds.append(t.emit("compare", r, _full(t, 0, shape, "int64"), direction="EQ"))
        for c in conds:
            mask = c if mask is None else t.emit("and", mask, c)
    return mask if mask is not None else _full(t, True, shape, "bool")


def fwd(t, step, v):
    kind, p = step
    if kind == "slice":
        start, limit, stride = p
        return t.emit("slice", v, start=start, limit=limit, stride=stride)
    if kind == "dyn":
        starts, sizes = p
        return t.emit("dynamic_slice", v, *starts, slice_sizes=sizes)
    if kind == "reverse":
        for d in p:
            v = t.emit("gather", v, _rev_index(t, v.shape[d]), axis=d)
        return v
    if kind == "reshape":
        return v if tuple(p) == v.shape else t.emit("reshape", v, shape=tuple(p))
    if kind == "transpose":
        return v if tuple(p) == tuple(range(v.ndim)) else t.emit("transpose", v, permutation=tuple(p))
    raise AssertionError(kind)


def back(t, step, src, new):
    """The new value of `src` once its view through `step` is `new`."""
    kind, p = step
    if kind == "slice":
        start, limit, stride = p
        if new.shape == src.shape:
            return new
        if 0 in new.shape:
            return src
        # pad the update out to the base's shape and select it where it lands: elementwise
        # work the partitioner keeps on each device's own shard
        low = tuple(start)
        interior = tuple(s - 1 for s in stride)
        high = tuple(n - (s + (k - 1) * st + 1) for n, s, k, st in zip(src.shape, start, new.shape, stride))
        cfg = dict(low=low, high=high, interior=interior)
        padded = t.emit("pad", new, _const(t, 0, new.dtype), **cfg)
        return t.emit("select", _window_mask(t, src.shape, start, new.shape, stride), padded, src)
    if kind == "dyn":
        starts, sizes = p
        return t.emit("dynamic_update_slice", src, new, *starts)
    if kind == "reverse":
        return fwd(t, step, new)
    if kind == "reshape":
        return new if new.shape == src.shape else t.emit("reshape", new, shape=src.shape)
    if kind == "transpose":
        inv = tuple(int(i) for i in np.argsort(p))
        return fwd(t, ("transpose", inv), new)
    raise AssertionError(kind)


def derive(t, base, chain):
    for step in chain:
        base = fwd(t, step, base)
    return base


def write(x, new):
    """Make the traced array x hold the Value `new` (its shape and dtype), updating the
    base it is a view of, so the base and all its views see it."""
    assert new.shape == x.shape and new.dtype == x.value.dtype, (new, x)
    t = x._tr
    buf = x._ensure_buffer()
    vals = [buf.value]
    for step in x._view[:-1]:
        vals.append(fwd(t, step, vals[-1]))
    v = new
    for step, src in zip(reversed(x._view), reversed(vals)):
        v = back(t, step, src, v)
    buf.value = v
    buf.version += 1
    x._val, x._ver = new, buf.version


# -- layout: does numpy give a view? --------------------------------------------------------
def _shadow(buf):
    """An int8 ndarray of the base's shape and C strides over one byte of memory: numpy
    computes views of it (strides, no reads) exactly as it would for the real array."""
    if buf.shadow is None:
        shape = buf.value.shape
        strides, acc = [], 1
        for n in reversed(shape):
            strides.append(acc)
            acc *= max(n, 1)
        buf.shadow = np.lib.stride_tricks.as_strided(np.zeros(1, np.int8), shape=shape,
                                                     strides=tuple(reversed(strides)), writeable=False)
    return buf.shadow


def layout(buf, chain):
    """The shadow of a view: the base's shadow taken through the chain's steps."""
    a = _shadow(buf)
    for kind, p in chain:
        if kind == "slice":
            a = a[tuple(slice(s, e, st) for s, e, st in zip(*p))]
        elif kind == "dyn":        # the position is traced; strides are what matter
            a = a[tuple(slice(0, k) for k in p[1])]
        elif kind == "reverse":
            a = a[tuple(slice(None, None, -1) if d in p else slice(None) for d in range(a.ndim))]
        elif kind == "reshape":
            a = a.reshape(p, copy=False)
        elif kind == "transpose":
            a = a.transpose(p)
    return a


def reshape_is_view(buf, chain, shape) -> bool:
    """numpy's reshape returns a view iff the strides allow it (no copy needed)."""
    try:
        layout(buf, chain).reshape(shape, copy=False)
        return True
    except (ValueError, AttributeError):
        return False


def check_cast(op, src_dtype, dst_dtype, loc):
    """numpy's same_kind rule for in-place ufuncs (x += 1.5 on an int array raises)."""
    if not np.can_cast(np.dtype(src_dtype), np.dtype(dst_dtype), "same_kind"):
        raise TypeError(f"{op} at {loc}: Cannot cast ufunc output from dtype('{np.dtype(src_dtype)}') to "
                        f"dtype('{np.dtype(dst_dtype)}') with casting rule 'same_kind' (numpy raises "
                        f"the same UFuncTypeError); write x = x + y (a new array of the wider dtype) or cast "
                        f"the right-hand side with .astype")


def no_plain_write(what, loc):
    raise TraceError(f"{what} at {loc}: numpy cannot store a traced value into a plain numpy array "
                     f"(one made with np.zeros / np.empty / ... inside spmd.jit, or a global). Make the "
                     f"buffer a traced array instead: np.zeros_like(x, shape=(...)) or "
                     f"spmd.numpy.zeros((...)) -- then buf[i] = value works as in numpy.")


# -- the numpy layer: views, in-place operators, out=, copyto, fill -------------------------
def _npx():
    from . import numpy_api
    return numpy_api


def view_of(x, r, steps):
    """r (computed from x's current value through `steps`) as a view of x."""
    from .trace import Tracer
    buf = x._ensure_buffer()
    v = Tracer(r.value if isinstance(r, Tracer) else r, x._tr, x.weak)
    v._buf, v._view, v._ver = buf, x._view + tuple(steps), buf.version
    return v


def fresh(r):
    """A new base holding r's value: what numpy returns when it copies."""
    from .trace import Tracer
    return Tracer(r.value, r._tr, r.weak)


def as_view(f, kind):
    """Wrap a builder whose numpy result is a view of its first argument: a transpose
    (transpose, swapaxes, moveaxis, .T) or a reshape (reshape, squeeze, expand_dims; a
    copy where numpy's strides do not allow a view; ravel: a view of a contiguous array)."""
    from .trace import Tracer

    def g(x, *args, **kwargs):
        r = f(x, *args, **kwargs)
        if not isinstance(x, Tracer) or not isinstance(r, Tracer):
            return r
        if kind == "transpose":
            op = r.value.producer if r is not x else None
            perm = op.attrs.get("permutation", None) if op is not None else None
            perm = tuple(range(x.ndim)) if perm is None else perm
            return view_of(x, r, [("transpose", tuple(perm))])
        buf = x._ensure_buffer()
        if kind == "ravel":        # ravel promises a contiguous result: a view only of a contiguous array
            ok = layout(buf, x._view).flags.c_contiguous
        else:
            ok = reshape_is_view(buf, x._view, r.shape)
        if ok:
            return view_of(x, r, [("reshape", tuple(r.shape))])
        return fresh(r)
    g.__name__ = getattr(f, "__name__", "view")
    g.__doc__ = f.__doc__
    return g


def _assign(x, r, what, casting="same_kind"):
    """numpy's store of a computed result r into the existing array x (an in-place
    operator, out=, copyto): the shapes must match after broadcasting r, and the dtype
    cast follows `casting`."""
    from .trace import Tracer, user_loc
    from ..errors import ShapeError
    npx = _npx()
    if not isinstance(x, Tracer):
        no_plain_write(what, user_loc())
    r = npx.asarray(r, t=x._tr)
    try:
        ok = np.broadcast_shapes(r.shape, x.shape) == x.shape
    except ValueError:
        ok = False
    if not ok:
        raise ShapeError(f"{what} at {user_loc()}: non-broadcastable output operand with shape "
                         f"{tuple(x.shape)} doesn't match the broadcast shape {tuple(r.shape)} (numpy "
                         f"raises the same ValueError)")
    if casting != "unsafe":
        if not np.can_cast(r.dtype, x.dtype, casting):
            raise TypeError(f"{what} at {user_loc()}: Cannot cast ufunc output from {r.dtype!r} to "
                            f"{x.dtype!r} with casting rule {casting!r} (numpy raises the same "
                            f"UFuncTypeError); write x = x + y for a new array of the wider dtype, or "
                            f"cast with .astype")
    write(x, npx.broadcast_to(npx.astype(r, x.dtype), x.shape).value)
    return x


def inplace(f, name):
    """x op= y: numpy computes op(x, y) and stores it into x (a view writes its base).
    A numpy *scalar* (a 0-d result that was never an array, or a Python number argument)
    is immutable, so there Python rebinds the name instead, as in numpy."""
    def g(x, y):
        r = f(x, y)
        if x.weak or (x.ndim == 0 and x._buf is None):
            return r
        return _assign(x, r, f"{name}=")
    g.__name__ = f"__i{name}__"
    return g


def copyto(dst, src, casting="same_kind", where=True):
    npx = _npx()
    if where is not True:
        src = npx.where(where, src, dst)
    _assign(dst, src, "np.copyto", casting)


def fill(x, value):
    from .trace import Tracer
    npx = _npx()
    if isinstance(value, Tracer) and value.ndim:
        raise ValueError("fill: the value must be a scalar (numpy raises the same)")
    _assign(x, npx.full_like(x, value) if not isinstance(value, Tracer) else value, "ndarray.fill", "unsafe")


def store_out(out, r, what):
    """A ufunc / function called with out=: compute, then store into out (numpy returns out)."""
    outs = out if isinstance(out, tuple) else (out,)
    rs = r if isinstance(r, tuple) else (r,)
    if len(outs) != len(rs):
        raise ValueError(f"{what}: out= has {len(outs)} arrays for {len(rs)} results")
    for o, v in zip(outs, rs):
        if o is not None:
            _assign(o, v, f"{what}(..., out=)")
    res = tuple(o if o is not None else v for o, v in zip(outs, rs))
    return res if isinstance(r, tuple) else res[0]
