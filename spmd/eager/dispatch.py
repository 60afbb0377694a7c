"""Eager mode: numpy on spmd.Arrays outside of jit runs sharded, one op at a time.

Every numpy function, ufunc, ndarray method, operator and index on an spmd.Array comes
here and runs as a one-op partitioned program (programs.py) of the builder the tracer
uses (numpy_api's table; there is no second list). Writes (`x[k] = v`, `x += v`,
`out=`, `x.fill(v)`, np.copyto, ...) are the traced write path on the array's root, so
a write through a view reaches its base and every view shows it, as in numpy
(programs.write, views.py).

Reading values (`.numpy()`, `np.asarray`, printing, `float`, `bool`, `.item()`) is the
documented way data leaves the mesh; reading a replicated Array (every 0-d result, every
full reduction) is local on every backend.
"""
from __future__ import annotations

import functools
import operator

import numpy as np

from ..frontend import flat, functionalize as fz, numpy_api as npx, random_guard, shapes
from ..frontend import elementwise as ew
from ..frontend import reductions as red
from ..frontend.trace import Tracer, current_trace
from ..runtime.array import Array
from ..tree import tree_flatten
from . import bincount, indexing, mask_select
from .programs import (WRITES_FIRST, Dynamic, dynamic_scalars, gathered, in_numpy, int_range, is_dynamic_scalar, run,
                       warn_gathered, write)

_OPERATORS = npx.operators()
_INPLACE = npx.inplace_operators()
_META = (np.shape, np.ndim, np.size)     # read from the Array's shape, as numpy reads them


def _traced(xs):
    """Called while tracing, or on a Tracer: the traced implementation takes it."""
    leaves, _ = tree_flatten(xs, is_leaf=lambda x: isinstance(x, (Array, np.ndarray)))
    return current_trace() is not None or any(isinstance(x, Tracer) for x in leaves)


# -- ufuncs and functions ---------------------------------------------------------------------
def array_ufunc(self, ufunc, method, *inputs, **kwargs):
    if _traced((inputs, kwargs)):
        return NotImplemented
    out = kwargs.pop("out", None)
    # numpy hands out= over as a tuple, one entry per output, and returns the arrays
    # themselves: out=a and out=(a,) give a, out=(q, r) gives (q, r); a None entry is a new array
    outs = out if isinstance(out, tuple) else (out,)
    what = f"np.{ufunc.__name__}(..., out=)"
    if len(outs) == 1 and isinstance(outs[0], Array) and method == "__call__" and ufunc.__name__ in npx.UFUNCS:
        # the traced ufunc with out=: numpy's casting, where= keeps out's values, out may be an input
        inputs = _scalars_dynamic(ufunc.__name__, inputs)
        write(outs[0], _ufunc_into, (ufunc, inputs, kwargs), _numpy_ufunc_into, what)
        return outs[0]
    where = kwargs.pop("where", True) if out is not None and method == "__call__" else True
    casting = kwargs.pop("casting", "same_kind") if out is not None else "same_kind"
    r = _ufunc(ufunc, method, inputs, kwargs)
    if out is None:
        return r
    # every result is computed before any is stored: an output may be an input (np.divmod(a, b, out=(a, b)))
    rs = r if isinstance(r, tuple) else (r,)
    for o, v in zip(outs, rs):
        if o is not None:
            store(o, v, what, where, casting)
    res = tuple(v if o is None else o for o, v in zip(outs, rs))
    return res if len(res) > 1 else res[0]


# the ufunc methods that run as traced programs: {method: the ufuncs it takes}
_TRACED_METHODS = {"reduce": npx.UFUNC_REDUCE, "accumulate": npx.UFUNC_ACCUMULATE, "outer": npx.UFUNCS,
                   "reduceat": npx.UFUNC_REDUCE}


@functools.cache
def _in_loop(name):
    """The builder of np.<name>(*xs, dtype=, casting=): as traced, in numpy's loop dtype
    (one per ufunc)."""
    ufunc = getattr(np, name)
    return lambda *xs, **k: npx.dispatch_ufunc(ufunc, "__call__", xs, k)


def _ufunc(ufunc, method, inputs, kwargs):
    name = ufunc.__name__
    if method == "__call__" and name in npx.UFUNCS:
        extra = sorted(k for k in kwargs if k not in ("dtype", "casting"))
        if extra:     # numpy gets every keyword, dtype= and casting= too
            return in_numpy("ufunc", name, inputs, kwargs, f"keyword arguments {extra}")
        dtype, casting = kwargs.pop("dtype", None), kwargs.pop("casting", "same_kind")
        if dtype is None and casting == "same_kind":
            return run("ufunc", name, npx.UFUNCS[name], _scalars_dynamic(name, inputs))
        # numpy computes in the dtype= loop, the inputs cast to it under casting= (as traced)
        return run("ufunc_dtype", name, _in_loop(name), _scalars_dynamic(name, inputs),
                   {"dtype": None if dtype is None else np.dtype(dtype), "casting": casting})
    if method == "at" and isinstance(inputs[0], Array):
        # as traced: ufunc.at writes its first argument (indices checked here, as numpy does)
        inputs = (inputs[0], indexing.program_key(inputs[0], inputs[1])) + tuple(inputs[2:])
    if name in _TRACED_METHODS.get(method, ()) or (method == "at" and isinstance(inputs[0], Array)):
        return run("ufunc", f"{name}.{method}", lambda *xs, **k: npx.dispatch_ufunc(ufunc, method, xs, k),
                   inputs, kwargs)
    return in_numpy("ufunc", name if method == "__call__" else f"{name}.{method}", inputs, kwargs, "not supported")


def _ufunc_into(o, ufunc, inputs, kwargs):
    npx.dispatch_ufunc(ufunc, "__call__", inputs, dict(kwargs, out=o))


def _numpy_ufunc_into(g, ufunc, inputs, kwargs):
    ufunc(*inputs, out=g, **kwargs)


def _call_into(o, impl, args, kwargs):
    """impl(*args, out=o, **kwargs): a builder that stores into out= itself (a reduction)."""
    impl(*args, out=o, **kwargs)


def _numpy_call_into(g, impl, args, kwargs, func):
    func(*args, out=g, **kwargs)


def _call_on_first(first, impl, args, kwargs):
    """impl(first, *args, **kwargs): a numpy function that writes its first argument."""
    impl(first, *args, **kwargs)


def _numpy_call_on_first(g, impl, args, kwargs, func):
    func(g, *args, **kwargs)


def store(target, value, what, where=True, casting="same_kind"):
    """out=: store value into target as numpy's ufuncs do (same_kind casting; where= a
    mask is False, target keeps its values)."""
    if isinstance(target, Array):
        write(target, fz.assign, (value, what, casting, where), _numpy_store, what)
    else:
        np.copyto(target, gathered(value), casting=casting, where=gathered(where))


def _numpy_store(g, value, what, casting="same_kind", where=True):
    np.copyto(g, value, casting=casting, where=where)


def array_function(self, func, types, args, kwargs):
    if _traced((args, kwargs)) or any(not issubclass(t, (Array, np.ndarray)) for t in types):
        return NotImplemented
    if func in _META and isinstance(args[0], Array):
        return func(shapes.stand_in(args[0]), *args[1:], **kwargs)
    if func is np.result_type:
        return np.result_type(*[a.dtype if isinstance(a, Array) else a for a in args])
    impl = npx.FUNCTIONS.get(func)
    if isinstance(kwargs.get("out"), Array) and getattr(impl, "takes_out", False):
        out = kwargs.pop("out")     # a reduction casts into out as it computes (the traced builder)
        write(out, _call_into, (impl, args, kwargs), _numpy_writer(_numpy_call_into, func),
              f"np.{func.__name__}(..., out=)")
        return out
    if kwargs.get("out") is not None:
        out = kwargs.pop("out")
        store(out, array_function(self, func, types, args, kwargs), f"np.{func.__name__}(..., out=)")
        return out
    if func in WRITES_FIRST and impl is not None and isinstance(args[0], Array):
        # np.copyto(x, x, where=...), np.put(x, ...): the write path, where an operand may be x itself
        write(args[0], _call_on_first, (impl, args[1:], kwargs), _numpy_writer(_numpy_call_on_first, func),
              f"np.{func.__name__}")
        return None
    if func is np.bincount and args and isinstance(args[0], Array):
        r = bincount.bincount(*args, **kwargs)
        if r is not None:
            return r
    if func is np.where and len(args) == 1 and not kwargs and isinstance(args[0], Array):
        func = np.nonzero                 # numpy: where(condition) is condition.nonzero()
    if func in _SELECTING and isinstance(args[0], Array) and not kwargs and len(args) == 1:
        r = _selecting(func, args[0])
        if r is not None:
            return r
    if impl is None:
        return in_numpy("function", func, args, kwargs, "not supported eagerly")
    r = run("function", func.__name__, impl, args, kwargs,
            fallback=lambda why: in_numpy("function", func, args, kwargs, why))
    # a Python bool in numpy (np.allclose): the value, read where it is replicated
    return r if not getattr(impl, "python_result", None) or not isinstance(r, Array) else impl.python_result(r)


_SELECTING = (np.nonzero, np.argwhere, np.flatnonzero, np.count_nonzero)


def _selecting(func, x):
    """The data-dependent-shape functions (mask_select.py); None: not for this x."""
    if func is np.count_nonzero:
        return run("function", "count_nonzero", _count_nonzero, (x,))
    if not mask_select.supported(x):
        return None
    w = mask_select.select(x)                              # np.argwhere(x), split like x's rows
    if func is np.argwhere:
        return w
    if func is np.nonzero:
        return tuple(w[:, i] for i in range(x.ndim))
    strides = np.array([int(np.prod(x.shape[i + 1:])) for i in range(x.ndim)], np.int64)
    return w @ strides                                # np.flatnonzero


def _count_nonzero(v):
    return red.sum(ew.not_equal(v, False if v.dtype == np.bool_ else 0))


# -- methods and operators --------------------------------------------------------------------
def _numpy_writer(form, func):
    """The numpy fallback of a write (programs.write): form with numpy's own function."""
    def numpy_form(g, impl, args, kwargs):
        form(g, impl, args, kwargs, func)
    return numpy_form


def _method(name, f):
    def m(self, *args, **kwargs):
        if isinstance(kwargs.get("out"), Array) and getattr(f, "takes_out", False):
            out = kwargs.pop("out")
            write(out, _call_into, (f, (self,) + args, kwargs),
                  _numpy_writer(_numpy_call_into, getattr(np, name)), f"ndarray.{name}(..., out=)")
            return out
        if kwargs.get("out") is not None:
            # as numpy: the result stored into out (an Array or an ndarray), and out returned
            out = kwargs.pop("out")
            out = out[0] if isinstance(out, tuple) and len(out) == 1 else out
            store(out, m(self, *args, **kwargs), f"ndarray.{name}(..., out=)")
            return out
        return run("method", name, f, (self,) + args, kwargs)
    m.__name__ = m.__qualname__ = name
    return m


def _scalars_dynamic(name, args):
    """Scalars are program inputs (one compile for every value), except the exponents 0.5
    and 2 of `x ** y` / `np.power(x, y)`, which numpy computes as np.sqrt / np.square, and
    a negative integer exponent, which numpy refuses for an integer base (the builder must
    see the value)."""
    exponent = args[1:] if name in ("power", "__pow__") else ()
    if len(exponent) == 1 and isinstance(exponent[0], (int, float, np.number)) \
            and not isinstance(exponent[0], bool) \
            and (exponent[0] in (0.5, 2) or (isinstance(exponent[0], (int, np.integer)) and exponent[0] < 0)):
        return tuple(args)
    return dynamic_scalars(tuple(args))


def _operator(name, f):
    def m(self, *args):
        if _traced(args):
            return NotImplemented
        if not all(isinstance(a, (Array, np.ndarray, np.generic, bool, int, float, complex, list, tuple))
                   for a in args):
            return NotImplemented
        return run("operator", name, f, _scalars_dynamic(name, (self,) + args))
    m.__name__ = m.__qualname__ = name
    return m


def _inplace(op):
    """x op= y: numpy computes op(x, y) and stores it into x (a view writes its base)."""
    form = _INPLACE[f"__i{op}__"]

    def m(self, other):
        if _traced((other,)):
            return NotImplemented
        (other,) = _scalars_dynamic(f"__{op}__", (self, other))[1:]
        if getattr(self, "numpy_scalar", False):       # immutable: Python rebinds the name
            return run("operator", f"__{op}__", _OPERATORS[f"__{op}__"], (self, other))
        write(self, form, (other,), _numpy_inplace(op), f"{op}=")
        return self
    m.__name__ = m.__qualname__ = f"__i{op}__"
    return m


def _numpy_inplace(op):
    return getattr(operator, f"i{op}")


def _fill(self, value):
    write(self, fz.fill, (Dynamic(value) if is_dynamic_scalar(value, int_range([self.dtype])) else value,), _numpy_fill, "ndarray.fill")


def _numpy_fill(g, value):
    g.fill(value)


def _mutating_fallback(name):
    """An ndarray method that writes its array, which spmd does not run: numpy on the
    gathered value, written back."""
    def m(self, *args, **kwargs):
        warn_gathered(f"ndarray.{name}", [self], "not supported eagerly")
        g = self.numpy()
        r = getattr(g, name)(*args, **kwargs)
        self[...] = g
        return r
    m.__name__ = name
    return m


def _getattr(self, name):
    if not name.startswith("_") and hasattr(np.ndarray, name):
        attr = getattr(np.ndarray, name)
        if callable(attr):
            def fallback(*args, **kwargs):
                return in_numpy("method", name, (self,) + args, kwargs, "not supported eagerly")
            return fallback
        warn_gathered(f"ndarray.{name}", [self], "it reads the gathered value")
        return getattr(self.numpy(), name)
    raise AttributeError(f"'spmd.Array' object has no attribute {name!r}")


def _item(self, *args):
    """The documented way a value leaves the mesh (local for a replicated Array)."""
    return self.numpy().item(*args)


def _tolist(self):
    return self.numpy().tolist()


def _mT(x):
    return shapes.view_swapaxes(x, -1, -2)


def install():
    for name, f in npx.METHODS.items():
        setattr(Array, name, _method(name, f))
    for name, f in _OPERATORS.items():
        if name != "__getitem__":
            setattr(Array, name, _operator(name, f))
    for op in npx.INPLACE:
        setattr(Array, f"__i{op}__", _inplace(op))
    Array.__array_ufunc__ = array_ufunc
    Array.__array_function__ = array_function
    Array.__getitem__ = indexing.getitem
    Array.__setitem__ = indexing.setitem
    Array.__getattr__ = _getattr
    Array.T = property(lambda self: run("method", "T", shapes.view_transpose, (self,)))
    Array.mT = property(lambda self: run("method", "mT", _mT, (self,)))
    Array.real = property(lambda self: run("method", "real", fz.real_view, (self,)),
                          lambda self, v: indexing.setitem(self.real, Ellipsis, v))
    Array.imag = property(lambda self: run("method", "imag", fz.imag_view, (self,)),
                          lambda self, v: indexing.setitem(self.imag, Ellipsis, v))
    random_guard.shuffle_by_index(Array)
    Array.flat = property(flat.Flat, lambda self, v: flat.Flat(self).__setitem__(slice(None), v))
    Array.fill = _fill
    Array.nonzero = lambda self: np.nonzero(self)
    Array.item = _item
    Array.tolist = _tolist
    for name in ("sort", "partition", "resize", "itemset", "setfield", "byteswap"):
        if hasattr(np.ndarray, name) and name not in npx.METHODS:
            setattr(Array, name, _mutating_fallback(name))


install()
