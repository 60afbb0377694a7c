"""numpy's stacking, splitting, repeating, flipping, padding, differencing and
triangle/diagonal functions on Tracers, composed from the IR ops numpy_api emits
(slices, concatenations, broadcasts, selects on iotas), so each partitions like its parts:
slices and concatenations along a split dim exchange halos, masks built from iotas are
local, reductions over a split dim leave a pending sum."""
from __future__ import annotations

import builtins

import numpy as np

from ...errors import ShapeError, user_loc
from ...ir import dtypes
from ...ir.ops.names import BROADCAST_IN_DIM, COMPLEX, IOTA, PAD, ROLL
from .. import core, indexing, reductions as red, shapes
from .. import functionalize as fz
from .. import elementwise as ew
from ..trace import Tracer, current_trace

_UNSET = object()       # an argument not given (numpy's own marker is private)


def _sl(x, axis, start=None, stop=None, step=None):
    key = [slice(None)] * x.ndim
    key[axis] = slice(start, stop, step)
    return indexing.getitem(x, tuple(key))


def _arrays(xs):
    if isinstance(xs, Tracer) or not isinstance(xs, (list, tuple)):
        xs = [xs[i] for i in range(core.asarray(xs).shape[0])] if isinstance(xs, Tracer) else list(xs)
    xs = list(xs)
    if not xs:
        raise ValueError(f"need at least one array (at {user_loc()})")
    t = core.trace_of(*xs)
    return [core.asarray(x, t=t) for x in xs]


# ---------------------------------------------------------------------------- atleast_nd
def _one_or_tuple(f):
    """numpy's atleast_*d: each argument's result (a view of it, as in numpy), one or a tuple."""
    view = fz.as_view(f, "reshape")

    def g(*xs):
        out = tuple(view(x) for x in xs)
        return out[0] if len(out) == 1 else out
    g.__name__ = f.__name__
    return g


def _atleast(x, shape):
    return shapes.reshape(x, shape) if shape != x.shape else x


@_one_or_tuple
def atleast_1d(x):
    x = core.asarray(x)
    return _atleast(x, (1,) if x.ndim == 0 else x.shape)


@_one_or_tuple
def atleast_2d(x):
    x = core.asarray(x)
    return _atleast(x, {0: (1, 1), 1: (1,) + x.shape}.get(x.ndim, x.shape))


@_one_or_tuple
def atleast_3d(x):
    x = core.asarray(x)
    return _atleast(x, {0: (1, 1, 1), 1: (1,) + x.shape + (1,), 2: x.shape + (1,)}.get(x.ndim, x.shape))


# ---------------------------------------------------------------------------- stacking
def _cat(xs, axis, dtype=None, casting="same_kind"):
    return shapes.concatenate(xs, axis, dtype=dtype, casting=casting)


def hstack(tup, *, dtype=None, casting="same_kind"):
    xs = [atleast_1d(x) for x in _arrays(tup)]
    return _cat(xs, 0 if xs[0].ndim == 1 else 1, dtype, casting)


def vstack(tup, *, dtype=None, casting="same_kind"):
    return _cat([atleast_2d(x) for x in _arrays(tup)], 0, dtype, casting)


def dstack(tup):
    return _cat([atleast_3d(x) for x in _arrays(tup)], 2)


def column_stack(tup):
    xs = [shapes.reshape(x, (-1, 1)) if x.ndim < 2 else x for x in _arrays(tup)]
    return _cat(xs, 1)


def append(arr, values, axis=None):
    t = core.trace_of(arr, values)
    arr, values = core.asarray(arr, t=t), core.asarray(values, t=t)
    if axis is None:
        return shapes.concatenate([shapes.ravel(arr), shapes.ravel(values)], 0)
    return shapes.concatenate([arr, values], axis)


# ---------------------------------------------------------------------------- splitting
def _split_points(n, sections, equal, name):
    if isinstance(sections, (int, np.integer)):
        k = int(sections)
        if k <= 0:
            raise ValueError(f"number sections must be larger than 0 (at {user_loc()})")
        if equal and n % k:
            raise ValueError(f"{name}: array split does not result in an equal division: {n} into {k} "
                             f"(at {user_loc()})")
        q, r = divmod(n, k)
        sizes = [q + 1] * r + [q] * (k - r)
        return list(np.cumsum([0] + sizes))
    if isinstance(sections, Tracer):
        raise NotImplementedError(f"{name} with traced split points has data-dependent shapes (at {user_loc()})")
    idx = [int(i) for i in sections]
    return [0] + idx + [n]


def _split(x, sections, axis, equal, name):
    x = core.asarray(x)
    axis = core.normalize_axis(axis, x.ndim, name)
    n = x.shape[axis]
    pts = _split_points(n, sections, equal, name)
    out = []
    for s, e in zip(pts[:-1], pts[1:]):
        out.append(_sl(x, axis, s, e))
    return out


def split(ary, indices_or_sections, axis=0):
    return _split(ary, indices_or_sections, axis, True, "split")


def array_split(ary, indices_or_sections, axis=0):
    return _split(ary, indices_or_sections, axis, False, "array_split")


def hsplit(ary, indices_or_sections):
    x = core.asarray(ary)
    if x.ndim == 0:
        raise ValueError(f"hsplit only works on arrays of 1 or more dimensions (at {user_loc()})")
    return split(x, indices_or_sections, 1 if x.ndim > 1 else 0)


def vsplit(ary, indices_or_sections):
    x = core.asarray(ary)
    if x.ndim < 2:
        raise ValueError(f"vsplit only works on arrays of 2 or more dimensions (at {user_loc()})")
    return split(x, indices_or_sections, 0)


def dsplit(ary, indices_or_sections):
    x = core.asarray(ary)
    if x.ndim < 3:
        raise ValueError(f"dsplit only works on arrays of 3 or more dimensions (at {user_loc()})")
    return split(x, indices_or_sections, 2)


# ---------------------------------------------------------------------------- repeat, roll, flip
def repeat(a, repeats, axis=None):
    x = core.asarray(a)
    if axis is None:
        x, axis = shapes.ravel(x), 0
    axis = core.normalize_axis(axis, x.ndim, "repeat")
    if isinstance(repeats, Tracer):
        raise NotImplementedError(f"np.repeat with traced repeats has a data-dependent shape; pass the "
                                  f"repeats as a Python int or numpy array (at {user_loc()})")
    r = np.asarray(repeats)
    if r.dtype.kind not in "iu" and r.size:
        raise TypeError(f"repeat: repeats must be integers, got {r.dtype} (at {user_loc()})")
    if (r < 0).any():
        raise ValueError(f"repeat: negative repeats {r.tolist()} (at {user_loc()})")
    n = x.shape[axis]
    if r.ndim == 0 or r.size == 1:
        k = int(r.reshape(()))
        # (.., n, ..) -> (.., n, k, ..) -> (.., n*k, ..): a broadcast, local on every split
        y = shapes.reshape(x, x.shape[:axis + 1] + (1,) + x.shape[axis + 1:])
        y = core.broadcast_to(y, x.shape[:axis + 1] + (k,) + x.shape[axis + 1:])
        return shapes.reshape(y, x.shape[:axis] + (n * k,) + x.shape[axis + 1:])
    if r.shape != (n,):
        raise ValueError(f"repeat: {r.size} repeats for an axis of size {n} (at {user_loc()})")
    return shapes.take(x, np.repeat(np.arange(n, dtype=np.int64), r), axis=axis)


def roll(a, shift, axis=None):
    x = core.asarray(a)
    if axis is None:
        return shapes.reshape(roll(shapes.ravel(x), shift, 0), x.shape)
    if isinstance(shift, Tracer):
        if not isinstance(axis, (int, np.integer)):
            raise NotImplementedError(f"np.roll with a traced shift over several axes (at {user_loc()})")
        ax = core.normalize_axis(axis, x.ndim, "roll")
        n = x.shape[ax]
        if n == 0:
            return x
        idx = ew.mod(ew.subtract(np.arange(n, dtype=np.int64), core.astype(shift, "int64")), n)
        return shapes.take(x, idx, axis=ax)
    shifts, axes = np.broadcast_arrays(np.asarray(shift), np.asarray(axis))
    total = {}
    for s, ax in zip(shifts.ravel().tolist(), axes.ravel().tolist()):
        ax = core.normalize_axis(ax, x.ndim, "roll")
        total[ax] = total.get(ax, 0) + int(s)
    for ax, s in total.items():
        n = x.shape[ax]
        if n == 0 or s % n == 0:
            continue
        s %= n
        x = core.emit(core.trace_of(x), ROLL, x, shift=s, dimension=ax)
    return x


def flip(m, axis=None):
    x = core.asarray(m)
    axes = core.normalize_axes(axis, x.ndim, "flip")
    key = tuple(slice(None, None, -1) if d in axes else slice(None) for d in range(x.ndim))
    return indexing.getitem(x, key) if axes else x


def fliplr(m):
    x = core.asarray(m)
    if x.ndim < 2:
        raise ValueError(f"fliplr: input must be >= 2-d (at {user_loc()})")
    return flip(x, 1)


def flipud(m):
    x = core.asarray(m)
    if x.ndim < 1:
        raise ValueError(f"flipud: input must be >= 1-d (at {user_loc()})")
    return flip(x, 0)


def rot90(m, k=1, axes=(0, 1)):
    x = core.asarray(m)
    if len(axes) != 2:
        raise ValueError(f"rot90: len(axes) must be 2 (at {user_loc()})")
    a0, a1 = core.normalize_axis(axes[0], x.ndim, "rot90"), core.normalize_axis(axes[1], x.ndim, "rot90")
    if a0 == a1:
        raise ValueError(f"rot90: axes must be different (at {user_loc()})")
    k %= 4              # (a view of m, as numpy's)
    if k == 0:
        return indexing.getitem(x, Ellipsis)
    if k == 2:
        return flip(flip(x, a0), a1)
    perm = list(range(x.ndim))
    perm[a0], perm[a1] = perm[a1], perm[a0]
    if k == 1:
        return shapes.view_transpose(flip(x, a1), perm)
    return flip(shapes.view_transpose(x, perm), a1)


def broadcast_arrays(*args, subok=False):
    """Views of the arguments broadcast to one shape. numpy's are writable (with a warning
    that a write reaches every element a broadcast repeats, and that they will become
    read-only); spmd's are read-only views already."""
    t = core.trace_of(*args)
    xs = [core.asarray(x, t=t) for x in args]
    try:
        shape = np.broadcast_shapes(*[x.shape for x in xs])
    except ValueError:
        raise ShapeError(f"broadcast_arrays at {user_loc()}: shapes {[list(x.shape) for x in xs]} "
                         f"do not broadcast together") from None
    what = "a result of np.broadcast_arrays (numpy deprecates writing into one)"
    return tuple(shapes.view_broadcast_to(x, shape, what=what) for x in xs)


def meshgrid(*xi, copy=True, sparse=False, indexing="xy"):
    if indexing not in ("xy", "ij"):
        raise ValueError(f"meshgrid: indexing must be 'xy' or 'ij' (at {user_loc()})")
    if not xi:
        return ()
    t = core.trace_of(*xi)
    xs = [shapes.ravel(core.asarray(x, t=t)) for x in xi]
    nd = len(xs)
    dims = [(1,) * i + (x.shape[0],) + (1,) * (nd - i - 1) for i, x in enumerate(xs)]
    if indexing == "xy" and nd > 1:
        dims = [(s[1], s[0]) + s[2:] for s in dims]
    out = [shapes.reshape(x, s) for x, s in zip(xs, dims)]
    if not sparse:
        out = list(broadcast_arrays(*out))
    return tuple(out)


# ---------------------------------------------------------------------------- pad
def _pad_widths(pad_width, ndim, what="pad_width"):
    if isinstance(pad_width, Tracer):
        raise NotImplementedError(f"np.pad with a traced {what} has a data-dependent shape (at {user_loc()})")
    pw = np.asarray(pad_width)
    try:
        pw = np.broadcast_to(pw, (ndim, 2))
    except ValueError:
        raise ValueError(f"np.pad: {what} {pad_width!r} does not fit {ndim} dims (at {user_loc()})") from None
    if pw.dtype.kind not in "iu":
        raise TypeError(f"np.pad: {what} must be integers, got {pw.dtype} (at {user_loc()})")
    if (pw < 0).any():
        raise ValueError(f"np.pad: index can't contain negative values (at {user_loc()})")
    return [(int(b), int(a)) for b, a in pw]


def _pad_index(mode, n, i):
    """Source index for position i (may be < 0 or >= n) of an axis of size n."""
    if mode == "edge" or n == 1:
        return np.clip(i, 0, n - 1)
    if mode == "wrap":
        return i % n
    if mode == "reflect":
        p = 2 * (n - 1)
        j = i % p
        return np.where(j < n, j, p - j)
    if mode == "symmetric":
        p = 2 * n
        j = i % p
        return np.where(j < n, j, p - 1 - j)
    raise AssertionError(mode)


def pad(array, pad_width, mode="constant", **kwargs):
    x = core.asarray(array)
    pw = _pad_widths(pad_width, x.ndim)
    if callable(mode):
        raise NotImplementedError(f"np.pad with a function mode (at {user_loc()})")
    if mode == "constant":
        cv = kwargs.pop("constant_values", 0)
        core.no_extra("pad", (), kwargs)
        return _pad_constant(x, pw, cv)
    if mode in ("edge", "wrap", "reflect", "symmetric"):
        rt = kwargs.pop("reflect_type", "even")
        core.no_extra("pad", (), kwargs)
        if rt != "even":
            raise NotImplementedError(f"np.pad reflect_type={rt!r} (at {user_loc()})")
        return _pad_from_inside(x, pw, mode)
    raise NotImplementedError(f"np.pad mode={mode!r} is not supported in spmd (supported: constant, edge, wrap, "
                              f"reflect, symmetric) (at {user_loc()})")


def _pad_constant(x, pw, cv):
    """One pad op where one value fills every side; else one per padded side."""
    if not builtins.any(b or a for b, a in pw):
        return x
    cvs = _pad_values(x, cv)

    def value(v):
        if isinstance(v, Tracer):
            return core.astype(v, x.dtype)
        return core.asarray(np.asarray(v).astype(x.dtype), t=x._tr)

    if builtins.all(p is cvs[0][0] for cp in cvs for p in cp):
        return core.emit(x._tr, PAD, x, value(cvs[0][0]), low=tuple(b for b, _ in pw),
                         high=tuple(a for _, a in pw), interior=(0,) * x.ndim)
    for d, ((b, a), (vb, va)) in enumerate(zip(pw, cvs)):
        for amt, v, lo in ((b, vb, True), (a, va, False)):
            if amt:
                low = tuple(amt if (k == d and lo) else 0 for k in range(x.ndim))
                high = tuple(amt if (k == d and not lo) else 0 for k in range(x.ndim))
                x = core.emit(x._tr, PAD, x, value(v), low=low, high=high, interior=(0,) * x.ndim)
    return x


def _pad_values(x, cv):
    """constant_values as (before, after) per dim."""
    if isinstance(cv, Tracer):
        if cv.ndim:
            raise NotImplementedError(f"np.pad with traced per-axis constant_values (at {user_loc()})")
        return [(cv, cv)] * x.ndim
    c = np.asarray(cv)
    if c.ndim == 0 or (c == c.flat[0]).all():
        return [(c.flat[0], c.flat[0])] * x.ndim
    c = np.broadcast_to(c, (x.ndim, 2))
    return [(c[d, 0], c[d, 1]) for d in range(x.ndim)]


def _pad_from_inside(x, pw, mode):
    """edge / wrap / reflect / symmetric: each padded side is a take of x's own elements."""
    for d, (b, a) in enumerate(pw):
        if not (b or a):
            continue
        n = x.shape[d]
        if n == 0:
            raise ValueError(f"np.pad: can't extend empty axis {d} using modes other than 'constant' "
                             f"or 'empty' (at {user_loc()})")
        parts = []
        if b:
            parts.append(shapes.take(x, _pad_index(mode, n, np.arange(-b, 0)).astype(np.int64), axis=d))
        parts.append(x)
        if a:
            parts.append(shapes.take(x, _pad_index(mode, n, np.arange(n, n + a)).astype(np.int64), axis=d))
        x = shapes.concatenate(parts, d)
    return x


# ---------------------------------------------------------------------------- diff, gradient
def diff(a, n=1, axis=-1, prepend=_UNSET, append=_UNSET):
    x = core.asarray(a)
    if n == 0:
        return x
    if n < 0:
        raise ValueError(f"diff: order must be non-negative but got {n} (at {user_loc()})")
    if x.ndim == 0:
        raise ValueError(f"diff requires input that is at least one dimensional (at {user_loc()})")
    axis = core.normalize_axis(axis, x.ndim, "diff")
    parts = []
    for v in (prepend, append):
        if v is _UNSET:
            parts.append(None)
            continue
        v = core.asarray(v, t=x._tr)
        if v.ndim == 0:
            v = core.broadcast_to(v, x.shape[:axis] + (1,) + x.shape[axis + 1:])
        parts.append(v)
    if parts[0] is not None or parts[1] is not None:
        xs = ([parts[0]] if parts[0] is not None else []) + [x] + ([parts[1]] if parts[1] is not None else [])
        x = shapes.concatenate(xs, axis)
    for _ in range(n):
        m = x.shape[axis]
        hi, lo = _sl(x, axis, 1, None), _sl(x, axis, 0, builtins.max(m - 1, 0))
        x = ew.not_equal(hi, lo) if x.dtype == np.bool_ else ew.subtract(hi, lo)
    return x


def gradient(f, *varargs, axis=None, edge_order=1):
    x = core.asarray(f)
    axes = core.normalize_axes(axis, x.ndim, "gradient") if axis is not None else tuple(range(x.ndim))
    if axis is not None and not isinstance(axis, (int, np.integer)):
        axes = tuple(core.normalize_axis(a, x.ndim, "gradient") for a in axis)
    hs = _spacings(varargs, len(axes))
    if edge_order not in (1, 2):
        raise ValueError(f"gradient: 'edge_order' greater than 2 not supported (at {user_loc()})")
    if x.dtype == np.bool_:
        raise TypeError(f"np.gradient of bool: numpy's boolean subtract is not supported (at {user_loc()})")
    xf = core.astype(x, x.dtype.name if x.dtype.kind in "fc" else "float64")
    out = [_gradient_along(xf, ax, float(h), edge_order) for ax, h in zip(axes, hs)]
    return out[0] if len(out) == 1 else tuple(out)


def _spacings(varargs, n):
    """np.gradient's spacing arguments: one uniform spacing per axis."""
    if len(varargs) == 0:
        hs = [1.0] * n
    elif len(varargs) == 1 and np.ndim(varargs[0]) == 0:
        hs = [varargs[0]] * n
    elif len(varargs) == n:
        hs = list(varargs)
    else:
        raise TypeError(f"gradient: invalid number of spacing arguments (at {user_loc()})")
    for h in hs:
        if isinstance(h, Tracer) or np.ndim(h) != 0:
            raise NotImplementedError(f"np.gradient with coordinate arrays is not supported in spmd; pass "
                                      f"uniform spacings as scalars (at {user_loc()})")
    return hs


def _gradient_along(x, ax, h, edge_order):
    """Central differences inside, one-sided ones of edge_order at the two ends."""
    n = x.shape[ax]
    if n < edge_order + 1:
        raise ValueError(f"gradient: shape of array too small to calculate a numerical gradient, at least "
                         f"(edge_order + 1) elements are required (at {user_loc()})")

    def at(i, coef):        # coef * x[i] along ax (a slice of 1)
        return ew.multiply(_sl(x, ax, i % n, i % n + 1), coef)
    mid = ew.true_divide(ew.subtract(_sl(x, ax, 2, None), _sl(x, ax, 0, n - 2)), 2.0 * h)
    if edge_order == 1:
        first = ew.true_divide(ew.subtract(_sl(x, ax, 1, 2), _sl(x, ax, 0, 1)), h)
        last = ew.true_divide(ew.subtract(_sl(x, ax, n - 1, n), _sl(x, ax, n - 2, n - 1)), h)
    else:
        first = ew.true_divide(ew.add(ew.add(at(0, -1.5), at(1, 2.0)), at(2, -0.5)), h)
        last = ew.true_divide(ew.add(ew.add(at(-3, 0.5), at(-2, -2.0)), at(-1, 1.5)), h)
    return shapes.concatenate([first, mid, last], ax)


# ---------------------------------------------------------------------------- triangles, diagonals
def _tri_mask(shape, k, lower):
    """bool (..., m, n) from iotas: j - i <= k (lower) or j - i >= k (upper)."""
    t = current_trace()
    nd = len(shape)
    i = core.emit(t, IOTA, shape=shape, dtype="int64", dimension=nd - 2)
    j = core.emit(t, IOTA, shape=shape, dtype="int64", dimension=nd - 1)
    d = ew.subtract(j, i)
    return ew.less_equal(d, int(k)) if lower else ew.greater_equal(d, int(k))


def _tri(m, k, lower):
    x = core.asarray(m)
    if x.ndim == 0:
        raise ValueError(f"{'tril' if lower else 'triu'}: input must be at least 1-d (at {user_loc()})")
    if x.ndim == 1:
        x = core.broadcast_to(x, (x.shape[0], x.shape[0]))
    if isinstance(k, Tracer):
        raise NotImplementedError(f"{'tril' if lower else 'triu'} with a traced k (at {user_loc()})")
    return ew.where(_tri_mask(x.shape, k, lower), x, core.zeros_like(x))


def tril(m, k=0):
    return _tri(m, k, True)


def triu(m, k=0):
    return _tri(m, k, False)


def diagonal(a, offset=0, axis1=0, axis2=1):
    """np.diagonal / x.diagonal / np.diag of a matrix: numpy's read-only view."""
    x = core.asarray(a)
    d = diagonal_values(x, offset, axis1, axis2)
    return fz.read_only_view(x, d, "np.diagonal's result",
                             lambda t, v: diagonal_values(Tracer(v, t), offset, axis1, axis2).value,
                             lambda s: np.diagonal(s, offset, axis1, axis2))


def diagonal_values(a, offset=0, axis1=0, axis2=1):
    x = core.asarray(a)
    if x.ndim < 2:
        raise ValueError(f"diag requires an array of at least two dimensions (at {user_loc()})")
    a1, a2 = core.normalize_axis(axis1, x.ndim, "diagonal"), core.normalize_axis(axis2, x.ndim, "diagonal")
    if a1 == a2:
        raise ValueError(f"diagonal: axis1 and axis2 cannot be the same (at {user_loc()})")
    rest = [d for d in range(x.ndim) if d not in (a1, a2)]
    x = shapes.transpose(x, rest + [a1, a2])
    n1, n2 = x.shape[-2], x.shape[-1]
    off = int(offset)
    if off >= 0:
        L = builtins.max(0, builtins.min(n1, n2 - off))
        x = _sl(_sl(x, x.ndim - 2, 0, L), x.ndim - 1, off, off + L)
    else:
        L = builtins.max(0, builtins.min(n1 + off, n2))
        x = _sl(_sl(x, x.ndim - 2, -off, -off + L), x.ndim - 1, 0, L)
    if L == 0:
        return shapes.reshape(x, x.shape[:-2] + (0,))
    if dtypes.is_complex(x.value.dtype):     # each part on its own, joined exactly
        return core.emit(x._tr, COMPLEX, _diagonal_of_last(ew.real(x)), _diagonal_of_last(ew.imag(x)))
    return _diagonal_of_last(x)


def _diagonal_of_last(x):
    """The main diagonal of x's last two dims (of one length), as a new last dim."""
    eye = ew.logical_and(_tri_mask(x.shape, 0, True), _tri_mask(x.shape, 0, False))
    if x.dtype == np.bool_:
        return red.any(ew.logical_and(eye, x), axis=-1)
    # the one unmasked element of each row, exactly: a max over the row with the rest at the
    # dtype's lowest value (a masked sum would turn -0.0 into 0.0, as 0.0 + -0.0 is 0.0)
    low = -np.inf if x.value.dtype in dtypes.FLOATS + dtypes.HALFS else np.iinfo(x.dtype).min
    return red.max(ew.where(eye, x, core.asarray(np.array(low, x.dtype), t=x._tr)), axis=-1)


def diag(v, k=0):
    x = core.asarray(v)
    k = int(k)
    if x.ndim == 2:
        return diagonal(x, k)
    if x.ndim != 1:
        raise ValueError(f"diag: input must be 1-d or 2-d, got {x.ndim}-d (at {user_loc()})")
    n = x.shape[0]
    m = n + abs(k)
    xp = shapes.concatenate([x, core.zeros_like(x, shape=(abs(k),))], 0) if k else x
    # v[i] sits at row i (k >= 0) or column j (k < 0)
    if k >= 0:
        vb = core.emit(x._tr, BROADCAST_IN_DIM, xp, shape=(m, m), broadcast_dimensions=(0,))
    else:
        vb = core.emit(x._tr, BROADCAST_IN_DIM, xp, shape=(m, m), broadcast_dimensions=(1,))
    mask = ew.logical_and(_tri_mask((m, m), k, True), _tri_mask((m, m), k, False))
    return ew.where(mask, vb, core.zeros_like(vb))


def insert(arr, obj, values, axis=None):
    """numpy's np.insert by numpy's own: np.insert on element numbers (arr's, then the
    values' after them) says which element lands where -- the shape, the order, the values
    broadcast, negative indices, slices, axis=None flattening and the errors are numpy's --
    and one gather from arr and the values (cast to arr's dtype, as numpy does) takes them."""
    if isinstance(obj, Tracer):
        raise NotImplementedError(f"np.insert at traced positions (at {user_loc()})")
    t = core.trace_of(arr, values)
    x = core.asarray(arr, t=t)
    v = core.astype(core.asarray(values, t=t), x.dtype)
    n = int(np.prod(x.shape, dtype=np.int64))
    ids = np.insert(np.arange(n).reshape(x.shape), obj, np.arange(n, n + v.size).reshape(v.shape), axis)
    flat = shapes.concatenate([shapes.reshape(x, (-1,)), shapes.reshape(v, (-1,))], 0)
    return indexing.getitem(flat, ids)


def diagflat(v, k=0):
    """numpy's: v flattened, on the k-th diagonal of a square array."""
    return diag(shapes.ravel(core.asarray(v)), k)


@core.takes_out
def trace(a, offset=0, axis1=0, axis2=1, dtype=None, out=None):
    d = diagonal_values(a, offset, axis1, axis2)
    return red.sum(d, axis=-1, dtype=dtype, out=out)


# ---------------------------------------------------------------------------- kron, cross
def kron(a, b):
    t = core.trace_of(a, b)
    dt = core.result_dtype(a, b)
    x, y = core.asarray(a, dt, t), core.asarray(b, dt, t)
    nd = builtins.max(x.ndim, y.ndim)
    x = shapes.reshape(x, (1,) * (nd - x.ndim) + x.shape)
    y = shapes.reshape(y, (1,) * (nd - y.ndim) + y.shape)
    xs = [v for s in x.shape for v in (s, 1)]
    ys = [v for s in y.shape for v in (1, s)]
    r = ew.multiply(shapes.reshape(x, xs), shapes.reshape(y, ys))
    return shapes.reshape(r, [p * q for p, q in zip(x.shape, y.shape)])


def cross(a, b, axisa=-1, axisb=-1, axisc=-1, axis=None):
    t = core.trace_of(a, b)
    x, y = core.asarray(a, t=t), core.asarray(b, t=t)
    if axis is not None:
        axisa = axisb = axisc = axis
    x = shapes.moveaxis(x, axisa, -1)
    y = shapes.moveaxis(y, axisb, -1)
    if x.shape[-1] not in (2, 3) or y.shape[-1] not in (2, 3):
        raise ValueError(f"incompatible dimensions for cross product (dimension must be 2 or 3), got "
                         f"{x.shape[-1]} and {y.shape[-1]} (at {user_loc()})")
    dt = core.result_dtype(x, y)
    if dt == "bool":
        raise TypeError(f"cross: bool inputs are not supported by numpy's subtract (at {user_loc()})")
    x, y = core.astype(x, dt), core.astype(y, dt)

    def c(v, i):
        return indexing.getitem(v, (Ellipsis, i))

    x0, x1 = c(x, 0), c(x, 1)
    y0, y1 = c(y, 0), c(y, 1)
    z = ew.subtract(ew.multiply(x0, y1), ew.multiply(x1, y0))
    if x.shape[-1] == 2 and y.shape[-1] == 2:
        return z
    x2 = c(x, 2) if x.shape[-1] == 3 else None
    y2 = c(y, 2) if y.shape[-1] == 3 else None
    if x2 is None:
        cx = ew.multiply(x1, y2)
        cy = ew.negative(ew.multiply(x0, y2))
    elif y2 is None:
        cx = ew.negative(ew.multiply(x2, y1))
        cy = ew.multiply(x2, y0)
    else:
        cx = ew.subtract(ew.multiply(x1, y2), ew.multiply(x2, y1))
        cy = ew.subtract(ew.multiply(x2, y0), ew.multiply(x0, y2))
    shape = np.broadcast_shapes(cx.shape, cy.shape, z.shape)
    r = shapes.stack([core.broadcast_to(cx, shape), core.broadcast_to(cy, shape), core.broadcast_to(z, shape)], -1)
    return shapes.moveaxis(r, -1, axisc)
