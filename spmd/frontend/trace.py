"""Tracing: run the user's numpy function on Tracers and record a Graph.

A Tracer stands for an IR Value while the function runs. numpy calls reach spmd through
`__array_ufunc__` / `__array_function__`, ndarray methods and Python operators; all of
them are rows of numpy_api.py's table (API), which installs them on the Tracer class
(numpy_api.install, run when the spmd.frontend package is imported). Every op records
the user's file:line.
"""
from __future__ import annotations

import os
import sys
import threading

from typing import NamedTuple

import numpy as np

from ..errors import ConcreteValueError, TraceError, is_internal, user_loc
from ..ir import Graph, Value
from ..ir import dtypes
from ..ir.ops.names import CONSTANT
from . import views
from .returned_scalars import returned_position
from .views import Buffer, derive

_state = threading.local()


class Trace:
    """One tracing session: the graph being recorded and the mesh in scope."""

    def __init__(self, graph: Graph, mesh=None):
        self.graph = graph
        self.mesh = mesh
        self.fixed_loc = None      # autodiff pins the location of the ops it emits
        # id(Value) -> (Value, lo, hi): what a builder knows of an integer value's range
        # beyond its ops (numpy's % by a positive n: 0..n-1); frontend/value_bounds.py,
        # read by ir/ops/value_ranges.py
        self.ranges = {}

    parent = None                  # the enclosing trace of a control-flow body (frontend/control.py)
    # (tracer, what, loc) -> the tracer's value as numpy computes it from the call's arguments,
    # where jit can run the program traced so far (graph breaks: spmd/jit/graph_breaks.py)
    oracle = None
    # (the traced function's code, jit's frame calling it): where `return float(x)` may
    # give x as an output instead of a break (returned_scalars.py); then [(position in the
    # returned tuple, tracer, float | int)]
    entry_codes = None
    returned_scalars = None

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
        return Tracer(self.emit(CONSTANT, value=np.array(arr, copy=True)), self)


class ShapeDtype(NamedTuple):
    """A placeholder argument for `lower`: a shape and dtype, nothing allocated."""
    shape: tuple
    dtype: object = "float32"
    tree_leaf = True          # one array to the pytree functions (spmd/tree.py), not a node


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
    if isinstance(x, complex):
        return (), "complex128", True
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
    """A traced array. Behaves like an ndarray of its shape and dtype under numpy,
    including writes: see functionalize.py (a written array, and every view of it, refers
    to a Buffer holding its base's current value). numpy's methods, operators and
    protocols are installed on the class from numpy_api's table."""

    __array_priority__ = 1000
    __slots__ = ("_val", "_tr", "weak", "_buf", "_view", "_ver", "_hint")

    def __init__(self, value: Value, trace: Trace, weak=False):
        self._val = value
        self._tr = trace           # the Trace recording it (not `trace`: that is ndarray.trace)
        self.weak = weak           # a Python scalar argument: promotes like one (NEP 50)
        self._buf = None           # the base's Buffer, once written or viewed
        self._view = ()            # the view chain from the base
        self._ver = 0              # the Buffer version _val was derived at
        self._hint = None          # before it has a Buffer: a Hint of numpy's layout of it (None: C order)

    @property
    def value(self) -> Value:
        """The current IR Value (re-derived from the base after a write through any view)."""
        b = self._buf
        if b is not None and self._ver != b.version:
            self._val = derive(self._tr, b.value, self._view)
            self._ver = b.version
        return self._val

    def _ensure_buffer(self):
        if self._buf is None:
            # a new array's memory, laid out as numpy lays it out (see views.keep_order)
            shadow = views.keep_order([self._layout()], self._val.shape) if self._hint is not None else None
            self._buf = Buffer(self._val, shadow=shadow)
            self._view, self._ver = (), 0
        return self._buf

    def _c_order(self) -> bool:
        """Is it laid out in C order (as numpy would have it), without working it out?"""
        b = self._buf
        if b is None:
            return self._hint is None or self._hint.c_like
        return not self._view and (b.shadow is None or b.shadow.flags.c_contiguous)

    def _layout(self):
        """numpy's strides for it: a memory-free ndarray (views.layout)."""
        if self._buf is not None:
            return views.layout(self._buf, self._view)
        h = self._hint
        if h is None:
            return views.dense(self._val.shape)
        return h.made if h.made is not None else _work_out(self)

    # -- array attributes ------------------------------------------------------------------
    shape = property(lambda self: self.value.shape)
    ndim = property(lambda self: len(self.value.shape))
    size = property(lambda self: self.value.size)
    dtype = property(lambda self: np.dtype(self.value.dtype))
    itemsize = property(lambda self: self.dtype.itemsize)
    nbytes = property(lambda self: self.value.size * self.dtype.itemsize)

    def __repr__(self):
        return f"Tracer({dtypes.SHORT[self.value.dtype]}{list(self.shape)})"

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of a 0-d traced array")
        return self.shape[0]

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    # -- things tracing cannot follow without the data -------------------------------------
    def _concrete(self, what):
        """The value of this traced array, where its trace's oracle can run the program
        traced so far (a graph break); else a ConcreteValueError naming the user's line."""
        loc = user_loc()
        if _storing_into_numpy():
            _raise_store_into_numpy(self, loc)
        if self._tr.oracle is not None:
            return self._tr.oracle(self, what, loc)
        _refuse_list_call(self, loc)
        raise ConcreteValueError(
            f"{what} of a traced value at {loc}: inside spmd.jit the value of "
            f"{self!r} is not known until the program runs. To look at it, print it as the "
            f"program runs: spmd.debug.print(\"{{}}\", value). For data-dependent choices use "
            f"np.where; or pass the value as a static argument.", loc)

    def __bool__(self):
        if self.size != 1:
            raise ValueError(f"The truth value of an array with more than one element is ambiguous. Use "
                             f"a.any() or a.all() (numpy raises the same ValueError; at {user_loc()})")
        if self._tr.oracle is not None:
            return bool(np.asarray(self._concrete("bool()")))
        loc = user_loc()
        raise ConcreteValueError(
            f"Python control flow on a traced value at {loc} (bool() of {self!r}): inside "
            f"spmd.jit the value is not known until the program runs. Use spmd.while_loop / "
            f"spmd.fori_loop / spmd.cond / spmd.scan for loops and branches, np.where for "
            f"elementwise choices, or run the function eagerly (without jit) on spmd.Arrays.", loc)

    def __float__(self):
        if self._returned_only():
            return 0.0          # (never seen: the program gives the value; returned_scalars.py)
        return float(np.asarray(self._concrete("float()")))

    def __int__(self):
        if self._returned_only():
            return 0
        return int(np.asarray(self._concrete("int()")))

    def _returned_only(self) -> bool:
        """Is this conversion (float(x), int(x), x.item(), np.float32(x)) the traced
        function's return value (or an element of its returned tuple), which nothing else
        sees? Then it is recorded as an output to convert after the run."""
        t = self._tr
        if t.entry_codes is None or self.size != 1 or current_trace() is not t:
            return False
        got = returned_position(sys._getframe(2), t.entry_codes)
        if got is None:
            return False
        t.returned_scalars.append((got[0], self, got[1]))
        return True

    def __complex__(self):
        return complex(np.asarray(self._concrete("complex()")))

    def __index__(self):
        if self.dtype.kind not in "iub":
            raise TypeError("only integer scalar arrays can be converted to a scalar index "
                            f"(numpy raises the same TypeError; at {user_loc()})")
        return int(np.asarray(self._concrete("use as an index")))

    def __array__(self, dtype=None, copy=None):
        if self._returned_only():             # return np.float32(x): numpy's scalar types call this
            return np.zeros((), dtype or self.dtype)
        loc = user_loc()
        if _storing_into_numpy():
            _raise_store_into_numpy(self, loc)
        if self._tr.oracle is not None:
            return np.asarray(self._tr.oracle(self, "conversion to a numpy array", loc), dtype=dtype)
        _refuse_list_call(self, loc)
        raise ConcreteValueError(
            f"a traced value {self!r} was converted to a numpy array at {loc}: inside "
            f"spmd.jit its value is not known until the program runs. If this is a write into a "
            f"numpy array made outside the function or by a global's .copy(), copy it "
            f"inside the function first (buf = np.array(a)); arrays made there by np.zeros / "
            f"np.empty / np.array take traced values as in numpy. If a library converted the value, "
            f"run that part outside spmd.jit.", loc)

    def tolist(self):
        return np.asarray(self._concrete("tolist()")).tolist()

    def item(self, *args):
        if not args and self._returned_only():
            return 0 if self.dtype.kind in "biu" else 0.0
        return np.asarray(self._concrete("item()" if not args else f"item{args}")).item(*args)

    def __hash__(self):
        return id(self)

    # a copy is a fresh base holding the same (immutable SSA) Value
    def __copy__(self): return Tracer(self.value, self._tr, self.weak)
    def __deepcopy__(self, memo): return Tracer(self.value, self._tr, self.weak)

    def __getattr__(self, name):
        # only reached for names the class lacks: an ndarray method spmd does not trace
        if hasattr(np.ndarray, name) and not name.startswith("__"):
            raise NotImplementedError(f"ndarray.{name} is not supported on traced arrays in spmd "
                                      f"(at {user_loc()})")
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")


class NumpyBuffer(np.ndarray):
    """An ndarray the user's function made with numpy while this thread traces it
    (np.zeros, np.array, ...): numpy's own array, holding numbers, until a traced value is
    written into it or into a view of it. From then on it stands for a Tracer of its
    current value, and every numpy call on it goes to that Tracer. numpy_buffers.py makes
    them and installs their behaviour."""

    _root = None        # the base NumpyBuffer whose memory this one views (None: it is a base)
    _traced = None      # a base: its Tracer once traced; a view: its traced view, made when asked

    def base_buffer(self) -> "NumpyBuffer":
        return self if self._root is None else self._root

    def live(self) -> bool:
        """Has a traced value been written into its memory?"""
        return self.base_buffer()._traced is not None


def resolve(x):
    """What tracing should see of x: for a NumpyBuffer, the Tracer it stands for once
    traced, else a plain ndarray of its numbers; anything else as it is."""
    if isinstance(x, NumpyBuffer):
        return x.traced() if x.live() else np.ndarray.view(x, np.ndarray)
    return x


class Hint:
    """numpy's layout of a new array that has no Buffer yet, worked out only when asked
    (most never are): `make(*layouts of deps)`, deps being Tracers; made once and kept.
    `c_like`: numpy lays out whatever it makes from this array, alone or with C-order
    arrays, in C order (a broadcast of a C-order array: its repeated axes count for
    nothing), so nothing made from it needs a hint of its own."""
    __slots__ = ("make", "deps", "c_like", "made")

    def __init__(self, make, deps=(), c_like=False):
        self.make, self.deps, self.c_like, self.made = make, tuple(deps), c_like, None


def _pending(x):
    h = x._hint if x._buf is None else None
    return h is not None and h.made is None


def _work_out(x):
    """Make x's hint and every hint it waits on, depth first with a stack of our own:
    the chain behind one array can be thousands of ops long (the rounds of
    spmd.random's Threefry), and made once each, its cost is its length, where asking
    each operand anew would double it at every op two operands share. A hint that
    waits on itself would never finish: that is spmd's bug, and says so."""
    path, on_path = [x], {id(x._hint)}
    while path:
        y = path[-1]
        h = y._hint
        d = next((d for d in h.deps if _pending(d)), None)
        if d is not None:
            if id(d._hint) in on_path:
                raise _runaway_layout(y, d)
            path.append(d)
            on_path.add(id(d._hint))
            continue
        h.made = h.make(*[d._layout() for d in h.deps])
        h.deps = ()                   # made: the operands' Tracers may go
        path.pop()
        on_path.discard(id(h))
    return x._hint.made


def _runaway_layout(y, d):
    op = y._val.producer
    what = f"{op.name} (made at {op.loc})" if op is not None else repr(y)
    return TraceError(f"spmd could not work out numpy's memory layout of the result of {what}, needed at "
                      f"{user_loc()}: it depends on itself through {d!r}. This is a bug in spmd; "
                      f"please report it with this line.")


# -- tracing that runs away -----------------------------------------------------------------
RUNAWAY_DEPTH = 200     # frames of spmd and numpy under the user's line: spmd's recursion, not theirs


def runaway(err: RecursionError):
    """The TraceError for a RecursionError raised while tracing, if spmd's own frames ran
    away (a layout or view that refers back to itself...): it names the numpy call and
    the user's line it came from. None if the recursion is the user's own (their line
    is the deepest, or only a few frames of spmd lie under it): that error stands."""
    frames, tb = [], err.__traceback__
    while tb is not None:
        frames.append(tb)
        tb = tb.tb_next
    last = max((i for i, t in enumerate(frames) if not is_internal(t.tb_frame.f_code.co_filename)), default=None)
    if last is None or len(frames) - 1 - last < RUNAWAY_DEPTH:
        return None
    user = frames[last]
    loc = f"{os.path.basename(user.tb_frame.f_code.co_filename)}:{user.tb_lineno}"
    what = _entry_name(frames[last + 1].tb_frame)
    return TraceError(f"tracing {what} at {loc} ran away inside spmd (Python's recursion limit was hit "
                      f"{len(frames) - 1 - last} frames under that line, in {_hot(frames[last + 1:])}): "
                      f"this is a bug in spmd; please report it with this line.")


def _entry_name(f):
    """What the user's line called, from the frame of spmd's entry it came in through."""
    loc, name = f.f_locals, f.f_code.co_name
    if name == "_array_function" and "func" in loc:
        return f"np.{getattr(loc['func'], '__name__', loc['func'])}"
    if name == "_array_ufunc" and "ufunc" in loc:
        method = loc.get("method", "__call__")
        return f"np.{loc['ufunc'].__name__}" + ("" if method == "__call__" else f".{method}")
    if name == "m" and isinstance(loc.get("name"), str):         # a Tracer method (numpy_api._method)
        return f"ndarray.{loc['name']}"
    return f"{name}()"


def _hot(tbs):
    """The spmd functions the runaway went round most often."""
    counts: dict = {}
    for t in tbs:
        key = t.tb_frame.f_code.co_name
        counts[key] = counts.get(key, 0) + 1
    top = sorted(counts, key=counts.get, reverse=True)[:3]
    return ", ".join(f"{k} x{counts[k]}" for k in top)


def _storing_into_numpy() -> bool:
    """Is the user's line storing into a subscript (buf[i] = value) right now? numpy's
    ndarray.__setitem__ converts the value with float() or __array__, which is how a
    write into a plain numpy array reaches the Tracer."""
    from ..errors import user_frame
    f = user_frame()
    if f is None:
        return False
    ops = _STORES.get(f.f_code)
    if ops is None:
        import dis
        ops = _STORES[f.f_code] = {i.offset for i in dis.get_instructions(f.f_code) if i.opname == "STORE_SUBSCR"}
    return f.f_lasti in ops


def _refuse_list_call(tracer, loc):
    """The error for a numpy function given a list holding tracer (np.linalg.norm([x, y])),
    if that is how its value was asked for."""
    func = _numpy_call_on_sequence(tracer)
    if func is not None:
        raise ConcreteValueError(
            f"np.{func} of a Python list of traced arrays at {loc}: numpy converts a list "
            f"itself (its functions dispatch on the list, not on the arrays in it), so spmd "
            f"cannot trace the call. Stack the list first, as numpy would: "
            f"np.{func}(np.stack([...]), ...) gives numpy's result and is traced (and "
            f"differentiated) by spmd.", loc)


def _numpy_call_on_sequence(tracer):
    """The numpy function the user's line called with a list or tuple holding tracer as
    its first argument (np.sum([x, y])), whose conversion reached tracer.__array__, or None."""
    from ..errors import user_frame
    user = user_frame()
    f = sys._getframe(2)
    while f is not None and f.f_back is not user:
        f = f.f_back
    if f is None or not f.f_code.co_argcount or "numpy" not in f.f_code.co_filename:
        return None
    first = f.f_locals.get(f.f_code.co_varnames[0])
    return f.f_code.co_name if isinstance(first, (list, tuple)) and _holds(first, tracer) else None


def _holds(seq, x):
    return any(e is x or (isinstance(e, (list, tuple)) and _holds(e, x)) for e in seq)


_STORES: dict = {}      # code object -> offsets of its STORE_SUBSCR instructions (error paths only)


def _raise_store_into_numpy(tracer, loc):
    raise ConcreteValueError(
        f"a traced value is written into a plain numpy array at {loc} (buf[i] = value, with buf "
        f"made outside the function, or by a global's .copy()): a numpy array holds numbers, "
        f"and {tracer!r} has none until the program runs. Copy it inside the function first: "
        f"buf = np.array(a); arrays made there by np.zeros / np.empty / np.array take traced values "
        f"as in numpy.", loc)
