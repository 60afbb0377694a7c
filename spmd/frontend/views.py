"""A view chain: how a view's value is derived from its base's, step by step, in both
directions, and the Buffer that holds a base array's current value (see
functionalize.py for how writes use them).

    fwd(base value)             -> the view's value          (slice, reshape, ...)
    back(base value, new view)  -> the base's new value       (pad+select, reshape back, ...)

A step is (kind, params): ("slice", (start, limit, stride)), ("dyn", (starts, sizes)) with
traced starts, ("reverse", dims), ("reshape", shape), ("transpose", permutation), ("real",
None) and ("imag", None) (the parts of a complex base: a write sets that part and keeps
the other), ("bitcast", dtype) (x.view(dtype): the same bytes as a dtype of the same size), and ("derived", Derived) -- a view a builder derives in its own terms (the
diagonals of a single-operand einsum), or one of numpy's read-only views (broadcast_to,
diagonal: they read through, and a write through one raises numpy's ValueError). fwd and
back emit IR through a trace (anything with `emit(name, *values, **attrs)`).

A write into a static slice goes back as pad + select (not dynamic_update_slice), so the
partitioner keeps it local: each device selects within its own shard, and the update
needs only a halo shift where its sharding is offset from the base's.

`layout` answers whether numpy gives a view at all (reshape of a non-contiguous view
copies): the same steps on a memory-free ndarray of the base's layout. A base's layout is
numpy's: C order, an argument's own strides, or for a new array the order numpy gives it
(its "K" order: an elementwise result, a sort or a copy is laid out like its operands,
`keep_order`), so `(x.T + 1).reshape(-1)` copies as in numpy.
"""
from __future__ import annotations

import numpy as np
from ..ir.ops.names import (
    AND, BITCAST, BROADCAST_IN_DIM, COMPARE, COMPLEX, CONSTANT, DYNAMIC_SLICE, DYNAMIC_UPDATE_SLICE, IMAG,
    IOTA, PAD, REAL, REMAINDER, RESHAPE, REVERSE, SELECT, SLICE, SUBTRACT, TRANSPOSE
)


class Derived:
    """A view step a builder defines: `what` made it (for errors), `fwd(trace, base value)`
    computes the view, `back(trace, base value, new view value)` the base's new value
    (None: a read-only view, a write raises), `strides(shadow)` takes a memory-free
    ndarray of the base's layout to the view's (numpy's own function on it)."""
    __slots__ = ("what", "fwd", "back", "strides")

    def __init__(self, what, fwd, back, strides):
        self.what, self.fwd, self.back, self.strides = what, fwd, back, strides


def read_only_step(chain):
    """The first read-only step of a view chain, or None: a write through it raises."""
    return next((p for kind, p in chain if kind == "derived" and p.back is None), None)


class Buffer:
    """The current value of a base array. `arg` is the jit argument leaf it came from
    (written arguments are returned to the caller), `version` counts writes, `shadow` a
    memory-free ndarray with the base's layout (None: C order, made when asked)."""
    __slots__ = ("value", "version", "arg", "shadow")

    def __init__(self, value, arg=None, shadow=None):
        self.value = value
        self.version = 0
        self.arg = arg
        self.shadow = shadow


# -- view steps: (kind, params); fwd and back emit IR through the trace ---------------------
def _const(t, v, dtype):
    return t.emit(CONSTANT, value=np.array(v, dtype=dtype))


def _full(t, v, shape, dtype):
    return t.emit(BROADCAST_IN_DIM, _const(t, v, dtype), shape=tuple(shape), broadcast_dimensions=())


def _window_mask(t, shape, start, sizes, stride):
    """True where a strided window of `shape` lies: compares of iotas, which every device
    makes for its own shard."""
    mask = None
    for d, (n, s, k, st) in enumerate(zip(shape, start, sizes, stride)):
        if k == n:
            continue
        i = t.emit(IOTA, shape=tuple(shape), dtype="int64", dimension=d)
        conds = [t.emit(COMPARE, i, _full(t, s, shape, "int64"), direction="GE"),
                 t.emit(COMPARE, i, _full(t, s + (k - 1) * st + 1, shape, "int64"), direction="LT")]
        if st > 1:
            r = t.emit(REMAINDER, t.emit(SUBTRACT, i, _full(t, s, shape, "int64")), _full(t, st, shape, "int64"))
            conds.append(t.emit(COMPARE, r, _full(t, 0, shape, "int64"), direction="EQ"))
        for c in conds:
            mask = c if mask is None else t.emit(AND, mask, c)
    return mask if mask is not None else _full(t, True, shape, "bool")


def fwd(t, step, v):
    kind, p = step
    if kind == "slice":
        start, limit, stride = p
        return t.emit(SLICE, v, start=start, limit=limit, stride=stride)
    if kind == "dyn":
        starts, sizes = p
        return t.emit(DYNAMIC_SLICE, v, *starts, slice_sizes=sizes)
    if kind == "reverse":
        return t.emit(REVERSE, v, dimensions=tuple(p)) if p else v
    if kind == "reshape":
        return v if tuple(p) == v.shape else t.emit(RESHAPE, v, shape=tuple(p))
    if kind == "transpose":
        return v if tuple(p) == tuple(range(v.ndim)) else t.emit(TRANSPOSE, v, permutation=tuple(p))
    if kind in ("real", "imag"):
        return t.emit(kind, v)
    if kind == "bitcast":
        return t.emit(BITCAST, v, dtype=p)
    if kind == "derived":
        return p.fwd(t, v)
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
        if new.size == 1:
            # one element (a per-point loop's out[i, j] = v): written in place, not a
            # mask over the whole base per element
            return t.emit(DYNAMIC_UPDATE_SLICE, src, new, *[_const(t, s, "int64") for s in start])
        # pad the update out to the base's shape and select it where it lands: elementwise
        # work the partitioner keeps on each device's own shard
        low = tuple(start)
        interior = tuple(s - 1 for s in stride)
        high = tuple(n - (s + (k - 1) * st + 1) for n, s, k, st in zip(src.shape, start, new.shape, stride))
        cfg = dict(low=low, high=high, interior=interior)
        padded = t.emit(PAD, new, _const(t, 0, new.dtype), **cfg)
        return t.emit(SELECT, _window_mask(t, src.shape, start, new.shape, stride), padded, src)
    if kind == "dyn":
        starts, sizes = p
        return t.emit(DYNAMIC_UPDATE_SLICE, src, new, *starts)
    if kind == "reverse":
        return fwd(t, step, new)
    if kind == "reshape":
        return new if new.shape == src.shape else t.emit(RESHAPE, new, shape=src.shape)
    if kind == "transpose":
        inv = tuple(int(i) for i in np.argsort(p))
        return fwd(t, ("transpose", inv), new)
    if kind == "real":          # the new real part, src's imaginary part kept bit for bit
        return t.emit(COMPLEX, new, t.emit(IMAG, src))
    if kind == "imag":
        return t.emit(COMPLEX, t.emit(REAL, src), new)
    if kind == "bitcast":
        return t.emit(BITCAST, new, dtype=src.dtype)
    if kind == "derived" and p.back is not None:      # (read-only: functionalize.write raised before)
        return p.back(t, src, new)
    raise AssertionError(kind)


def reads_source(step) -> bool:
    """Does back(t, step, src, new) read src's value, not only its shape and dtype?"""
    return step[0] in ("slice", "dyn", "real", "imag", "derived")


_PART = {"complex64": "float32", "complex128": "float64"}


def fwd_aval(step, shape, dtype):
    """(shape, dtype) of fwd(t, step, v) for a v of `shape` and `dtype`, no op emitted;
    None where only the step itself knows (a derived view)."""
    kind, p = step
    if kind == "slice":
        return tuple(max(0, -(-(e - s) // st)) for s, e, st in zip(*p)), dtype
    if kind == "dyn":
        return tuple(p[1]), dtype
    if kind == "reverse":
        return tuple(shape), dtype
    if kind == "reshape":
        return tuple(p), dtype
    if kind == "transpose":
        return tuple(shape[i] for i in p), dtype
    if kind in ("real", "imag"):
        return tuple(shape), _PART[dtype]
    if kind == "bitcast":
        return tuple(shape), p
    return None


def derive(t, base, chain):
    for step in chain:
        base = fwd(t, step, base)
    return base


# -- layout: does numpy give a view? --------------------------------------------------------
def dense(shape, order=None):
    """An int8 ndarray of `shape` over one byte of memory, laid out contiguously with its
    axes in `order` (outermost first; None: C order): numpy computes views of it
    (strides, no reads) exactly as it would for a real array laid out so."""
    order = range(len(shape)) if order is None else order
    strides, acc = [0] * len(shape), 1
    for d in reversed(list(order)):
        strides[d] = acc
        acc *= max(shape[d], 1)
    return shadow_of(shape, strides)


def shadow_of(shape, strides):
    return np.lib.stride_tricks.as_strided(np.zeros(1, np.int8), shape=tuple(shape), strides=tuple(strides),
                                           writeable=False)


def order_of(shadow):
    """The axis order (outermost first) of a new array numpy makes like one array alone
    (np.copy, astype, *_like, sort, fft: order="K"): C order if the array is C-contiguous,
    F order if it is F-contiguous, else its axes by absolute stride, largest first, ties in
    C order. A repeated (zero-stride) axis so goes innermost, where an elementwise op's
    iterator leaves it in C order (keep_order): `np.copy(np.broadcast_to(x, (2,) +
    x.shape))` is not C-contiguous, and a reshape of it copies."""
    n = shadow.ndim
    if shadow.flags.c_contiguous:
        return tuple(range(n))
    if shadow.flags.f_contiguous:
        return tuple(range(n))[::-1]
    return tuple(sorted(range(n), key=lambda d: -abs(shadow.strides[d])))      # (stable: ties in C order)


def keep_order(shadows, shape):
    """The layout numpy gives a new array of `shape` computed elementwise from operands
    laid out as `shadows` (order="K", what ufuncs, copies and sorts do): its iterator's
    axis order -- a stable insertion sort of the axes by the operands' absolute strides,
    an operand's broadcast (zero-stride) axes not counted, C order where operands
    disagree -- made contiguous."""
    strides = [np.broadcast_to(a, shape).strides for a in shadows]
    order = list(range(len(shape)))[::-1]           # innermost first, as numpy sorts
    for i0 in range(1, len(order)):
        pos, a0 = i0, order[i0]
        for i1 in range(i0 - 1, -1, -1):
            a1 = order[i1]
            ambiguous, swap = True, False
            for st in strides:
                if st[a0] != 0 and st[a1] != 0:
                    if abs(st[a1]) <= abs(st[a0]):
                        swap = False          # (also when already decided: C order wins conflicts)
                    elif ambiguous:
                        swap = True
                    ambiguous = False
            if not ambiguous:
                if not swap:
                    break
                pos = i1
        order.insert(pos, order.pop(i0))
    return dense(shape, order[::-1])


def reduced(shadow, axes, keepdims):
    """The layout of a reduction's result: its operand's order over the axes it keeps."""
    dims = [d for d in range(shadow.ndim) if d not in axes]
    kept = shadow_of([shadow.shape[d] for d in dims], [shadow.strides[d] for d in dims])     # (also of empty axes)
    r = keep_order([kept], kept.shape)
    if keepdims:
        r = r.reshape(tuple(1 if d in axes else n for d, n in enumerate(shadow.shape)))
    return r


def _shadow(buf):
    """The base's layout: a memory-free ndarray (see dense)."""
    if buf.shadow is None:
        buf.shadow = dense(buf.value.shape)
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
        elif kind == "derived":
            a = p.strides(a)
        elif kind in ("real", "imag"):
            # a part of a complex element: the base's strides over an element half their unit
            a = np.lib.stride_tricks.as_strided(a, a.shape, tuple(2 * s for s in a.strides), writeable=False)
    return a


def reshape_is_view(buf, chain, shape) -> bool:
    """numpy's reshape returns a view iff the strides allow it (no copy needed)."""
    try:
        layout(buf, chain).reshape(shape, copy=False)
        return True
    except (ValueError, AttributeError):
        return False
