"""Tracing: run the user's numpy function on Tracers and record a Graph.

A Tracer stands for an IR Value while the function runs. numpy calls reach spmd through
`__array_ufunc__` / `__array_function__` and Python operators; the implementations live
in numpy_api.py. Every op records the user's file:line.
"""
from __future__ import annotations

import os
import sys
import threading

import numpy as np

from ..errors import TraceError
from ..ir import Graph, Value
from ..ir import dtypes

_SPMD_DIR = os.path.dirname(os.path.dirname(os.path.realpath(__file__))) + os.sep
_NUMPY_DIR = os.path.dirname(os.path.realpath(np.__file__)) + os.sep
_state = threading.local()


_internal: dict = {}


def _is_internal(fn: str) -> bool:
    """Is this code file part of spmd or numpy? (Real paths: spmd may be imported
    through a path like docs/../spmd.)"""
    r = _internal.get(fn)
    if r is None:
        real = os.path.realpath(fn)
        r = _internal[fn] = fn.startswith("<frozen") or real.startswith((_SPMD_DIR, _NUMPY_DIR))
    return r


def user_loc() -> str | None:
    """file:line of the innermost frame outside spmd and numpy: the user's line."""
    f = sys._getframe(1)
    while f is not None:
        fn = f.f_code.co_filename
        if not _is_internal(fn):
            return f"{os.path.basename(fn)}:{f.f_lineno}"
        f = f.f_back
    return None


class Trace:
    """One tracing session: the graph being recorded and the mesh in scope."""

    def __init__(self, graph: Graph, mesh=None):
        self.graph = graph
        self.mesh = mesh
        self.fixed_loc = None      # autodiff pins the location of the ops it emits

    def emit(self, name, *operands, **attrs):
        loc = self.fixed_loc or user_loc()
        return self.graph.emit(name, *operands, loc=loc, **attrs)

    def const(self, x) -> "Tracer":
        arr = np.asarray(x)
        dt = dtypes.canon(arr.dtype)
        if arr.dtype != dt:
            arr = arr.astype(dt)
        return Tracer(self.emit("constant", value=np.array(arr, copy=True)), self)


def current_trace() -> Trace | None:
    stack = getattr(_state, "stack", None)
    return stack[-1] if stack else None


class tracing:
    """Context manager: make `trace` the current one."""

    def __init__(self, trace):
        self.trace = trace

    def __enter__(self):
        if not hasattr(_state, "stack"):
            _state.stack = []
        _state.stack.append(self.trace)
        return self.trace

    def __exit__(self, *exc):
        _state.stack.pop()


class Tracer:
    """A traced array. Behaves like an ndarray of its shape and dtype under numpy."""

    __array_priority__ = 1000
    __slots__ = ("value", "trace", "weak")

    def __init__(self, value: Value, trace: Trace, weak=False):
        self.value = value
        self.trace = trace
        self.weak = weak           # a Python scalar argument: promotes like one (NEP 50)

    # -- array attributes ------------------------------------------------------------------
    shape = property(lambda self: self.value.shape)
    ndim = property(lambda self: len(self.value.shape))
    size = property(lambda self: self.value.size)
    dtype = property(lambda self: np.dtype(self.value.dtype))
    itemsize = property(lambda self: self.dtype.itemsize)
    nbytes = property(lambda self: self.value.size * self.dtype.itemsize)
    T = property(lambda self: _api().transpose(self))
    mT = property(lambda self: _api().swapaxes(self, -1, -2))

    def __repr__(self):
        return f"Tracer({dtypes.SHORT[self.value.dtype]}{list(self.shape)})"

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of a 0-d traced array")
        return self.shape[0]

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    # -- things tracing cannot follow ------------------------------------------------------
    def _concrete(self, what):
        raise TraceError(
            f"{what} of a traced value at {user_loc()}: inside spmd.jit the value of "
            f"{self!r} is not known until the program runs. Use np.where for data-dependent "
            f"choices, or pass the value as a static argument.")

    def __bool__(self):
        self._concrete("bool()")

    def __float__(self):
        self._concrete("float()")

    def __int__(self):
        self._concrete("int()")

    def __index__(self):
        self._concrete("use as an index")

    def __array__(self, dtype=None, copy=None):
        self._concrete("np.asarray()")

    def tolist(self):
        self._concrete("tolist()")

    item = tolist

    def __setitem__(self, key, value):
        raise TraceError(f"in-place assignment to a traced array at {user_loc()}: traced arrays are "
                         f"immutable; build the new value with np.where or np.concatenate")

    def __hash__(self):
        return id(self)

    # -- numpy protocols -------------------------------------------------------------------
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        return _api().dispatch_ufunc(ufunc, method, inputs, kwargs)

    def __array_function__(self, func, types, args, kwargs):
        return _api().dispatch_function(func, args, kwargs)

    # -- operators -------------------------------------------------------------------------
    def __add__(self, o): return _api().add(self, o)
    def __radd__(self, o): return _api().add(o, self)
    def __sub__(self, o): return _api().subtract(self, o)
    def __rsub__(self, o): return _api().subtract(o, self)
    def __mul__(self, o): return _api().multiply(self, o)
    def __rmul__(self, o): return _api().multiply(o, self)
    def __truediv__(self, o): return _api().true_divide(self, o)
    def __rtruediv__(self, o): return _api().true_divide(o, self)
    def __floordiv__(self, o): return _api().floor_divide(self, o)
    def __rfloordiv__(self, o): return _api().floor_divide(o, self)
    def __mod__(self, o): return _api().mod(self, o)
    def __rmod__(self, o): return _api().mod(o, self)
    def __pow__(self, o): return _api().power(self, o)
    def __rpow__(self, o): return _api().power(o, self)
    def __matmul__(self, o): return _api().matmul(self, o)
    def __rmatmul__(self, o): return _api().matmul(o, self)
    def __neg__(self): return _api().negative(self)
    def __pos__(self): return self
    def __abs__(self): return _api().absolute(self)
    def __invert__(self): return _api().invert(self)
    def __and__(self, o): return _api().bitwise_and(self, o)
    def __rand__(self, o): return _api().bitwise_and(o, self)
    def __or__(self, o): return _api().bitwise_or(self, o)
    def __ror__(self, o): return _api().bitwise_or(o, self)
    def __xor__(self, o): return _api().bitwise_xor(self, o)
    def __rxor__(self, o): return _api().bitwise_xor(o, self)
    def __eq__(self, o): return _api().equal(self, o)
    def __ne__(self, o): return _api().not_equal(self, o)
    def __lt__(self, o): return _api().less(self, o)
    def __le__(self, o): return _api().less_equal(self, o)
    def __gt__(self, o): return _api().greater(self, o)
    def __ge__(self, o): return _api().greater_equal(self, o)
    def __getitem__(self, key): return _api().getitem(self, key)

    # -- methods ---------------------------------------------------------------------------
    def reshape(self, *shape, order="C"):
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = shape[0]
        return _api().reshape(self, shape, order=order)

    def transpose(self, *axes):
        if len(axes) == 1 and isinstance(axes[0], (tuple, list)):
            axes = axes[0]
        return _api().transpose(self, axes or None)

    def astype(self, dtype, copy=True):
        return _api().astype(self, dtype)

    def sum(self, axis=None, dtype=None, keepdims=False): return _api().sum(self, axis, dtype, keepdims=keepdims)
    def prod(self, axis=None, dtype=None, keepdims=False): return _api().prod(self, axis, dtype, keepdims=keepdims)
    def mean(self, axis=None, dtype=None, keepdims=False): return _api().mean(self, axis, dtype, keepdims=keepdims)
    def max(self, axis=None, keepdims=False): return _api().max(self, axis, keepdims=keepdims)
    def min(self, axis=None, keepdims=False): return _api().min(self, axis, keepdims=keepdims)
    def var(self, axis=None, keepdims=False, ddof=0): return _api().var(self, axis, keepdims=keepdims, ddof=ddof)
    def std(self, axis=None, keepdims=False, ddof=0): return _api().std(self, axis, keepdims=keepdims, ddof=ddof)
    def squeeze(self, axis=None): return _api().squeeze(self, axis)
    def ravel(self): return _api().reshape(self, (-1,))
    flatten = ravel
    def swapaxes(self, a, b): return _api().swapaxes(self, a, b)
    def dot(self, o): return _api().dot(self, o)
    def clip(self, a_min=None, a_max=None): return _api().clip(self, a_min, a_max)
    def any(self, axis=None, keepdims=False): return _api().any(self, axis, keepdims=keepdims)
    def all(self, axis=None, keepdims=False): return _api().all(self, axis, keepdims=keepdims)
    def argmax(self, axis=None, keepdims=False): return _api().argmax(self, axis, keepdims=keepdims)
    def argmin(self, axis=None, keepdims=False): return _api().argmin(self, axis, keepdims=keepdims)
    def take(self, indices, axis=None, mode=None): return _api().take(self, indices, axis, mode)
    def copy(self): return self
    def __copy__(self): return self
    def __deepcopy__(self, memo): return self

    def __getattr__(self, name):
        # only reached for names the class lacks: an ndarray method spmd does not trace
        if hasattr(np.ndarray, name) and not name.startswith("__"):
            raise NotImplementedError(f"ndarray.{name} is not supported on traced arrays in spmd "
                                      f"(at {user_loc()})")
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")


def _api():
    from . import numpy_api
    return numpy_api
