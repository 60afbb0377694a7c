"""spmd.debug: look at values while a program runs.

    spmd.debug.print(fmt, *args, **kwargs)
        Inside spmd.jit: prints fmt.format(*args, **kwargs) each time the program runs,
        once per call (by rank 0), with the values numpy would have: an array split over
        devices is printed whole. Outside jit: prints at once, on process 0.
    spmd.debug.breakpoint()
        Outside jit: stops in pdb here, on process 0, where every value is an array you
        can read (numpy on spmd.Arrays runs sharded, eagerly). Inside jit there is no
        value to look at until the program runs: it raises, saying so.

`fmt` is a str.format string, as jax.debug.print's: write "{}" or "{name}", not an
f-string (an f-string would format the traced placeholder, once, while tracing).
"""
from __future__ import annotations

import builtins
import os
import sys

import numpy as np

from .errors import TraceError, user_loc
from .frontend.trace import current_trace
from .ir.ops.debug import render
from .ir.ops.names import DEBUG_PRINT


def print(fmt, *args, **kwargs):  # noqa: A001 - spmd.debug.print, as jax.debug.print
    """Print fmt.format(*args, **kwargs) with the values the program has when it runs
    (see the module docstring)."""
    if not isinstance(fmt, str):
        raise TypeError(f"spmd.debug.print: fmt must be a str, got {type(fmt).__name__}")
    names = ("",) * len(args) + tuple(kwargs)
    values = list(args) + list(kwargs.values())
    t = current_trace()
    if t is None:
        from .runtime import process_index
        # reading a split spmd.Array is a collective: every process reads, one prints
        arrays = [np.asarray(v) for v in values]
        if process_index() == 0:
            builtins.print(render(fmt, names, arrays), flush=True)
        return
    from .frontend import core
    try:
        xs = [core.asarray(v, t=t) for v in values]
    except TypeError:
        raise TraceError(f"spmd.debug.print at {user_loc()}: it prints arrays and numbers; got "
                         f"{', '.join(type(v).__name__ for v in values)} (pass a pytree's leaves one by one)") from None
    try:            # a format that cannot take the values fails here, at the user's line
        render(fmt, names, [np.zeros(x.shape, x.dtype) for x in xs])
    except (IndexError, KeyError, ValueError, TypeError) as e:
        raise TraceError(f"spmd.debug.print at {user_loc()}: {fmt!r} cannot format the "
                         f"{len(values)} value(s) given: {type(e).__name__}: {e}") from None
    t.emit(DEBUG_PRINT, *[x.value for x in xs], fmt=fmt, names=names)


def breakpoint():  # noqa: A001
    """pdb at the caller's line, on process 0 (see the module docstring)."""
    if current_trace() is not None:
        raise TraceError(
            f"spmd.debug.breakpoint() at {user_loc()} inside spmd.jit: a traced function has no values "
            f"to look at until the program runs. Call the function without spmd.jit (on spmd.Arrays "
            f"numpy runs sharded, eagerly) to stop here with its values, or print them while the "
            f"program runs with spmd.debug.print(\"x = {{}}\", x).")
    if os.environ.get("PYTHONBREAKPOINT") == "0":
        return
    from .runtime import process_index
    if process_index() == 0:
        import pdb
        pdb.Pdb().set_trace(sys._getframe(1))


__all__ = ["print", "breakpoint"]
