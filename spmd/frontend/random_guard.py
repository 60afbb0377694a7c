"""np.random inside traced code is an error, not a constant.

numpy's random functions take no array argument, so `__array_function__` never sees
them: inside spmd.jit, `np.random.rand(n)` would run once while tracing and bake one
sample into the program -- the same "random" dropout mask every step, silently. The
module functions of np.random (and default_rng, which makes generators)
are wrapped once, at import, by a check that costs one thread-local lookup: outside of
tracing (any other thread, or no jit) they run numpy's own function unchanged; while
this thread is tracing they raise a TraceError naming the user's line and spmd.random.
Generators made before tracing and used inside it cannot be seen (their methods are C
code); the user guide says so.
"""
from __future__ import annotations

import functools

import numpy as np

from ..errors import TraceError, user_loc
from .trace import current_trace

_SKIP = {"Generator", "BitGenerator", "SeedSequence", "MT19937", "PCG64", "PCG64DXSM", "Philox", "SFC64",
         "get_state", "set_state", "bit_generator", "mtrand"}


def _guard(name, f):
    @functools.wraps(f)
    def wrapped(*args, **kwargs):
        if current_trace() is not None:
            raise TraceError(
                f"np.random.{name} at {user_loc()} inside spmd.jit: it would run once, while the "
                f"function is traced, and every call of the compiled program would reuse that one "
                f"sample. Use spmd.random: key = spmd.random.key(seed); k1, k2 = "
                f"spmd.random.split(key); spmd.random.normal(k1, shape) (pass the key as an "
                f"argument and split it each step); or draw the numbers outside and pass them in.")
        return f(*args, **kwargs)
    wrapped._spmd_guard = True
    wrapped.__module__, wrapped.__qualname__ = "numpy.random", name      # pickles by name, as before
    return wrapped


def install():
    for name in getattr(np.random, "__all__", dir(np.random)):
        if name.startswith("_") or name in _SKIP:
            continue
        f = getattr(np.random, name, None)
        if callable(f) and not isinstance(f, type) and not getattr(f, "_spmd_guard", False):
            setattr(np.random, name, _guard(name, f))
