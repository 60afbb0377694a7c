"""Eager numpy on spmd.Arrays runs as small partitioned programs, one per op.

`run` makes the op a one-op function around the same builder the tracer uses (the
numpy_api table), stages it with jit once per (op, argument shapes, dtypes, shardings,
static arguments) and caches it. Arguments: spmd.Arrays and ndarrays are the program's
inputs (an ndarray is placed replicated), and so are scalars wrapped in `Dynamic`
(weak, NEP 50: `x * alpha` compiles once for every alpha); everything else (axis=,
shapes, dtypes, index slices) is static and part of the cache key. The result is an
spmd.Array with the sharding propagation chose; nothing is gathered. What spmd cannot
run falls back to numpy on the gathered values, with a UserWarning naming the bytes
gathered (once per call site; `python -W error::UserWarning` makes it an error).

Writes are the traced write path too. A program that writes into an Array argument
(x[k] = v, x += v, out=, np.copyto, ...) returns the argument's new value as jit does
for any function that writes its arguments, and `write_back` gives it to the Array: a
view's write goes through to its root (eager/views.py) by a program that runs the view's
steps on the root and writes there (`write`), exactly as functionalization does in
traced code; the root takes the new shards, and each of its live views is derived again
from them, so every view shows the write, as in numpy. (Under MPI every process does
this in step: the live views are the ones the program's code holds on every rank.)
"""
from __future__ import annotations


import hashlib

import numpy as np

from ..errors import ReshardWarning, TraceError, user_loc, warn_at
from ..frontend import core, indexing
from ..frontend import functionalize as fz
from ..frontend.trace import Tracer
from ..runtime.array import Array, device_put
from ..jit import Jitted
from ..tree import tree_flatten, tree_map, tree_unflatten
from . import views

_CACHE: dict = {}          # key -> a jitted one-op function, _FALLBACK or _AS_CONSTANTS
_FALLBACK = object()
# the op needs its numpy arguments' values (np.insert's positions, np.repeat's counts):
# they are constants of its program, as under jit (constants_call)
_AS_CONSTANTS = object()
# numpy arguments up to this many elements may be constants of a program (in its key)
CONSTANT_ELEMENTS = 1 << 16
_COLLECTIVES: dict = {}    # key -> the collectives its program runs, by op name
_VIEW_LEAVES: dict = {}    # key -> the result leaves that are views of the first argument
# key -> {result leaf: {attribute: value}} for the results numpy would not give as plain
# arrays: read-only ones (x.imag of a real x: why) and numpy scalars (x.sum(): immutable)
_RESULT_KINDS: dict = {}
# counters since import (tests and users may reset them): one-op programs compiled and
# run, fallbacks to numpy, and the collectives the eager programs ran, by op name
STATS = {"compiled": 0, "calls": 0, "fallbacks": 0, "collectives": {}}


def reset_stats():
    STATS.update(compiled=0, calls=0, fallbacks=0, collectives={})


def clear_cache():
    _CACHE.clear()
    _COLLECTIVES.clear()
    _VIEW_LEAVES.clear()
    _RESULT_KINDS.clear()


class Constant:
    """A numpy argument, or a scalar, taken as a constant of the program: the builder sees
    its value, and the program's key holds it (a digest of an array's bytes)."""
    __slots__ = ("value", "key")

    def __init__(self, value):
        self.value = value
        if isinstance(value, np.ndarray):
            digest = hashlib.blake2b(np.ascontiguousarray(value).tobytes(), digest_size=16).hexdigest()
            self.key = ("ndarray", value.shape, value.dtype.str, digest)
        else:
            self.key = (type(value).__name__, getattr(value, "dtype", None), value)

    def __hash__(self):
        return hash(self.key)

    def __eq__(self, other):
        return isinstance(other, Constant) and self.key == other.key


class Dynamic:
    """A scalar argument that is a program input (a weak scalar, NEP 50), not static."""
    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value


def is_dynamic_scalar(x, ints=(-2 ** 31, 2 ** 31)) -> bool:
    """A scalar that may be a program input. A Python int outside int32's range (or
    `ints`, the range of the integer arrays it meets) is static, so the builder sees its
    value: numpy raises OverflowError for 300 against a uint8 array (as a traced input it
    would wrap silently)."""
    if type(x) is int:
        return ints[0] <= x < ints[1]
    return isinstance(x, (bool, int, float, complex, np.generic))


def int_range(dtypes_):
    """[lo, hi) of the Python ints that fit every integer dtype among dtypes_ (and int32)."""
    lo, hi = -2 ** 31, 2 ** 31
    for dt in dtypes_:
        dt = np.dtype(dt)
        if dt.kind in "iu":
            info = np.iinfo(dt)
            lo, hi = max(lo, int(info.min)), min(hi, int(info.max) + 1)
    return lo, hi


def dynamic_scalars(args):
    """args with every scalar leaf wrapped in Dynamic."""
    leaves, tree = tree_flatten(args, is_leaf=_is_array_leaf)
    ints = int_range([x.dtype for x in leaves if _is_array_leaf(x)])
    return tree_unflatten(tree, [Dynamic(x) if is_dynamic_scalar(x, ints) else x for x in leaves])


def _is_array_leaf(x):
    return isinstance(x, (Array, np.ndarray))


def _is_input(x):
    return isinstance(x, (Array, np.ndarray, Dynamic))


# -- running one op ---------------------------------------------------------------------------
def run(kind, name, builder, args, kwargs=None, out_sharding=None, fallback=None, views_of_first=True):
    """builder(*args, **kwargs) as a cached one-op partitioned program, its result laid out
    by `out_sharding` if given. Where spmd cannot run it: fallback(why) if given, else
    numpy on the gathered values. A result that is a view of an Array argument is recorded
    as one (unless views_of_first is False)."""
    STATS["calls"] += 1
    kwargs = kwargs or {}
    fallback = fallback or (lambda why: in_numpy(kind, name, args, kwargs, why))
    original = tuple(args) if views_of_first else ()
    call, shift = (builder, original, dict(kwargs)), 0
    if original and isinstance(args[0], Array) and views.is_view(args[0]) \
            and getattr(builder, "depends_on_layout", False):
        # numpy decides view or copy (and ravel's order "K") from the strides: the program
        # takes the view as what it is, a view of its root
        root, steps = views.root_and_steps(args[0])
        builder, args, shift = _on_view, (root, steps, builder) + tuple(args[1:]), 2
    leaves, tree = tree_flatten((tuple(args), dict(kwargs)), is_leaf=_is_input)
    try:
        key = _cache_key(kind, name, tree, out_sharding, leaves)
    except _Unhashable:
        return fallback("an unhashable argument")
    f = _CACHE.get(key)
    if f is None:
        f = _CACHE[key] = _make(key, name, builder, tree, leaves, out_sharding)
    first = key
    if f is _AS_CONSTANTS:
        key, f, leaves = _with_constants(kind, name, builder, tree, leaves, out_sharding)
    while True:
        if f is _FALLBACK:
            return fallback("spmd cannot run it")
        dyn = [x.value if isinstance(x, Dynamic) else x for x in leaves if _is_input(x)]
        try:
            out = f(*dyn)
            break
        except (NotImplementedError, TraceError) as e:
            if key[0] != "constants" and any(isinstance(x, (np.ndarray, Dynamic)) for x in leaves):
                # as a program input a numpy argument (or a scalar) is a traced value, which
                # the op may not take (np.insert's positions, np.repeat's counts,
                # np.percentile's q); under jit it is a constant, and so it is here
                _CACHE[key] = _AS_CONSTANTS
                key, f, leaves = _with_constants(kind, name, builder, tree, leaves, out_sharding)
                continue
            # (an op that fails with constants too fails alike for other values: later calls
            # fall back without tracing it again)
            _CACHE[key] = _CACHE[first] = _FALLBACK
            return fallback(str(e).split(" (at ")[0])
    _count_collectives(key, f, dyn)
    if original:
        _record_views(out, _VIEW_LEAVES.get(key, ()), call, shift)
    if _RESULT_KINDS.get(key):
        outs = tree_flatten(out)[0]
        for i, attrs in _RESULT_KINDS[key].items():
            for name, value in attrs.items():
                setattr(outs[i], name, value)
    return out


def _with_constants(kind, name, builder, tree, leaves, out_sharding):
    """The key, program and leaves of the op with its numpy arguments (up to
    CONSTANT_ELEMENTS elements) and scalars as constants; _FALLBACK where none is left to
    make one or the program cannot be made so either."""
    leaves = [Constant(x.value) if isinstance(x, Dynamic) else
              Constant(x) if isinstance(x, np.ndarray) and x.size <= CONSTANT_ELEMENTS else x for x in leaves]
    key = ("constants",) + _cache_key(kind, name, tree, out_sharding, leaves)
    f = _CACHE.get(key)
    if f is None:
        f = _CACHE[key] = _make(key, name, builder, tree, leaves, out_sharding)
    return key, f, leaves


def _cache_key(kind, name, tree, out_sharding, leaves):
    """What the program depends on: the op, the argument tree, the inputs' avals and
    shardings, and the static leaves' values."""
    return (kind, name, tree, out_sharding) + tuple(_input_key(x) if _is_input(x) else _static_key(x)
                                                  for x in leaves)


def _on_view(root, steps, builder, *args, **kwargs):
    return builder(views.derive(root, steps), *args, **kwargs)


def _make(key, name, builder, tree, leaves, out_sharding):
    is_in = [_is_input(x) for x in leaves]
    static = [None if d else x.value if isinstance(x, Constant) else x for x, d in zip(leaves, is_in)]

    def one_op(*dyn):
        it = iter(dyn)
        a, k = tree_unflatten(tree, [next(it) if d else x for x, d in zip(static, is_in)])
        r = builder(*a, **k)
        # numpy's result is a view of the first argument where the traced one shares its
        # Buffer: the eager result then is one too (run records it)
        leaves = tree_flatten(r)[0]
        _VIEW_LEAVES[key] = [(i, j) for i, leaf in enumerate(leaves) for j, arg in enumerate(a)
                             if isinstance(arg, Tracer) and fz.is_view_of(leaf, arg)]
        _RESULT_KINDS[key] = {i: _result_kind(leaf) for i, leaf in enumerate(leaves)
                              if isinstance(leaf, Tracer) and _result_kind(leaf)}
        return r

    one_op.__name__ = one_op.__qualname__ = f"eager_{name.strip('_')}"
    STATS["compiled"] += 1
    # the arrays' mesh, also of one device (jit alone would run that as plain numpy)
    mesh = next((x.sharding.mesh for x in leaves if isinstance(x, Array)), None)
    return Jitted(one_op, out_shardings=out_sharding, mesh=mesh, write_array=write_back)


def _result_kind(leaf) -> dict:
    """What numpy's result is beyond a plain C-ordered array: read-only (x.imag of a real
    x: why), a numpy scalar (x.sum(): immutable), or strides other than C order's (x.T,
    x.T + 1: its numpy_layout, which decides whether a later reshape is a view)."""
    if fz.is_scalar(leaf):
        return {"numpy_scalar": True}
    kind = {}
    if fz.read_only(leaf) is not None:
        kind["_read_only"] = fz.read_only(leaf)
    # (a read-only view has strides too: np.copy of a broadcast puts its repeated axes innermost)
    layout = fz.numpy_layout(leaf)
    if layout is not None:
        kind["numpy_layout"] = layout
    return kind


def _record_views(out, view_leaves, call, shift):
    """Record each result leaf i that is a view of the program's argument j (numbered as
    the program took them: `shift` more after the first when the first was a view's root)."""
    builder, args, kwargs = call
    outs = [out] if isinstance(out, Array) else tree_flatten(out)[0]
    for i, j in view_leaves:
        j = j if j == 0 else j - shift
        if isinstance(args[j], Array):
            rest = args[:j] + args[j + 1:]
            views.record(outs[i], args[j], (builder, rest, kwargs, None if isinstance(out, Array) else i, j))


def _count_collectives(key, f, dyn):
    ops = _COLLECTIVES.get(key)
    if ops is None:
        # (a program without a mesh has none: its report lists nothing)
        ops = _COLLECTIVES[key] = [c["op"] for c in f.lower(*dyn).report()["collectives"]]
    for o in ops:
        STATS["collectives"][o] = STATS["collectives"].get(o, 0) + 1


def _input_key(x):
    if isinstance(x, Array):
        # a numpy scalar has no memory to view (its views are new values): part of the key
        return ("A", x.shape, x.dtype.str, x.sharding, fz.layout_key(x), getattr(x, "numpy_scalar", False))
    if isinstance(x, np.ndarray):
        return ("N", x.shape, x.dtype.str, fz.layout_key(x))
    if isinstance(x.value, np.generic):
        return ("G", x.value.dtype.str)
    return ("S", type(x.value).__name__)        # a Python scalar: weak


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


# -- numpy on the gathered values, where spmd cannot run an op --------------------------------
def warn_gathered(what, arrays, why):
    """Warn that `what` runs in numpy on the gathered values of `arrays` (unless they are
    replicated: then each process reads its own copy, nothing leaves the mesh)."""
    nbytes = sum(x.nbytes for x in arrays)
    if nbytes and not all(x.is_fully_replicated for x in arrays):
        STATS["fallbacks"] += 1
        # a ReshardWarning (a UserWarning) from the user's line, once per line, as the
        # partitioner's gathers (sharding/gathers.py)
        warn_at(f"spmd: {what} on an spmd.Array runs in numpy on the gathered value "
                f"({nbytes} bytes gathered): {why}", ReshardWarning)


def gathered(x):
    if isinstance(x, Dynamic):
        return x.value
    # in numpy's memory order (x.T, x.T + 1): a fallback's reshape / ravel(order="A"),
    # copy(order="K") read it as numpy would
    return x.laid_out(x.numpy()) if isinstance(x, Array) else x


def in_numpy(kind, name, args, kwargs, why):
    """The op in numpy on the gathered values (warning with the bytes gathered), its array
    results placed back on the mesh, replicated."""
    leaves, tree = tree_flatten((tuple(args), dict(kwargs)), is_leaf=_is_input)
    arrays = [x for x in leaves if isinstance(x, Array)]
    label = getattr(name, "__name__", str(name)) if kind == "function" else name
    warn_gathered({"ufunc": f"np.{label}", "function": f"np.{label}", "method": f"ndarray.{label}"}.get(kind, label),
                  arrays, why)
    gleaves = [gathered(x) for x in leaves]
    a, k = tree_unflatten(tree, gleaves)
    out = _call_numpy(kind, name, a, k)
    if _writes_first(kind, name) and isinstance(args[0], Array):
        args[0][...] = a[0]          # numpy wrote the gathered copy: the Array takes it
    placed = _place(out, arrays[0].sharding.mesh if arrays else None)
    copies = [g for x, g in zip(leaves, gleaves) if isinstance(x, Array)]
    results, placed_leaves = tree_flatten(out)[0], tree_flatten(placed)[0]
    for r, p in zip(results, placed_leaves if len(placed_leaves) == len(results) else ()):
        # numpy's result was a view of an argument (x.view(int16), a reshape): here it is
        # a copy of a gathered copy, which no write through it could reach
        if isinstance(p, Array) and isinstance(r, np.ndarray) and any(np.may_share_memory(r, g) for g in copies):
            p._gathered_view = f"the result of {label}"
    return placed


# numpy functions that write into their first argument (a fallback must write it back)
WRITES_FIRST = {np.place, np.putmask, np.copyto, np.put, np.put_along_axis, np.fill_diagonal}


def _writes_first(kind, name):
    return (kind == "function" and name in WRITES_FIRST) or (kind == "ufunc" and name.endswith(".at"))


def _call_numpy(kind, name, a, k):
    if kind == "ufunc":
        ufunc, _, method = name.partition(".")          # "add.accumulate": np.add.accumulate
        return getattr(getattr(np, ufunc), method or "__call__")(*a, **k)
    if kind == "function":
        return name(*a, **k)
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
        placed = [_place(o, mesh) for o in out]
        return type(out)(*placed) if hasattr(out, "_fields") else tuple(placed)      # numpy's named tuples
    return out


# -- writes -----------------------------------------------------------------------------------
class _Root:
    """Stands for the written array's root among a write's operands."""

    def __repr__(self):
        return "<the written array>"


_ROOT = _Root()


def numpy_setitem(g, key, value):
    g[key] = value


def write(target, form, args, numpy_form, what):
    """form(target, *args) for the Array target, whose new value reaches its root and every
    view of it: one program runs target's view steps on the root and writes there
    (functionalization), and jit writes the root back. Where spmd cannot run the write,
    numpy_form(gathered target, *gathered args) does, and the result is written in."""
    root, steps = views.root_and_steps(target)
    gv = getattr(target, "_gathered_view", None) or getattr(root, "_gathered_view", None)
    if gv is not None:
        raise NotImplementedError(
            f"a write at {user_loc()} into {gv}: in numpy that is a view of the array, so the write "
            f"would change the array too; spmd ran it in numpy on a gathered copy (its ReshardWarning), "
            f"which no write reaches. Write into the spmd.Array itself, or make the copy explicit (.copy()).")
    ro = getattr(target, "_read_only", None) or getattr(root, "_read_only", None)
    if ro is not None:              # a read-only view that is not one of its root (x.imag of a real x)
        raise fz.read_only_error(ro)
    # an operand that is the root itself (anywhere in args: np.add(x, 1, out=x)) is the
    # root's value before the write (jit takes one array once per program)
    operands = tree_map(lambda x: _ROOT if x is root else x, tuple(args), is_leaf=_is_input)

    def numpy_write(why):
        warn_gathered(what, [target] + [x for x in tree_flatten(args, _is_input)[0] if isinstance(x, Array)], why)
        g = target.numpy()
        numpy_form(g, *tree_map(gathered, tuple(args), is_leaf=_is_input))
        write(target, indexing.setitem, (Ellipsis, g), numpy_setitem, what)

    run("write", form.__name__, _write_program, (root, steps, form) + operands, fallback=numpy_write,
        views_of_first=False)


def _write_program(root, steps, form, *args):
    before = fz.fresh(root)
    form(views.derive(root, steps), *tree_map(lambda x: before if x is _ROOT else x, args,
                                              is_leaf=lambda x: isinstance(x, Tracer)))


def write_back(a, new):
    """Array a, which a program wrote, takes the value `new` (jit's write_array): through
    to its root if a is a view; else a takes new's shards (laid out as a's), and its live
    views are derived again."""
    if views.is_view(a):
        write(a, indexing.setitem, (Ellipsis, new), numpy_setitem, "x[...] = v")
        return
    if new.sharding != a.sharding:
        new = run("function", "reshard", core.asarray, (new,), out_sharding=a.sharding, views_of_first=False)
    a._handles = new._handles
    for v in views.live_views(a):
        _, steps = views.root_and_steps(v)
        v._handles = run("view", "derive", views.derive, (a, steps), out_sharding=v.sharding,
                         views_of_first=False)._handles
