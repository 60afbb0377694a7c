"""numpy arrays made inside a traced function, then written with traced values.

User code makes its buffers with numpy: `g = np.zeros(n)`, then `g[i] += x[i]`,
`np.add(a, b, out=g)`, `np.add.at(g, idx, v)`, `g += y`. While a thread traces a user's
function, numpy's creation functions (CREATORS) called from the user's code return a
NumpyBuffer (trace.py): an ndarray subclass that is numpy's own array -- numbers,
`isinstance(g, np.ndarray)`, `float(g[0])`, its values usable as configuration -- until a
traced value is written into it or into a view of it. At that write its base turns
traced: a constant of its numbers at that moment becomes a traced array with a Buffer
(functionalize.py), the write goes through it, and from then on every numpy call on the
base, or on any NumpyBuffer viewing its memory, goes to the Tracer of its current value
(a view made before as the same view of the traced base). A buffer never written with a
traced value stays numpy's constant.

numpy's results from NumpyBuffers (g * 2, g[1:], g.reshape(...)) are NumpyBuffers too,
so an array computed from one can take traced values the same way.

The creation functions are replaced in the numpy module only while some thread traces
(`intercepting`, counted across threads). The replacement runs numpy's own function
unchanged unless this thread is tracing and its caller is the user's code (not spmd,
numpy or an installed library), so numpy is as it was for every other caller.
"""
from __future__ import annotations

import builtins
import functools
import sys

import numpy as np

from ..errors import TraceError, is_internal, user_loc
from . import core
from . import functionalize as fz
from . import flat, views
from .masked import Masked
from .patching import while_tracing
from .trace import Hint, NumpyBuffer, Tracer, current_trace, resolve

CREATORS = ("zeros", "empty", "ones", "full", "eye", "identity", "array", "asarray", "asanyarray",
            "ascontiguousarray", "copy", "zeros_like", "ones_like", "empty_like", "full_like")
# numpy functions that build arrays of constants (ranges, grids, windows, frequencies,
# triangles): their results are NumpyBuffers too, so a traced index into them (a gather
# from a constant) or a traced value written into them traces, instead of needing a value
# from the data. (module, name): np.fft's live in numpy.fft.
CONSTANT_MAKERS = tuple((np, name) for name in (
    "arange", "linspace", "logspace", "geomspace", "meshgrid", "indices", "tri", "tril", "triu", "diag",
    "diagflat", "vander", "hanning", "hamming", "blackman", "bartlett", "kaiser", "fromfunction",
    "unravel_index")) + ((np.fft, "fftfreq"), (np.fft, "rfftfreq"))
# numpy functions that convert a list argument themselves (they dispatch on the list, not
# on the arrays in it): while tracing, a list holding traced values is stacked first, as
# numpy would, so the call is traced (np.sum([loss_a, loss_b]))
SEQUENCE_TAKERS = ("sum", "prod", "mean", "average", "max", "min", "amax", "amin", "all", "any", "std", "var",
                   "median", "cumsum", "cumprod", "ptp", "argmax", "argmin", "sort", "argsort", "diff", "nansum",
                   "nanmean", "nanmax", "nanmin", "nanprod", "count_nonzero")
# numpy functions whose dispatch looks at their array argument alone, not at the indices
# (np.take(table, idx)): while tracing, traced indices into a numpy array make the array a
# constant of the program, so the call traces (numpy would need the indices' values)
INDEX_TAKERS = ("take",)
# numpy functions that write into an argument: its position and name (out= is always a write)
WRITES = {np.copyto: (0, "dst"), np.put: (0, "a"), np.put_along_axis: (0, "arr"), np.place: (0, "arr"),
          np.putmask: (0, "a"), np.fill_diagonal: (0, "a")}
WRITING_METHODS = frozenset({"fill", "put", "sort", "partition"})
# ndarray attributes that a traced value changes nothing of, or that only numpy's memory has
_KEPT = frozenset({"shape", "dtype", "ndim", "size", "itemsize", "nbytes", "strides", "flags", "base", "data",
                   "ctypes", "device", "setflags", "to_device", "T", "mT", "real", "imag"})


def numbers(b):
    """The numpy array of b's memory (ndarray's own view: b's methods may be the Tracer's)."""
    return np.ndarray.view(b, np.ndarray)


# -- what a call involves -------------------------------------------------------------------
def _traced(x) -> bool:
    # (a Masked x[mask] is traced too: Y[x[mask]] = 1 indexes the buffer with it)
    return isinstance(x, (Tracer, Masked)) or (isinstance(x, NumpyBuffer) and x.live())


def _any(xs, pred) -> bool:
    """pred of any x in xs, or of an element of a list or tuple among them (one level)."""
    for x in xs:
        if pred(x) or (isinstance(x, (list, tuple)) and builtins.any(pred(e) for e in x)):
            return True
    return False


def traced_call(args, kwargs) -> bool:
    """Does a call with these arguments involve a traced value?"""
    return _any(args, _traced) or _any(kwargs.values(), _traced)


def has_buffers(args, kwargs) -> bool:
    def isbuf(x):
        return isinstance(x, NumpyBuffer)
    return _any(args, isbuf) or _any(kwargs.values(), isbuf)


def _substitute(x, sub):
    if isinstance(x, list):
        return [_substitute(e, sub) for e in x]
    if isinstance(x, tuple):
        return tuple(_substitute(e, sub) for e in x)
    return sub(x) if isinstance(x, NumpyBuffer) else x


def resolve_all(x):
    """x with every NumpyBuffer in it (in lists and tuples too) read as what it holds."""
    return _substitute(x, resolve)


def call(fn, args, kwargs, written=()):
    """fn(*args, **kwargs) where NumpyBuffers meet traced values: a buffer numpy writes into
    (out=, or an argument whose position or name is in `written`) turns traced; the others
    read as their Tracer (traced) or their numbers. A result that is the Tracer of a buffer
    given to be written is that buffer, as numpy returns its out array."""
    back = {}

    def as_written(b):
        tr = b.traced()
        back[id(tr)] = b
        return tr
    args = tuple(_substitute(a, as_written if i in written else resolve) for i, a in enumerate(args))
    kwargs = {k: _substitute(v, as_written if k == "out" or k in written else resolve) for k, v in kwargs.items()}
    return _returned(fn(*args, **kwargs), back)


def _same_kind(seq, items):
    """A tuple, list or namedtuple (np.linalg.svd's SVDResult) like seq, holding items."""
    items = list(items)
    return type(seq)(*items) if hasattr(seq, "_fields") else type(seq)(items)


def _returned(r, back):
    if isinstance(r, tuple):
        return _same_kind(r, (_returned(e, back) for e in r))
    return back.get(id(r), r) if isinstance(r, Tracer) else r


def plain_call(fn, args, kwargs):
    """fn(*args, **kwargs) in numpy on the buffers' memory (nothing traced): an out array
    comes back as the buffer given, a new array as a NumpyBuffer (one viewing a buffer's
    memory, as a view of that buffer)."""
    back, given = {}, []

    def plain(b):
        p = numbers(b)
        back[id(p)] = b
        given.append(b)
        return p
    r = fn(*[_substitute(a, plain) for a in args], **{k: _substitute(v, plain) for k, v in kwargs.items()})
    return _adopt(r, back, given)


def _adopt(r, back, given):
    if isinstance(r, (tuple, list)):
        return _same_kind(r, (_adopt(e, back, given) for e in r))
    if type(r) is not np.ndarray:
        return r
    if id(r) in back:
        return back[id(r)]
    b = r.view(NumpyBuffer)
    for x in given:
        if np.may_share_memory(r, x):
            b._root = x.base_buffer()
            break
    return b


# -- turning traced -------------------------------------------------------------------------
def traced(b):
    """The Tracer the NumpyBuffer b stands for, turning its base traced first."""
    root = b.base_buffer()
    if root._traced is None:
        t = current_trace()
        if t is None:
            raise TraceError(f"a numpy array made inside a traced function is used with a traced value after "
                             f"its tracing ended (at {user_loc()}); return it from the function instead")
        data = np.array(numbers(root), copy=True)
        tr = t.const(data)
        tr._buf = views.Buffer(tr.value, shadow=fz.leaf_layout(data))
        root._traced = tr
    if b is root:
        return root._traced
    if b._traced is None:
        b._traced = _view_of_base(b, root)
    return b._traced


def _view_of_base(b, root):
    """b, a numpy view of root's memory made before root turned traced, as the same view of
    root's Tracer: a basic index where one gives it, else the positions it takes."""
    if b.dtype != root.dtype:
        raise TraceError(f"a traced value is written into a view of a numpy array made with another dtype "
                         f"(.view({b.dtype})) at {user_loc()}: spmd does not reinterpret bytes; write into "
                         f"the array itself")
    idx = _positions(b, root)
    key = _basic_key(b, root, idx)
    rt = root._traced
    if key is not None:
        return rt[key]
    shape = root.shape

    def fwd(t, v):
        return Tracer(v, t).reshape(-1)[idx].value

    def back_(t, v, new):
        whole = Tracer(v, t).reshape(-1).copy()
        whole[idx] = Tracer(new, t)
        return whole.reshape(shape).value
    strides = [s // root.itemsize for s in b.strides]
    return fz.derived_view(rt, fwd(rt._tr, rt.value), "a view of a numpy array made before it was traced",
                           fwd, back_, lambda a: views.shadow_of(b.shape, strides))


def _positions(b, root):
    """For each element of b, the C-order position in root of the memory it is."""
    if not (root.flags.c_contiguous or root.flags.f_contiguous):
        raise TraceError(f"a traced value is written into a numpy array whose memory is not contiguous "
                         f"(at {user_loc()}); write into a copy")
    if b.size == 0:
        return np.zeros(b.shape, np.int64)
    mem = np.empty_like(numbers(root), dtype=np.int64)      # root's memory order
    mem[...] = np.arange(root.size).reshape(root.shape)
    flat = mem.ravel(order="K")
    off = (b.__array_interface__["data"][0] - root.__array_interface__["data"][0]) // root.itemsize
    st = tuple(s // root.itemsize * flat.itemsize for s in b.strides)
    return np.lib.stride_tricks.as_strided(flat[off:], shape=b.shape, strides=st).copy()


def _basic_key(b, root, idx):
    """A basic index of root (ints, slices, None) that takes exactly the positions idx, or None."""
    if b.size == 0 or root.ndim == 0:
        return None
    cs = [int(np.prod(root.shape[d + 1:])) for d in range(root.ndim)]
    first = np.unravel_index(int(idx.flat[0]), root.shape)
    key, cur = [], 0
    for j, n in enumerate(b.shape):
        if n == 1:
            key.append(None)
            continue
        unit = tuple(1 if k == j else 0 for k in range(b.ndim))
        delta = int(idx[unit]) - int(idx.flat[0])
        d = next((d for d in range(cur, root.ndim) if delta and abs(delta) >= cs[d] and delta % cs[d] == 0), None)
        if d is None:
            return None
        key += [int(first[a]) for a in range(cur, d)]
        step = delta // cs[d]
        stop = int(first[d]) + step * n
        key.append(slice(int(first[d]), stop if stop >= 0 else None, step))
        cur = d + 1
    key += [int(first[a]) for a in range(cur, root.ndim)]
    key = tuple(key)
    pos = np.arange(root.size).reshape(root.shape)
    try:
        ok = np.array_equal(pos[key], idx)
    except IndexError:
        ok = False
    return key if ok else None


def _read(b):
    """A NumpyBuffer read by a traced operation: its Tracer, or a constant of its numbers."""
    return b.traced() if b.live() else current_trace().const(numbers(b))


# -- the NumpyBuffer's behaviour ------------------------------------------------------------
def _finalize(self, obj):
    # a new NumpyBuffer made by numpy from another: a view of the same memory, or new memory
    root = obj.base_buffer() if isinstance(obj, NumpyBuffer) else None
    self._root = root if root is not None and np.may_share_memory(self, root) else None
    self._traced = None


def _array_ufunc(self, ufunc, method, *inputs, **kwargs):
    fn = ufunc if method == "__call__" else getattr(ufunc, method)
    if traced_call(inputs, kwargs):
        return call(fn, inputs, kwargs, (0,) if method == "at" else ())
    return plain_call(fn, inputs, kwargs)


def _array_function(self, func, types, args, kwargs):
    if traced_call(args, kwargs):
        return call(func, args, kwargs, WRITES.get(func, ()))
    return plain_call(func, args, kwargs)


def _getitem(self, key):
    if self.live() or traced_call((key,), {}):
        return _read(self)[resolve_all(key)]
    return np.ndarray.__getitem__(self, key)


def _setitem(self, key, value):
    if self.live() or traced_call((key, value), {}):
        self.traced()[resolve_all(key)] = resolve_all(value)
    else:
        np.ndarray.__setitem__(self, key, value)


def _forward(name, base):
    """ndarray.<name>: numpy's on numbers; with a traced value, the Tracer's."""
    writes = name in WRITING_METHODS

    def m(self, *args, **kwargs):
        if self.live() or traced_call(args, kwargs):
            target = self.traced() if writes else _read(self)
            return call(getattr(target, name), args, kwargs)
        return base(self, *args, **kwargs)
    m.__name__ = m.__qualname__ = name
    m.__doc__ = getattr(base, "__doc__", None)
    return m


def _forward_property(name):
    prop = getattr(np.ndarray, name)

    def get(self):
        return getattr(self.traced(), name) if self.live() else prop.__get__(self)

    def set_(self, v):
        if self.live() or _traced(v):
            setattr(self.traced(), name, resolve(v))
        else:
            prop.__set__(self, v)
    return property(get, set_ if name in ("real", "imag") else None)


def _repr(self):
    if self.live():
        return f"{self.traced()!r} (a numpy array made in the function, traced since a traced value was written into it)"
    return repr(self.view(np.ndarray))


def install(cls):
    """Give NumpyBuffer its behaviour: numpy's on numbers, the Tracer's once traced."""
    for name in dir(np.ndarray):
        attr = getattr(np.ndarray, name)
        if name.startswith("_") or name in _KEPT or not callable(attr):
            continue
        setattr(cls, name, _forward(name, attr))
    for name in ("T", "mT", "real", "imag"):
        setattr(cls, name, _forward_property(name))
    # numpy's flat iterator reads and writes memory a traced value never reaches
    cls.flat = property(flat.Flat, lambda x, v: flat.Flat(x).__setitem__(slice(None), v))
    for name in ("__float__", "__int__", "__index__", "__bool__", "__complex__", "__iter__", "__copy__",
                 "__deepcopy__"):
        setattr(cls, name, _forward(name, getattr(np.ndarray, name)))
    cls.__array_finalize__ = _finalize
    cls.__array_ufunc__ = _array_ufunc
    cls.__array_function__ = _array_function
    cls.__getitem__ = _getitem
    cls.__setitem__ = _setitem
    cls.__repr__ = cls.__str__ = _repr
    cls.traced = traced


# -- numpy's creation functions while tracing -------------------------------------------------
def as_buffer(r):
    """An ndarray made while tracing, as an array the function made (a NumpyBuffer)."""
    return r.view(NumpyBuffer) if type(r) is np.ndarray else r


def _deep_traced(x) -> bool:
    if isinstance(x, (list, tuple)):
        return builtins.any(_deep_traced(e) for e in x)
    return _traced(x)


def _make_new(f, args, kwargs):
    return as_buffer(f(*args, **kwargs))


def _make_constant(f, args, kwargs):
    """A constant-building function's result(s) as NumpyBuffers; one viewing an argument's
    memory (np.meshgrid(..., copy=False), np.diag of a 2-d array) stays numpy's view, so a
    write into it still reaches that argument as in numpy."""
    r = f(*args, **kwargs)
    given = [a for a in list(args) + list(kwargs.values()) if isinstance(a, np.ndarray)]

    def adopt(x):
        if type(x) is not np.ndarray or builtins.any(np.may_share_memory(x, a) for a in given):
            return x
        return x.view(NumpyBuffer)
    return type(r)(adopt(x) for x in r) if isinstance(r, (tuple, list)) else adopt(r)


def _make_full(f, args, kwargs):
    """np.full / np.full_like with a traced fill value: numpy's array of the shape, then
    the value written into it."""
    fill_at = 1
    fill = kwargs.pop("fill_value") if "fill_value" in kwargs else args[fill_at]
    if not _deep_traced(fill):
        return as_buffer(f(*args[:fill_at], fill, *args[fill_at + 1:], **kwargs))
    args = args[:fill_at] + args[fill_at + 1:]
    if f.__name__ == "full" and kwargs.get("dtype") is None and len(args) < 2:
        kwargs["dtype"] = core.asarray(resolve(fill) if isinstance(fill, NumpyBuffer) else fill).dtype
    b = as_buffer(f(*args[:fill_at], 0, *args[fill_at:], **kwargs))
    b[...] = fill
    return b


def _make_array(f, args, kwargs):
    """np.array / asarray / asanyarray / ascontiguousarray / copy: of traced values, the
    traced array (a copy where numpy copies); else numpy's, new memory as a NumpyBuffer."""
    obj = args[0] if args else kwargs.get("a", kwargs.get("object"))
    if isinstance(obj, Masked) and kwargs.get("ndmin", 0) <= obj.ndim:
        # x[mask] converted (np.polynomial's mapdomain, np.asanyarray at a library's entry):
        # the selection still, its elements new or converted where numpy's would be; a
        # selection is dense in numpy's compacted layout, so any order is that layout
        dtype = kwargs.get("dtype", args[1] if len(args) > 1 else None)
        r = obj if dtype is None else obj.astype(dtype)
        copies = f.__name__ in ("array", "copy") and kwargs.get("copy", True) is not False
        return r.copy() if copies and r is obj else r
    if _deep_traced(obj):
        dtype = kwargs.get("dtype", args[1] if len(args) > 1 else None)
        r = core.asarray(resolve_all(obj), dtype)
        copies = f.__name__ in ("array", "copy") and kwargs.get("copy", True) is not False
        if copies or r is not resolve(obj) or not isinstance(obj, (Tracer, NumpyBuffer)):
            order = "C" if f.__name__ == "ascontiguousarray" else kwargs.get("order", "K")
            r = fz.new_array(_copy_in_order(r, resolve(obj), order))
            ndmin = kwargs.get("ndmin", 0)
            if ndmin > r.ndim:
                r = r.reshape((1,) * (ndmin - r.ndim) + r.shape)
            return r
        return obj
    r = f(*args, **kwargs)
    if r is obj:
        return r
    return _adopt(r, {}, [obj] if isinstance(obj, NumpyBuffer) else [])


def _copy_in_order(r, x, order):
    """numpy's new array of r's values (x's, converted), laid out as `order` says: "K"
    like x alone (views.order_of: a broadcast's repeated axes innermost), "C" in C order,
    "F" in F order, "A" F only where x is F- and not C-contiguous."""
    if order in (None, "K"):
        return core.order_like(fz.fresh(r), x) if isinstance(x, Tracer) else fz.fresh(r)
    if order not in ("C", "F", "A"):
        raise ValueError(f"order must be one of 'C', 'F', 'A', or 'K' (got {order!r})")
    c = fz.fresh(r)
    fortran = order == "F" or (order == "A" and isinstance(x, Tracer) and x.ndim > 1
                               and x._layout().flags.f_contiguous and not x._layout().flags.c_contiguous)
    if fortran and c.ndim > 1:
        shape = c.shape
        c._hint = Hint(lambda: views.dense(shape, tuple(range(len(shape)))[::-1]))
    else:
        c._hint = None
    return c


def _make_from_sequence(f, args, kwargs):
    if args and isinstance(args[0], (list, tuple)) and _deep_traced(args[0]):
        args = (core.asarray(resolve_all(args[0])),) + args[1:]
    return f(*args, **kwargs)


def _take_at_traced(f, args, kwargs):
    indices = args[1] if len(args) > 1 else kwargs.get("indices")
    if _deep_traced([indices]) and not _deep_traced(args[:1]) and args and kwargs.get("out") is None:
        args = (core.asarray(np.asarray(args[0]), t=current_trace()),) + tuple(args[1:])
    return f(*args, **kwargs)


_MAKERS = {**{name: _make_from_sequence for name in SEQUENCE_TAKERS}, **{name: _take_at_traced for name in INDEX_TAKERS}, "full": _make_full, "full_like": _make_full, "array": _make_array, "asarray": _make_array,
           "asanyarray": _make_array, "ascontiguousarray": _make_array, "copy": _make_array}


def _is_users(filename) -> bool:
    return not is_internal(filename) and "site-packages" not in filename and "dist-packages" not in filename


def _creator(name, f, make=None):
    make = make or _MAKERS.get(name, _make_new)

    @functools.wraps(f)
    def creator(*args, **kwargs):
        if current_trace() is None or not _is_users(sys._getframe(1).f_code.co_filename):
            return f(*args, **kwargs)
        return make(f, args, kwargs)
    creator.spmd_original = f
    return creator


def _install():
    for name in CREATORS + SEQUENCE_TAKERS + INDEX_TAKERS:
        setattr(np, name, _creator(name, getattr(np, name)))
    for mod, name in CONSTANT_MAKERS:
        setattr(mod, name, _creator(name, getattr(mod, name), _make_constant))


def _restore():
    for name in CREATORS + SEQUENCE_TAKERS + INDEX_TAKERS:
        setattr(np, name, getattr(np, name).spmd_original)
    for mod, name in CONSTANT_MAKERS:
        setattr(mod, name, getattr(mod, name).spmd_original)


# numpy's creation functions (and CONSTANT_MAKERS) make NumpyBuffers (and SEQUENCE_TAKERS
# stack lists of traced values) for the user's code of the threads tracing, while this
# context is open in any thread
intercepting = while_tracing(_install, _restore)
