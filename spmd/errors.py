"""Error types. Every error spmd raises on bad input is an SpmdError that names the
user's line, the op, the shapes and (where they matter) the shardings; `user_loc` finds
that line. Warnings point at the user's line too (`warn_at`), once per line."""
import os
import sys
import warnings

import numpy as np


class SpmdError(Exception):
    """Base class of every error spmd raises on bad input."""


class ShapeError(SpmdError, ValueError):
    """An op was given operands whose shapes or dtypes it cannot take."""


class TraceError(SpmdError, TypeError):
    """User code did something tracing cannot follow (a Python branch on a traced value...)."""


class ConcreteValueError(TraceError):
    """Tracing needed the value of a traced array (float(), bool() of `if` on data, an
    index, .item(), np.array(traced)): spmd.jit then runs the function eagerly instead
    (unless fallback=False). `loc` is the user's line that needed it."""

    def __init__(self, message, loc=None):
        super().__init__(message)
        self.loc = loc


class FallbackWarning(UserWarning):
    """spmd.jit ran a function eagerly on sharded arrays, since tracing it needed a value."""


class ReshardWarning(UserWarning):
    """spmd moved more of an array than the program asked for: a gather the user did not
    write (an op that needs a split dim whole), or a reshard holding more per device than
    either end needs."""


class ParseError(SpmdError, ValueError):
    """The IR text parser was given malformed text."""


class ShardingError(SpmdError, ValueError):
    """A sharding or mesh is malformed or does not fit the value it annotates."""


class CheckpointError(SpmdError, ValueError):
    """A checkpoint is missing, corrupt, truncated, or its index is malformed or unsafe."""


class MemoryLimitError(SpmdError, MemoryError):
    """A program does not fit the memory it is given (spmd.jit(memory_limit=...)) or the
    memory the machine has free; said before it runs, with what is live at its peak."""


class CollectiveError(SpmdError, RuntimeError):
    """A collective failed: a rank was lost, timed out, or raised."""


def on_every_rank(err):
    """Mark `err` as one every rank raises alike (a launch that does not fit the mesh,
    ranks that disagree: each saw the same exchange): under MPI rank 0 alone reports it,
    once, instead of every rank printing the same traceback."""
    err.on_every_rank = True
    return err


def where(loc):
    return f" at {loc}" if loc else ""


_SPMD_DIR = os.path.dirname(os.path.realpath(__file__)) + os.sep
_NUMPY_DIR = os.path.dirname(os.path.realpath(np.__file__)) + os.sep
_internal: dict = {}


def is_internal(fn: str) -> bool:
    """Is this code file part of spmd or numpy? (Real paths: spmd may be imported
    through a path like docs/../spmd.)"""
    r = _internal.get(fn)
    if r is None:
        real = os.path.realpath(fn)
        r = _internal[fn] = fn.startswith("<frozen") or real.startswith((_SPMD_DIR, _NUMPY_DIR))
    return r


_library: dict = {}


def is_library(fn: str) -> bool:
    """Is this code file numpy's or an installed package's other than spmd (the code a user
    calls, not writes: np.vectorize, scipy, a plotting library)?"""
    r = _library.get(fn)
    if r is None:
        real = os.path.realpath(fn)
        r = _library[fn] = not real.startswith(_SPMD_DIR) and (
            real.startswith(_NUMPY_DIR) or f"{os.sep}site-packages{os.sep}" in real
            or f"{os.sep}dist-packages{os.sep}" in real)
    return r


# a loc names its file by its base name: the paths seen under each, to show a loc's code
_paths: dict = {}


def user_frame():
    """The innermost frame outside spmd and numpy: the user's, or None."""
    f = sys._getframe(1)
    while f is not None:
        if not is_internal(f.f_code.co_filename):
            return f
        f = f.f_back
    return None


def user_loc() -> str | None:
    """file:line of the innermost frame outside spmd and numpy: the user's line."""
    f = user_frame()
    if f is None:
        return None
    fn = f.f_code.co_filename
    base = os.path.basename(fn)
    _paths.setdefault(base, set()).add(fn)
    return f"{base}:{f.f_lineno}"


def source_line(loc) -> str | None:
    """The code at `loc` ("file.py:12", as user_loc wrote it in this process), stripped;
    None when unknown (or two files of this process share the name)."""
    import linecache
    base, _, line = (loc or "").rpartition(":")
    paths = _paths.get(base, ())
    if len(paths) != 1 or not line.isdigit():
        return None
    return linecache.getline(next(iter(paths)), int(line)).strip() or None


_registries: dict = {}     # a user file's path -> the warnings registry of its lines


def warn_at(message, category, loc=None):
    """Warn from the user's line `loc` ("file.py:LINE", an op's loc; else the innermost
    user frame): the warning names that line, not spmd's, and Python's default filter then
    shows it once per line and message, however many programs, stages or calls meet it.
    The user's filters apply as to any warning."""
    if loc is None:
        f = sys._getframe(1)
        while f is not None and is_internal(f.f_code.co_filename):
            f = f.f_back
        if f is None:
            warnings.warn(message, category, stacklevel=2)
            return
        path, line = f.f_code.co_filename, f.f_lineno
    else:
        name, _, line = loc.rpartition(":")
        paths = _paths.get(name, ())
        path = next(iter(paths)) if len(paths) == 1 else name
        line = int(line)
    warn_explicit(message, category, path, line)


def warn_explicit(message, category, path, line):
    """warnings.warn_explicit with one registry per file, as warnings.warn keeps one per
    module: a warning already shown from that line is not shown again."""
    global _issued
    _issued += 1
    module = os.path.splitext(os.path.basename(path))[0]
    warnings.warn_explicit(message, category, path, line, module=module,
                           registry=_registries.setdefault(path, {}))


_issued = 0


def warnings_issued() -> int:
    """How many warnings warn_at has issued in this process (the program cache keeps no
    lowering that warned, so that a later run shows its warnings too)."""
    return _issued
