"""np.random inside traced code: numpy's numbers after np.random.seed(constant), an error
otherwise.

numpy's random functions take no array argument, so `__array_function__` never sees
them: inside spmd.jit, `np.random.rand(n)` would run once while tracing and bake one
sample into the program -- the same "random" dropout mask every step, silently. The
module functions of np.random (and default_rng, which makes generators) are wrapped
once, at import, by a check that costs one thread-local lookup: outside of tracing (any
other thread, or no jit) they run numpy's own function unchanged; while this thread is
tracing they raise a TraceError naming the user's line and spmd.random.

Except after `np.random.seed(constant)` in the same function (the same trace; not an
enclosing one, since a loop body runs many times): then numpy itself gives the same
numbers on every call, so the draws run in numpy while tracing and are constants of the
program, numpy's numbers. Likewise `np.random.default_rng(constant)`. numpy's global
state after such a function is the state its draws left, whatever came before: the
state the trace left is kept (`state_after`), and jit puts it back after every call.
Generators made before tracing and used inside it cannot be seen (their methods are C
code); the user guide says so.
"""
from __future__ import annotations

import functools
import weakref

import numpy as np

from ..errors import TraceError, user_loc
from .numpy_buffers import as_buffer
from .trace import Tracer, current_trace, resolve

_SKIP = {"Generator", "BitGenerator", "SeedSequence", "MT19937", "PCG64", "PCG64DXSM", "Philox", "SFC64",
         "get_state", "set_state", "bit_generator", "mtrand"}

_seeded = weakref.WeakSet()       # traces in which np.random.seed(constant) ran


def state_after(trace):
    """numpy's global random state as `trace` left it, if the function seeded it (jit
    restores it after each call, as running the function in numpy would leave it)."""
    return np.random.get_state() if trace in _seeded else None


def _refuse(name, why=""):
    raise TraceError(
        f"np.random.{name} at {user_loc()} inside spmd.jit{why}: it would run once, while the "
        f"function is traced, and every call of the compiled program would reuse that one "
        f"sample. Use spmd.random: key = spmd.random.key(seed); k1, k2 = "
        f"spmd.random.split(key); spmd.random.normal(k1, shape) (pass the key as an "
        f"argument and split it each step); draw the numbers outside and pass them in; or, "
        f"for fixed numbers, call np.random.seed(constant) first in the same function.")


def _guard(name, f):
    @functools.wraps(f)
    def wrapped(*args, **kwargs):
        t = current_trace()
        if t is not None and t not in _seeded:
            _refuse(name)
        if name in ("shuffle", "permutation") and args and _by_index(args[0]):
            return _by_permutation(np.random.mtrand._rand.permutation, name, *args, **kwargs)
        r = f(*args, **kwargs)
        # a seeded draw is an array the function made: the user may write traced values
        # into it (`w = np.random.uniform(...)`, then `w -= lr * g`)
        return as_buffer(r) if t is not None else r
    return _named(wrapped, name)


_INDEXED_TYPES = []     # array types besides Tracer that numpy would shuffle one swap at a time


def shuffle_by_index(cls):
    """Let np.random.shuffle / permutation of a cls (spmd.Array, registered by eager mode)
    take it at numpy's permutation rather than swap its rows one at a time."""
    _INDEXED_TYPES.append(cls)


def _by_index(x):
    return (isinstance(resolve(x), Tracer) or isinstance(x, tuple(_INDEXED_TYPES))) and x.ndim > 0


def _by_permutation(permutation, name, x, axis=0):
    """shuffle(x) / permutation(x) of a traced x or an spmd.Array. numpy shuffles a sequence
    that is not an ndarray one element swap at a time (thousands of traced writes, or of
    eager ones); its draws are the ones permutation(n) makes, and a shuffle moves x[p[i]]
    to i, so x taken at permutation(n) along the axis is the same result, and leaves the
    same state."""
    moved = np.take(x, permutation(x.shape[axis]), axis=axis)
    if name == "permutation":
        return moved
    x[...] = moved
    return None


class _WatchedGenerator(np.random.Generator):
    """default_rng(constant) while tracing: numpy's generator, whose draws are arrays the
    function made (numpy_buffers.as_buffer)."""

    def __getattribute__(self, name):
        a = super().__getattribute__(name)
        if name.startswith("_") or not callable(a):
            return a
        if name in ("shuffle", "permutation"):
            plain_permutation = super().__getattribute__("permutation")

            @functools.wraps(a)
            def permute(x, *args, **kwargs):
                if _by_index(x):
                    return _by_permutation(plain_permutation, name, x, *args, **kwargs)
                return as_buffer(a(x, *args, **kwargs))
            return permute

        @functools.wraps(a)
        def draw(*args, **kwargs):
            return as_buffer(a(*args, **kwargs))
        return draw


def _guard_seed(f):
    @functools.wraps(f)
    def seed(seed=None):
        t = current_trace()
        if t is not None:
            if seed is None:
                _refuse("seed", " without a seed (numpy then seeds from the OS's entropy)")
            f(seed)
            _seeded.add(t)
            return None
        return f(seed)
    return _named(seed, "seed")


def _guard_default_rng(f):
    @functools.wraps(f)
    def default_rng(seed=None):
        if current_trace() is None:
            return f(seed)
        if seed is None:
            _refuse("default_rng", " without a seed")
        g = f(seed)
        return _WatchedGenerator(g.bit_generator) if type(g) is np.random.Generator else g
    return _named(default_rng, "default_rng")


def _named(wrapped, name):
    wrapped._spmd_guard = True
    wrapped.__module__, wrapped.__qualname__ = "numpy.random", name      # pickles by name, as before
    return wrapped


def install():
    special = {"seed": _guard_seed, "default_rng": _guard_default_rng}
    for name in getattr(np.random, "__all__", dir(np.random)):
        if name.startswith("_") or name in _SKIP:
            continue
        f = getattr(np.random, name, None)
        if callable(f) and not isinstance(f, type) and not getattr(f, "_spmd_guard", False):
            setattr(np.random, name, special.get(name, functools.partial(_guard, name))(f))
