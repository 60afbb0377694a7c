"""numpy's write semantics on traced arrays, as functionalization.

A traced array that has been written, or that another array is a view of, refers to a
`Buffer` (views.py): a mutable cell holding the current IR Value of its *base* array. A
view (basic indexing, .T / transpose, reshape / ravel where numpy gives a view, squeeze,
expand_dims) keeps the base's Buffer and a *view chain*: the steps that derive the view
from the base, each knowing both directions (views.py).

A write (`x[i] = v`, `x += v`, `out=`, `np.copyto`, ...) computes the written array's
new value, runs it back through the chain to a new base value and stores that in the
Buffer, bumping its version. Reading any Tracer of that Buffer re-derives its value
from the base's current value when the version moved (Tracer.value). So a write through
any view is seen by the base and every other view of it, as in numpy, and the IR stays
SSA.
"""
from __future__ import annotations

import builtins

import numpy as np

from ..errors import ShapeError, TraceError, user_loc
from ..ir import Value, dtypes
from ..ir.ops.elementwise import BITCAST_DTYPES
from ..ir.ops.names import BITCAST
from . import core
from . import elementwise as ew
from .trace import Tracer
from . import views
from .views import Buffer, Derived, back, fwd, layout, read_only_step, reshape_is_view


def write(x, new):
    """Make the traced array x hold the Value `new` (its shape and dtype), updating the
    base it is a view of, so the base and all its views see it. A read-only view (numpy's
    broadcast_to, diagonal, ...) raises numpy's ValueError instead."""
    assert new.shape == x.shape and new.dtype == x.value.dtype, (new, x)
    if read_only(x) is not None:
        raise read_only_error(read_only(x))
    t = x._tr
    buf = x._ensure_buffer()
    vals = _sources(t, buf.value, x._view)
    v = new
    for step, src in zip(reversed(x._view), reversed(vals)):
        v = back(t, step, src, v)
    buf.value = v
    buf.version += 1
    x._val, x._ver = new, buf.version


def _sources(t, base, chain):
    """The value each step of the view chain takes (the base's, then each step's), as
    back() reads them: computed up to the last step that reads its source's value (a
    slice writes into it), shape and dtype alone after that (a reshape back needs no
    more), so writing x[i, j] = v emits no dead view of x."""
    last = max((i for i, step in enumerate(chain) if views.reads_source(step)), default=0)
    vals = [base]
    for i, step in enumerate(chain[:-1]):
        # (a derived step reads its source: it is never past `last`, where fwd_aval is asked)
        av = views.fwd_aval(step, vals[-1].shape, vals[-1].dtype) if i + 1 > last else None
        vals.append(Value(*av) if av is not None else fwd(t, step, vals[-1]))   # (a Value not in the graph)
    return vals


def read_only(x):
    """What made the traced array x read-only (a description), or None if it is writable."""
    ro = read_only_step(x._view)
    return ro.what if ro is not None else None


def read_only_error(what):
    return ValueError(f"assignment destination is read-only (numpy raises the same ValueError): the array "
                      f"written at {user_loc()} is {what}, a read-only view. Write into a copy (.copy()) or "
                      f"into the array it views.")


def check_cast(op, src_dtype, dst_dtype, loc):
    """numpy's same_kind rule for in-place ufuncs (x += 1.5 on an int array raises)."""
    if not np.can_cast(np.dtype(src_dtype), np.dtype(dst_dtype), "same_kind"):
        raise TypeError(f"{op} at {loc}: Cannot cast ufunc output from dtype('{np.dtype(src_dtype)}') to "
                        f"dtype('{np.dtype(dst_dtype)}') with casting rule 'same_kind' (numpy raises "
                        f"the same UFuncTypeError); write x = x + y (a new array of the wider dtype) or cast "
                        f"the right-hand side with .astype")


def no_plain_write(what, loc):
    raise TraceError(f"{what} at {loc}: numpy cannot store a traced value into a numpy array made outside the "
                     f"function (a global, a closure) or by a numpy function spmd does not watch (np.arange, "
                     f"a global's .copy()). Copy it inside the function first: buf = np.array(a), or make it "
                     f"there with np.zeros / np.empty / np.full (those take traced values as in numpy).")


def as_argument(x, k, leaf=None):
    """x, the traced argument leaf k, as an array numpy could write into in place: a base
    whose Buffer remembers the leaf (jit returns its new value to the caller), laid out as
    the leaf is (leaf_layout)."""
    x._buf = Buffer(x.value, arg=k, shadow=leaf_layout(leaf))
    return x


def layout_key(leaf):
    """What of an argument leaf's memory layout a trace depends on (None: C order): part of
    jit's cache key, as a reshape of it is a view or a copy by its strides."""
    lay = leaf_layout(leaf)
    return None if lay is None else lay.strides


def leaf_layout(leaf):
    """numpy's strides of an argument leaf where they are not C order's (a numpy array's
    own, an eager spmd.Array's numpy_layout) as a memory-free ndarray (views.layout), else None."""
    if isinstance(leaf, np.ndarray) and leaf.ndim > 1 and not leaf.flags.c_contiguous \
            and all(st % leaf.itemsize == 0 for st in leaf.strides):
        return views.shadow_of(leaf.shape, [st // leaf.itemsize for st in leaf.strides])
    layout = getattr(leaf, "numpy_layout", None)
    return layout if layout is not None and layout.shape == tuple(leaf.shape) else None


def written_arguments(xs, inputs):
    """(leaf, new Value) of each argument in xs (traced by as_argument from the Values
    `inputs`) that the function wrote."""
    return [(x._buf.arg, x._buf.value) for x in xs
            if x._buf is not None and x._buf.arg is not None and x._buf.value is not inputs[x._buf.arg]]


def is_view_of(r, x) -> bool:
    """Is the traced result r a view of the traced array x (numpy's `r.base is x.base`)?"""
    return isinstance(r, Tracer) and isinstance(x, Tracer) and r is not x and x._buf is not None \
        and r._buf is x._buf


def layout_of(x):
    """The strides numpy would give the traced array x (a memory-free ndarray, see
    views.layout): x's base taken through x's view chain."""
    return x._layout()


def numpy_layout(x):
    """numpy's strides for x where they are not C order's, else None (for eager mode to
    keep with its result): a view's through its chain, a new array's as numpy lays it out."""
    if x._c_order() or x.ndim < 2:
        return None
    lay = x._layout() if x._view else views.keep_order([x._layout()], x.shape)
    return None if lay.flags.c_contiguous else lay


def same_base(x, y) -> bool:
    """Do the traced arrays x and y share a base (numpy's `x.base is y.base`)?"""
    return x._ensure_buffer() is y._ensure_buffer()


# -- the numpy layer: views, in-place operators, out=, copyto, fill -------------------------
def is_scalar(x) -> bool:
    """Is the traced x a numpy scalar (a 0-d result of a reduction, a ufunc, x[i, j]): not
    an array, so immutable (x += 1 rebinds the name) and never viewed (np.atleast_1d(s)
    copies it)? A 0-d array (np.zeros(()), a 0-d view, an argument) has a Buffer."""
    return x.ndim == 0 and x._buf is None


def new_array(r):
    """A new array holding r's value (numpy's np.array, np.zeros_like, ...): an array even
    when 0-d, unlike a numpy scalar."""
    a = fresh(r)
    a._ensure_buffer()
    return a


def makes_array(f):
    """A builder whose numpy result is a new array (np.zeros_like, ...), 0-d ones included."""
    def g(*args, **kwargs):
        return new_array(f(*args, **kwargs))
    g.__name__, g.__doc__ = f.__name__, f.__doc__
    return g


def view_of(x, r, steps):
    """r (computed from x's current value through `steps`) as a view of x. A numpy scalar
    x has no memory to view: numpy gives a new array, or a new scalar where the result
    is 0-d (s.view(), s.T, s.reshape(()))."""
    if is_scalar(x):
        r = r if isinstance(r, Tracer) else Tracer(r, x._tr, x.weak)
        return fresh(r) if r.ndim == 0 else new_array(r)
    buf = x._ensure_buffer()
    v = Tracer(r.value if isinstance(r, Tracer) else r, x._tr, x.weak)
    v._buf, v._view, v._ver = buf, x._view + tuple(steps), buf.version
    return v


def view_to_write(x, steps):
    """x's view through `steps`, made to be written whole (x[key] = v): its value is not
    computed (the write sets it, and reads only its shape and dtype), where the steps
    say what those are."""
    av = (x.shape, x.value.dtype)
    for step in steps:
        av = views.fwd_aval(step, *av) if av is not None else None
    if av is None or is_scalar(x):
        return view_of(x, views.derive(x._tr, x.value, steps), steps)
    return view_of(x, Value(*av), steps)         # (a Value not in the graph, replaced by the write)


def fresh(r):
    """A new base holding r's value: what numpy returns when it copies (laid out like r,
    numpy's order="K")."""
    return core.keep_layout(Tracer(r.value, r._tr, r.weak), r)


def read_only_view(x, r, what, derive, strides):
    """r, computed from x by `derive(trace, x's value)`, as a read-only view of x: it shows
    later writes into x, and a write through it raises (numpy's broadcast_to, diagonal).
    `strides(ndarray)` is numpy's own function, to give the view numpy's strides."""
    return view_of(x, r, [("derived", Derived(what, derive, None, strides))])


def derived_view(x, r, what, derive, back_, strides):
    """r = derive(trace, x's value) as a view of x that writes through: back_(trace, x's
    value, r's new value) gives x's new value (see views.Derived)."""
    return view_of(x, r, [("derived", Derived(what, derive, back_, strides))])


def real_view(x):
    """x.real / np.real: a view of a complex x's real parts (a write sets them and keeps
    the imaginary parts); x itself for a real x, as numpy's `x.real is x`."""
    x = core.asarray(x)
    if dtypes.is_complex(x.value.dtype):
        return view_of(x, ew.real(x), [("real", None)])
    return view_of(x, x, [])


def imag_view(x):
    """x.imag / np.imag: a view of a complex x's imaginary parts; for a real x, numpy's
    read-only array of zeros (a new array, not a view of x)."""
    x = core.asarray(x)
    if dtypes.is_complex(x.value.dtype):
        return view_of(x, ew.imag(x), [("imag", None)])
    zeros = fresh(core.zeros_like(x))
    return read_only_view(zeros, zeros, "the imaginary part of a real array (x.imag)",
                          lambda t, v: v, lambda a: a)


def view_method(x, dtype=None, type=None):
    """x.view(): a new array object of the same data, so writes through either show in
    both. x.view(dtype) of a dtype of the same size reads the same bytes as that dtype
    (bitcast), writes through it too; of another size (the last dim changes) spmd does not."""
    if dtype is not None and not (isinstance(dtype, builtins.type) and issubclass(dtype, np.ndarray)) \
            and np.dtype(dtype) != x.dtype:
        dt = np.dtype(dtype)
        if dt.name in BITCAST_DTYPES and x.dtype.name in BITCAST_DTYPES and dt.itemsize == x.dtype.itemsize:
            x = core.asarray(x)
            return view_of(x, core.emit(x._tr, BITCAST, x, dtype=dt.name), [("bitcast", dt.name)])
        raise NotImplementedError(f"x.view({dt.name}) at {user_loc()} reinterprets the bytes of a "
                                  f"{x.dtype} array as {dt.name}: spmd does this for dtypes of the same size "
                                  f"({', '.join(BITCAST_DTYPES)}); convert the values with "
                                  f"x.astype({dt.name}) (a copy)")
    return view_of(x, x, [])


def as_view(f, kind):
    """Wrap a builder whose numpy result is a view of its first argument: a transpose
    (transpose, swapaxes, moveaxis, .T) or a reshape (reshape, squeeze, expand_dims; a
    copy where numpy's strides do not allow a view; ravel: a view of a contiguous array)."""
    def g(x, *args, **kwargs):
        r = f(x, *args, **kwargs)
        if not isinstance(x, Tracer) or not isinstance(r, Tracer):
            return r
        if is_scalar(x):
            return fresh(r) if r.ndim == 0 else new_array(r)
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
    # view or copy follows x's strides, which eager mode must give the program (eager/programs.py)
    g.depends_on_layout = kind != "transpose"
    return g


def assign(x, r, what, casting="same_kind", where=True, exact=False):
    """numpy's store of a computed result r into the existing array x (an in-place
    operator, out=, copyto): the shapes must match after broadcasting r (a reduction's
    out=, `exact`: without broadcasting), the dtype cast follows `casting`, and where a
    `where=` mask is False, x keeps its values."""
    if not isinstance(x, Tracer):
        no_plain_write(what, user_loc())
    # a Python number is weak (NEP 50): it casts as x's dtype combined with it would
    weak = core.result_dtype(x, r) if type(r) in (bool, int, float, complex) else None
    core.check_int_fits(r, x.dtype)
    r = core.asarray(r, t=x._tr)
    try:
        ok = np.broadcast_shapes(r.shape, x.shape) == x.shape and (not exact or r.shape == x.shape)
    except ValueError:
        ok = False
    if not ok:
        raise ShapeError(f"{what} at {user_loc()}: non-broadcastable output operand with shape "
                         f"{tuple(x.shape)} doesn't match the broadcast shape {tuple(r.shape)} (numpy "
                         f"raises the same ValueError)")
    if casting != "unsafe":
        if not np.can_cast(weak or r.dtype, x.dtype, casting):
            raise TypeError(f"{what} at {user_loc()}: Cannot cast ufunc output from {r.dtype!r} to "
                            f"{x.dtype!r} with casting rule {casting!r} (numpy raises the same "
                            f"UFuncTypeError); write x = x + y for a new array of the wider dtype, or "
                            f"cast with .astype")
    new = core.broadcast_to(core.astype(r, x.dtype), x.shape)
    if where is not True:
        new = ew.where(where, new, x)
        if new.shape != x.shape:
            raise ShapeError(f"{what} at {user_loc()}: the where= mask of shape {list(core.asarray(where).shape)} "
                             f"does not broadcast to the output's shape {list(x.shape)}")
    write(x, new.value)
    return x


def inplace(f, name):
    """x op= y: numpy computes op(x, y) and stores it into x (a view writes its base).
    A numpy *scalar* (a 0-d result that was never an array, or a Python number argument)
    is immutable, so there Python rebinds the name instead, as in numpy."""
    def g(x, y):
        r = f(x, y)
        if x.weak or is_scalar(x):
            return r
        return assign(x, r, f"{name}=")
    g.__name__ = f"__i{name}__"
    return g


def copyto(dst, src, casting="same_kind", where=True):
    assign(dst, src, "np.copyto", casting, where)


def fill(x, value):
    if isinstance(value, Tracer) and value.ndim:
        raise ValueError("fill: the value must be a scalar (numpy raises the same)")
    core.check_int_fits(value, x.dtype)
    assign(x, core.full_like(x, value) if not isinstance(value, Tracer) else value, "ndarray.fill", "unsafe")


def store_out(out, r, what, where=True, casting="same_kind", exact=False):
    """A ufunc / function called with out=: compute, then store into out (numpy returns
    out); with where=, only where the mask is True."""
    outs = out if isinstance(out, tuple) else (out,)
    rs = r if isinstance(r, tuple) else (r,)
    if len(outs) != len(rs):
        raise ValueError(f"{what}: out= has {len(outs)} arrays for {len(rs)} results")
    for o, v in zip(outs, rs):
        if o is not None:
            assign(o, v, f"{what}(..., out=)", casting, where, exact)
    res = tuple(o if o is not None else v for o, v in zip(outs, rs))
    return res if isinstance(r, tuple) else res[0]


def fresh_result(r, inputs):
    """numpy returns a new array unless it documents a view: a builder that handed back
    one of its inputs (x + 0 folded, astype to the same dtype, ...) gets a fresh base,
    so a later write to the result does not reach the input."""
    if isinstance(r, Tracer) and any(r is i for i in inputs):
        return fresh(r)
    return r
