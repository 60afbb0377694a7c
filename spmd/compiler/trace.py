"""Tracing: run the user's numpy function on Tracers and record a Graph.

A Tracer stands for an IR Value while the function runs. numpy calls reach spmd through
`__array_ufunc__` / `__array_function__`, ndarray methods and Python operators; all of
them are rows of numpy_api.py's table (API), which also installs the methods and
operators here. Every op records the user's file:line.
"""
from __future__ import annotations

import os
import sys
import threading

from typing import NamedTuple

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

    parent = None                  # the enclosing trace of a control-flow body (compiler/control.py)

    def emit(self, name, *operands, **attrs):
        cur = current_trace()
        if cur is not self and cur is not None and cur.inside(self):
            # a Tracer of an enclosing program used inside a loop body or branch: the op
            # belongs to the body being traced, which captures the outer operands
            return cur.emit(name, *operands, **attrs)
        loc = self.fixed_loc or user_loc()
        return self.graph.emit(name, *operands, loc=loc, **attrs)

    def inside(self, other) -> bool:
        t = self.parent
        while t is not None:
            if t is other:
                return True
            t = t.parent
        return False

    def const(self, x) -> "Tracer":
        arr = np.asarray(x)
        dt = dtypes.canon(arr.dtype)
        if arr.dtype != dt:
            arr = arr.astype(dt)
        return Tracer(self.emit("constant", value=np.array(arr, copy=True)), self)


class ShapeDtype(NamedTuple):
    """A placeholder argument for `lower`: a shape and dtype, nothing allocated."""
    shape: tuple
    dtype: object = "float32"


def leaf_aval(x):
    """(shape, dtype, weak) of an argument leaf."""
    if isinstance(x, ShapeDtype):
        return tuple(x.shape), dtypes.canon(x.dtype), False
    if isinstance(x, np.generic):       # np.float64 is a float subclass, but not weak (NEP 50)
        return (), dtypes.canon(x.dtype), False
    if isinstance(x, bool):
        return (), "bool", True
    if isinstance(x, int):
        return (), "int64", True
    if isinstance(x, float):
        return (), "float64", True
    if hasattr(x, "shape") and hasattr(x, "dtype"):
        return tuple(x.shape), dtypes.canon(x.dtype), False
    raise TypeError(f"spmd.jit: argument leaf {x!r} of type {type(x).__name__} is not an array; "
                    f"pass it through static_argnums if it is configuration")


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
        raise TraceError(
            f"Python control flow on a traced value at {user_loc()} (bool() of {self!r}): inside "
            f"spmd.jit the value is not known until the program runs. Use spmd.while_loop / "
            f"spmd.fori_loop / spmd.cond / spmd.scan for loops and branches, np.where for "
            f"elementwise choices, or run the function eagerly (without jit) on spmd.Arrays.")

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

    # traced values are immutable, so a copy is the value itself
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


def _install(cls, methods, operators):
    """Give the Tracer numpy's methods and Python's operators, from numpy_api's table."""
    def method(name, f):
        def m(self, *args, **kwargs):
            return f(self, *args, **kwargs)
        m.__name__ = m.__qualname__ = name
        return m
    for name, f in {**methods, **operators}.items():
        setattr(cls, name, method(name, f))


from . import numpy_api as _numpy_api  # noqa: E402  (it imports this module; the table needs Tracer)

_install(Tracer, _numpy_api.METHODS, _numpy_api.operators())
