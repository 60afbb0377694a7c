"""Eager mode: numpy on spmd.Arrays outside of jit runs sharded, one op at a time.

Every numpy function, ufunc, ndarray method, operator and index on an spmd.Array comes
here. The op is run as a small partitioned program: spmd.jit of a one-op function that
calls the same builder the tracer uses (numpy_api.API; there is no second list), compiled
once per (op, argument shapes, dtypes, shardings, static arguments) and cached. The
result is an spmd.Array with the sharding propagation chose; nothing is gathered.

Arguments: spmd.Arrays and ndarrays are the program's inputs (an ndarray is placed
replicated); Python and numpy scalars are inputs of ufuncs and operators (weak, NEP 50)
so `x * alpha` compiles once for every alpha; everything else (axis=, shapes, dtypes,
index slices) is static and part of the cache key. An integer index `x[i]` is an
input too (bounds are checked here, as numpy does), so a per-sample loop compiles once.

In-place methods and writes (`x[k] = v`, `x += v`, `x.fill(v)`) compute the new value
with such a program and rebind the Array's shards to it. `y = x[basic index]` is a view
in numpy: a write to y writes x through (y remembers its base and index), and a view read
after its base was written raises an error instead of returning stale data.

What spmd cannot run eagerly falls back to numpy on the gathered values, with a
UserWarning naming the function and the bytes gathered (once per call site; make it an
error with `python -W error::UserWarning`). Its array results are placed back on the mesh,
replicated.

Reading values (`.numpy()`, `np.asarray`, printing, `float`, `bool`, `.item()`) is the
documented way data leaves the mesh; reading a replicated Array (every 0-d result, every
full reduction) is local on every backend.
"""
from __future__ import annotations

import sys
import warnings

import numpy as np

from ..frontend import numpy_api as npx
from ..errors import is_internal
from ..frontend import core, indexing, reductions as red, shapes
from ..frontend import elementwise as ew
from ..frontend.trace import Tracer, current_trace
from ..errors import TraceError
from ..runtime.array import Array, device_put
from ..tree import tree_flatten, tree_unflatten

_CACHE: dict = {}          # key -> a jitted one-op function, or _FALLBACK
_FALLBACK = object()
_COLLECTIVES: dict = {}    # key -> the collectives its program runs, by op name
# counters since import (tests and users may reset them): one-op programs compiled and
# run, fallbacks to numpy, and the collectives the eager programs ran, by op name
STATS = {"compiled": 0, "calls": 0, "fallbacks": 0, "collectives": {}}


def reset_stats():
    STATS.update(compiled=0, calls=0, fallbacks=0, collectives={})

_BY_UFUNC = npx.UFUNCS
_BY_FUNCTION = npx.FUNCTIONS
_METHODS = npx.METHODS
_OPERATORS = npx.operators()
_META = {np.shape: lambda a: a.shape, np.ndim: lambda a: a.ndim, np.size: lambda a: a.size}


def _is_array_leaf(x):
    return isinstance(x, (Array, np.ndarray))


def _static_key(x):
    """A hashable stand-in for a static argument leaf."""
    if isinstance(x, slice):
        return ("slice", x.start, x.stop, x.step)
    if isinstance(x, np.dtype) or isinstance(x, type):
        return ("dtype", str(np.dtype(x)) if x is not None else None)
    try:
        hash(x)
    except TypeError:
        raise _Unhashable(x) from None
    return (type(x).__name__, x)


class _Unhashable(Exception):
    pass


def _user_stacklevel():
    """warnings.warn's stacklevel that points at the user's line."""
    f, level = sys._getframe(1), 1
    while f is not None and is_internal(f.f_code.co_filename):
        f, level = f.f_back, level + 1
    return level


def _dyn_aval(x):
    if isinstance(x, Array):
        return ("A", x.shape, x.dtype.str, x.sharding)
    if isinstance(x, np.ndarray):
        return ("N", x.shape, x.dtype.str)
    if isinstance(x, np.generic):
        return ("G", x.dtype.str)
    return ("S", type(x).__name__)        # a Python scalar: weak


def _dynamic_scalar(x):
    """A scalar that may be a program input. A Python int outside int32's range is static,
    so the builder sees its value: numpy raises OverflowError for it against an int32
    array (as a traced input it would wrap silently)."""
    if type(x) is int:
        return -2 ** 31 <= x < 2 ** 31
    return isinstance(x, (bool, int, float, complex, np.generic))


def _name(kind, name):
    return {"ufunc": f"np.{name}", "function": f"np.{name}", "method": f"ndarray.{name}",
            "operator": name}.get(kind, name)


def run(kind, name, builder, args, kwargs, scalars_dynamic=False, out_sharding=None):
    """Run builder(*args, **kwargs) as a cached one-op partitioned program (its result laid
    out by `out_sharding` if given, as an in-place write keeps its target's)."""
    STATS["calls"] += 1
    leaves, tree = tree_flatten((tuple(args), dict(kwargs)), is_leaf=_is_array_leaf)
    for x in leaves:
        if isinstance(x, Array):
            _check_fresh(x)
    dyn, key = [], [kind, name, tree, out_sharding]
    for x in leaves:
        dynamic = isinstance(x, (Array, np.ndarray)) or (scalars_dynamic and _dynamic_scalar(x))
        if dynamic:
            dyn.append(x)
            key.append(_dyn_aval(x))
        else:
            try:
                key.append(_static_key(x))
            except _Unhashable:
                return _fallback(kind, name, args, kwargs, "an unhashable argument")
    key = tuple(key)
    f = _CACHE.get(key)
    if f is None:
        f = _CACHE[key] = _make(kind, name, builder, tree, leaves, scalars_dynamic, out_sharding)
    if f is _FALLBACK:
        return _fallback(kind, name, args, kwargs, "spmd cannot run it")
    try:
        out = f(*dyn)
    except (NotImplementedError, TraceError) as e:
        _CACHE[key] = _FALLBACK
        return _fallback(kind, name, args, kwargs, str(e).split(" (at ")[0])
    ops = _COLLECTIVES.get(key)
    if ops is None:
        low = f.lower(*dyn)
        ops = _COLLECTIVES[key] = [c["op"] for c in low.report()["collectives"]] if low.mesh else []
    for o in ops:
        STATS["collectives"][o] = STATS["collectives"].get(o, 0) + 1
    if name in _VIEWS and isinstance(out, Array) and isinstance(args[0], Array):
        out._view = (args[0], None, _version(args[0]))     # numpy's result is a view
    return out


# what numpy returns as a view of its first argument (getitem's basic indexing is below)
_VIEWS = {"T", "mT", "transpose", "reshape", "ravel", "swapaxes", "moveaxis", "squeeze", "expand_dims",
          "atleast_1d", "broadcast_to"}


def _make(kind, name, builder, tree, leaves, scalars_dynamic, out_sharding):
    from ..api import jit
    is_dyn = [isinstance(x, (Array, np.ndarray)) or (scalars_dynamic and _dynamic_scalar(x)) for x in leaves]
    static = [None if d else x for x, d in zip(leaves, is_dyn)]

    def one_op(*dyn):
        it = iter(dyn)
        full = [next(it) if d else x for x, d in zip(static, is_dyn)]
        a, k = tree_unflatten(tree, full)
        return builder(*a, **k)

    one_op.__name__ = one_op.__qualname__ = f"eager_{name.strip('_')}"
    STATS["compiled"] += 1
    return jit(one_op, out_shardings=out_sharding)


def _gathered(x):
    return x.numpy() if isinstance(x, Array) else x


def _fallback(kind, name, args, kwargs, why):
    """numpy on the gathered values, with a warning naming the bytes gathered."""
    func = name
    leaves, tree = tree_flatten((tuple(args), dict(kwargs)), is_leaf=_is_array_leaf)
    arrays = [x for x in leaves if isinstance(x, Array)]
    nbytes = sum(x.nbytes for x in arrays)
    mesh = arrays[0].sharding.mesh if arrays else None
    if kind == "function" and callable(name):
        name = getattr(name, "__name__", str(name))
    if nbytes and not all(x.is_fully_replicated for x in arrays):
        # (replicated values are read locally: nothing leaves the mesh, nothing to warn about)
        STATS["fallbacks"] += 1
        warnings.warn(f"spmd: {_name(kind, name)} on an spmd.Array runs in numpy on the gathered value "
                      f"({nbytes} bytes gathered): {why}", UserWarning, stacklevel=_user_stacklevel())
    a, k = tree_unflatten(tree, [_gathered(x) for x in leaves])
    out = _call_numpy(kind, func if kind == "function" else name, a, k)
    if kind == "function" and func in _WRITES_FIRST and args and isinstance(args[0], Array):
        set_value(args[0], a[0])         # numpy wrote the gathered copy: the Array takes it
    return _place(out, mesh)


# numpy functions that write into their first argument (a fallback must write it back)
_WRITES_FIRST = {np.place, np.putmask, np.copyto, np.put, np.put_along_axis, np.fill_diagonal}


def _call_numpy(kind, name, a, k):
    if kind == "ufunc":
        ufunc, _, method = name.partition(".")          # "add.accumulate": np.add.accumulate
        return getattr(getattr(np, ufunc), method or "__call__")(*a, **k)
    if kind == "function":
        return name(*a, **k) if callable(name) else getattr(np, name)(*a, **k)
    if kind == "method":
        return getattr(np.asarray(a[0]), name)(*a[1:], **k)
    if kind == "operator":
        import operator
        return getattr(operator, name)(*a, **k)
    raise AssertionError(kind)


def _place(out, mesh):
    if mesh is None:
        return out
    if isinstance(out, np.ndarray) and out.dtype.kind in "biuf":
        return device_put(out, mesh.sharding())
    if isinstance(out, tuple):
        return tuple(_place(o, mesh) for o in out)
    return out


# -- the protocols on spmd.Array --------------------------------------------------------------
def _has_tracer(xs):
    leaves, _ = tree_flatten(xs, is_leaf=_is_array_leaf)
    return any(isinstance(x, Tracer) for x in leaves)


def array_ufunc(self, ufunc, method, *inputs, **kwargs):
    if current_trace() is not None or _has_tracer((inputs, kwargs)):
        return NotImplemented
    out = kwargs.pop("out", None)
    name = ufunc.__name__
    if method == "__call__" and name in _BY_UFUNC:
        dtype = kwargs.pop("dtype", None)
        if kwargs:
            r = _fallback("ufunc", name, inputs, kwargs, f"keyword arguments {sorted(kwargs)}")
        else:
            r = run("ufunc", name, _BY_UFUNC[name], inputs, {}, scalars_dynamic=_dynamic_scalars(name, inputs[1:]))
            if dtype is not None:
                r = run("method", "astype", _METHODS["astype"], (r, np.dtype(dtype)), {})
    elif method == "reduce" and name in npx.UFUNC_REDUCE:
        r = run("ufunc", f"{name}.reduce", lambda x, **k: npx.dispatch_ufunc(ufunc, "reduce", (x,), k),
                inputs, kwargs)
    elif method == "at" and isinstance(inputs[0], Array):
        return _ufunc_at(ufunc, *inputs)
    else:
        r = _fallback("ufunc", name if method == "__call__" else f"{name}.{method}", inputs, kwargs,
                      "not supported")
    if out is not None:
        out = out if isinstance(out, tuple) else (out,)
        rs = r if isinstance(r, tuple) else (r,)
        for o, v in zip(out, rs):
            _write(o, v)
        return out[0] if len(out) == 1 else out
    return r


def _ufunc_at(ufunc, a, *args):
    """np.<ufunc>.at(a, indices, b) on an spmd.Array: an unbuffered in-place update of a
    (repeated indices accumulate), run in numpy on the gathered value and written back."""
    g = a.numpy()
    if not a.is_fully_replicated:
        STATS["fallbacks"] += 1
        warnings.warn(f"spmd: np.{ufunc.__name__}.at on an spmd.Array runs in numpy on the gathered value "
                      f"({a.nbytes} bytes gathered): not supported eagerly", UserWarning,
                      stacklevel=_user_stacklevel())
    getattr(ufunc, "at")(g, *[_gathered(x) if isinstance(x, Array) else x for x in args])
    set_value(a, device_put(g, a.sharding))


def _write(target, value):
    """out=: write value into target (an Array is rebound, an ndarray filled)."""
    if isinstance(target, Array):
        set_value(target, value)
    else:
        np.copyto(target, _gathered(value), casting="same_kind")


def array_function(self, func, types, args, kwargs):
    if current_trace() is not None or _has_tracer((args, kwargs)):
        return NotImplemented
    if any(not issubclass(t, (Array, np.ndarray)) for t in types):
        return NotImplemented
    if func in _META:
        return _META[func](args[0])
    if func is np.result_type:
        return np.result_type(*[a.dtype if isinstance(a, Array) else a for a in args])
    if kwargs.get("out") is not None:
        out = kwargs.pop("out")
        _write(out, array_function(self, func, types, args, kwargs))
        return out
    if func in _SELECTING and isinstance(args[0], Array) and not kwargs and len(args) == 1:
        r = _selecting(func, args[0])
        if r is not None:
            return r
    impl = _BY_FUNCTION.get(func)
    if impl is None:
        return _fallback("function", func, args, kwargs, "not supported eagerly")
    return run("function", func.__name__, impl, args, kwargs)


_SELECTING = (np.nonzero, np.argwhere, np.flatnonzero, np.count_nonzero)


def _selecting(func, x):
    """The data-dependent-shape functions (eager/select.py); None: not for this x."""
    from . import select as eager_select
    if func is np.count_nonzero:
        return run("function", "count_nonzero", lambda v: red.sum(ew.not_equal(v, False if v.dtype == np.bool_
                                                                                  else 0)), (x,), {})
    if not eager_select.supported(x):
        return None
    w = eager_select.select(x)                        # np.argwhere(x), split like x's rows
    if func is np.argwhere:
        return w
    if func is np.nonzero:
        return tuple(w[:, i] for i in range(x.ndim))
    strides = np.array([int(np.prod(x.shape[i + 1:])) for i in range(x.ndim)], np.int64)
    return w @ strides                                # np.flatnonzero


def _method(name, f):
    def m(self, *args, **kwargs):
        return run("method", name, f, (self,) + args, kwargs)
    m.__name__ = m.__qualname__ = name
    return m


def _dynamic_scalars(name, args):
    """Scalars are program inputs (one compile for every value), except the exponents 0.5
    and 2 of `x ** y` / `np.power(x, y)`, which numpy computes as np.sqrt / np.square (the
    builder must see the value)."""
    return not (name in ("__pow__", "power") and len(args) == 1 and isinstance(args[0], (int, float, np.number))
                and not isinstance(args[0], bool) and args[0] in (0.5, 2))


def _operator(name, f):
    def m(self, *args):
        if current_trace() is not None or any(isinstance(a, Tracer) for a in args):
            return NotImplemented
        if not all(isinstance(a, (Array, np.ndarray, np.generic, bool, int, float, complex, list, tuple))
                   for a in args):
            return NotImplemented
        return run("operator", name, f, (self,) + args, {}, scalars_dynamic=_dynamic_scalars(name, args))
    m.__name__ = m.__qualname__ = name
    return m


# -- indexing and writes ---------------------------------------------------------------------
def _basic(key):
    """Is key numpy basic indexing (a view)? ints, slices, None, ..."""
    ks = key if isinstance(key, tuple) else (key,)
    return all(k is None or k is Ellipsis or isinstance(k, slice) or
               (isinstance(k, (int, np.integer)) and not isinstance(k, (bool, np.bool_))) for k in ks)


def _normalise_ints(x, key):
    """Integer indices become int64 scalars (program inputs), bounds-checked as numpy does."""
    ks = key if isinstance(key, tuple) else (key,)
    if not _basic(ks):
        return key
    out, d = [], 0
    n_real = sum(1 for k in ks if k is not None and k is not Ellipsis)
    for k in ks:
        if k is Ellipsis:
            d += x.ndim - n_real
            out.append(k)
            continue
        if k is None:
            out.append(k)
            continue
        if isinstance(k, (int, np.integer)) and d < x.ndim:
            size = x.shape[d]
            if not -size <= int(k) < size:
                raise IndexError(f"index {int(k)} is out of bounds for axis {d} with size {size}")
            k = np.int64(int(k) % size)
        out.append(k)
        d += 1
    return tuple(out)


def getitem(self, key):
    _check_fresh(self)
    if isinstance(key, Array) and key.dtype == np.bool_ or isinstance(key, np.ndarray) and key.dtype == np.bool_:
        from . import select as eager_select
        if key.shape == self.shape and eager_select.supported(self):
            return eager_select.select(self, key)         # local selections, counts all-gathered
        return _fallback("operator", "getitem", (self, key), {}, "boolean mask indexing with a mask "
                         "not of x's shape, or x split along a dim other than the first")
    k = _normalise_ints(self, key)
    ks = k if isinstance(k, tuple) else (k,)
    # int64 scalars are program inputs (dynamic_slice); slices/None/... are static
    r = run("operator", "getitem", _getitem_scalar_keys, (self,) + tuple(_wrap_key(e) for e in ks), {})
    if isinstance(r, Array) and _basic(key):
        r._view = (self, key, _version(self))
    return r


def _wrap_key(e):
    # a 0-d int64 ndarray is a dynamic leaf (an input of the program)
    if isinstance(e, np.int64):
        return np.asarray(e)
    return e


def _getitem_scalar_keys(x, *ks):
    return indexing.getitem(x, ks)


def _version(a):
    return getattr(a, "_version", 0)


def _check_fresh(a):
    """A view read after its base was written would be stale: numpy's view would show the
    write. Say so instead of returning old data."""
    v = getattr(a, "_view", None)
    if v is not None:
        base, key, ver = v
        if _version(base) != ver or getattr(base, "_view", None) is not None and _stale(base):
            raise ValueError(
                "spmd: this Array was read with basic indexing from an Array that has since been "
                "written; in numpy it is a view and would show the write, eager spmd arrays are "
                "copies. Index the base again after writing it.")


def _stale(a):
    try:
        _check_fresh(a)
        return False
    except ValueError:
        return True


def set_value(a, value):
    """Rebind Array a to `value` (same shape; cast to a's dtype as numpy's in-place ops do)."""
    if not isinstance(value, Array):
        value = np.asarray(value)
        if value.shape != a.shape:
            value = np.broadcast_to(value, a.shape)
        value = device_put(np.ascontiguousarray(value.astype(a.dtype, copy=False)), a.sharding)
    if value.dtype != a.dtype and not np.can_cast(value.dtype, a.dtype, casting="same_kind"):
        raise TypeError(f"Cannot cast ufunc output from dtype('{value.dtype}') to dtype('{a.dtype}') "
                        f"with casting rule 'same_kind'")
    if value.shape != a.shape or value.dtype != a.dtype or value.sharding != a.sharding:
        # broadcast, cast and lay out as the target is (planned collectives, no gather)
        value = run("function", "assign", lambda v, shape, dt: core.astype(core.broadcast_to(v, shape), dt),
                    (value, a.shape, a.dtype), {}, out_sharding=a.sharding)
    a._handles, a._sharding = value._handles, value._sharding
    a._version = _version(a) + 1
    v = getattr(a, "_view", None)
    if v is not None and v[1] is None:
        raise ValueError("spmd: writing into a transposed or reshaped view of an spmd.Array is not "
                         "supported (numpy would write through to the base array); write to the base "
                         "array, or take a .copy() first")
    if v is not None:                      # a view: write through to its base
        base, key, _ = v
        setitem(base, key, a)
        a._view = (base, key, _version(base))


def _setitem_builder(x, v, *ks):
    """x with x[key] = v for basic indexing (ints, slices, None, ...) or a boolean mask of
    x's shape, composed of existing ops: a mask of the written box and the value padded
    into place."""
    if len(ks) == 1 and isinstance(ks[0], Tracer) and ks[0].dtype == np.bool_:
        return ew.where(ks[0], core.asarray(v, x.dtype), x)
    key = ks
    kinds = []
    n_real = sum(1 for k in key if k is not None and k is not Ellipsis)
    full = []
    for k in key:
        if k is Ellipsis:
            full += [slice(None)] * (x.ndim - n_real)
        elif k is not None:
            full.append(k)
    full += [slice(None)] * (x.ndim - len(full))
    box_shape, lo, hi, interior, rev = [], [], [], [], []
    t = x._tr
    mask = None
    for d, k in enumerate(full):
        n = x.shape[d]
        if isinstance(k, slice):
            s, e, st = k.indices(n)
            cnt = len(range(s, e, st))
            if st < 0:
                s, st = (s + (cnt - 1) * st if cnt else 0), -st
                rev.append(d)
            box_shape.append(cnt)
            lo.append(s)
            interior.append(st - 1)
            hi.append(n - (s + (cnt - 1) * st + 1) if cnt else n - s)
            idx = Tracer(t.emit("iota", shape=(n,), dtype="int64", dimension=0), t)
            m = ew.logical_and(ew.logical_and(ew.greater_equal(idx, s), ew.less(idx, s + max(cnt - 1, 0) * st + 1)),
                                ew.equal(ew.mod(ew.subtract(idx, s), st), 0)) if cnt else \
                ew.less(idx, -1)
            kinds.append("slice")
        else:                                   # a traced int64 scalar
            box_shape.append(1)
            kinds.append("int")
            lo.append(0), hi.append(0), interior.append(0)
            idx = Tracer(t.emit("iota", shape=(n,), dtype="int64", dimension=0), t)
            m = ew.equal(idx, k)
        shape = [1] * x.ndim
        shape[d] = n
        m = shapes.reshape(m, shape)
        mask = m if mask is None else ew.logical_and(mask, m)
    # v -> the box (ints are dims of size 1 in it)
    sel_shape = [b for b, kd in zip(box_shape, kinds) if kd == "slice"]
    v = core.asarray(v, x.dtype, t)
    v = core.broadcast_to(v, np.broadcast_shapes(tuple(v.shape), tuple(sel_shape)))
    v = shapes.reshape(v, box_shape)
    for d in rev:
        v = shapes.take(v, np.arange(box_shape[d] - 1, -1, -1, dtype="int64"), axis=d)
    placed = []
    for d, k in enumerate(full):
        if kinds[d] == "int":
            # move the one row to index k: broadcast it along the dim, the mask picks row k
            shape = list(v.shape)
            shape[d] = x.shape[d]
            v = core.broadcast_to(v, shape)
        else:
            placed.append(d)
    if placed and any(lo[i] or hi[i] or interior[i] for i in range(len(lo)) if kinds[i] == "slice"):
        cfg = [(lo[d], hi[d], interior[d]) if kinds[d] == "slice" else (0, 0, 0) for d in range(x.ndim)]
        v = Tracer(t.emit("pad", v.value, core.asarray(0, x.dtype, t).value,
                              low=tuple(c[0] for c in cfg), high=tuple(c[1] for c in cfg),
                              interior=tuple(c[2] for c in cfg)), t)
    if mask is None:
        return core.broadcast_to(v, x.shape)
    return ew.where(mask, v, x)


def setitem(self, key, value):
    if isinstance(value, Tracer) or current_trace() is not None:
        raise TraceError("writing a traced value into an spmd.Array outside of its jit function")
    ks = key if isinstance(key, tuple) else (key,)
    mask = len(ks) == 1 and isinstance(ks[0], (Array, np.ndarray)) and ks[0].dtype == np.bool_ \
        and ks[0].shape == self.shape and np.ndim(value) == 0
    if not (mask or _basic(key)):
        g = self.numpy()
        warnings.warn(f"spmd: x[...] = v with index {key!r} on an spmd.Array runs in numpy on the gathered "
                      f"value ({self.nbytes} bytes gathered): only basic indexing and full-shape boolean "
                      f"masks are written eagerly", UserWarning, stacklevel=_user_stacklevel())
        STATS["fallbacks"] += 1
        g[tuple(_gathered(k) for k in ks)] = _gathered(value)
        set_value(self, device_put(g, self.sharding))
        return
    if mask:
        new = run("operator", "setitem", _setitem_builder, (self, value, ks[0]), {}, scalars_dynamic=True,
                  out_sharding=self.sharding)
    else:
        k = _normalise_ints(self, ks)
        new = run("operator", "setitem", _setitem_builder, (self, value) + tuple(_wrap_key(e) for e in k), {},
                  scalars_dynamic=True, out_sharding=self.sharding)
    set_value(self, new)


def _inplace(name, f):
    def m(self, other):
        if current_trace() is not None or isinstance(other, Tracer):
            return NotImplemented
        r = run("operator", name, f, (self, other), {}, scalars_dynamic=_dynamic_scalars(name, (other,)),
                out_sharding=self.sharding)
        set_value(self, r)
        return self
    m.__name__ = m.__qualname__ = f"__i{name.strip('_')}__"
    return m


def _fill(self, value):
    set_value(self, run("method", "fill", lambda x, v: core.full_like(x, v), (self, value), {},
                        scalars_dynamic=True, out_sharding=self.sharding))


def _mutating_fallback(name):
    def m(self, *args, **kwargs):
        g = self.numpy()
        STATS["fallbacks"] += 1
        warnings.warn(f"spmd: ndarray.{name} on an spmd.Array runs in numpy on the gathered value "
                      f"({self.nbytes} bytes gathered): not supported eagerly", UserWarning,
                      stacklevel=_user_stacklevel())
        r = getattr(g, name)(*args, **kwargs)
        set_value(self, device_put(g, self.sharding))
        return r
    m.__name__ = name
    return m


def _getattr(self, name):
    if not name.startswith("_") and hasattr(np.ndarray, name):
        attr = getattr(np.ndarray, name)
        if callable(attr):
            def fallback(*args, **kwargs):
                return _fallback("method", name, (self,) + args, kwargs, "not supported eagerly")
            return fallback
        STATS["fallbacks"] += 1
        warnings.warn(f"spmd: ndarray.{name} on an spmd.Array reads the gathered value "
                      f"({self.nbytes} bytes gathered)", UserWarning, stacklevel=_user_stacklevel())
        return getattr(self.numpy(), name)
    raise AttributeError(f"'spmd.Array' object has no attribute {name!r}")


def _item(self, *args):
    """The documented way a value leaves the mesh (local for a replicated Array)."""
    return self.numpy().item(*args)


def _tolist(self):
    return self.numpy().tolist()


def _numpy(self):
    _check_fresh(self)
    return _ARRAY_NUMPY(self)


_ARRAY_NUMPY = Array.numpy


def install():
    Array.numpy = _numpy
    for name, f in _METHODS.items():
        setattr(Array, name, _method(name, f))
    for name, f in _OPERATORS.items():
        if name == "__getitem__":
            continue
        setattr(Array, name, _operator(name, f))
    for op in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul", "and", "or", "xor"):
        f = _OPERATORS.get(f"__{op}__")
        if f is not None:
            setattr(Array, f"__i{op}__", _inplace(f"__{op}__", f))
    Array.__array_ufunc__ = array_ufunc
    Array.__array_function__ = array_function
    Array.__getitem__ = getitem
    Array.__setitem__ = setitem
    Array.__getattr__ = _getattr
    Array.T = property(lambda self: run("method", "T", lambda x: shapes.transpose(x), (self,), {}))
    Array.mT = property(lambda self: run("method", "mT", lambda x: shapes.swapaxes(x, -1, -2), (self,), {}))
    Array.real = property(lambda self: run("method", "real", lambda x: ew.real(x), (self,), {}))
    Array.imag = property(lambda self: run("method", "imag", lambda x: ew.imag(x), (self,), {}))
    Array.fill = _fill
    Array.nonzero = lambda self: np.nonzero(self)
    Array.item = _item
    Array.tolist = _tolist
    for name in ("sort", "put", "partition", "resize", "itemset", "setfield", "byteswap"):
        if hasattr(np.ndarray, name):
            setattr(Array, name, _mutating_fallback(name))


install()
