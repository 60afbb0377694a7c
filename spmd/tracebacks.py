"""How spmd prints an exception that ends a program: the user's frames only.

An error in a user's function passes through spmd's tracing, compiling and running
(twenty frames and more) before it reaches the top; those frames say nothing the user
can act on, and under MPI every rank printed them. The traceback printed keeps the
frames outside spmd and numpy (errors.is_internal), so it ends at the user's line;
SPMD_TRACEBACK=full prints every frame, as Python would.

`install()` makes this the process's excepthook, unless the program set its own.
"""
from __future__ import annotations

import os
import sys
import traceback

from .errors import is_internal

HIDDEN_NOTE = "(spmd's own frames are hidden; SPMD_TRACEBACK=full shows them)\n"


def full() -> bool:
    return os.environ.get("SPMD_TRACEBACK", "").strip().lower() == "full"


def user_traceback(tp, value, tb) -> str:
    """The traceback Python would print, without spmd's and numpy's frames (every frame
    with SPMD_TRACEBACK=full)."""
    if full():
        return "".join(traceback.format_exception(tp, value, tb))
    te = traceback.TracebackException(tp, value, tb, compact=True)
    hidden = trim(te, set())
    return "".join(te.format()) + (HIDDEN_NOTE if hidden else "")


def trim(te, seen) -> bool:
    """Drop internal frames from te and the exceptions chained to it (cause, context,
    a group's members); True if any was dropped."""
    if id(te) in seen:
        return False
    seen.add(id(te))
    kept = [f for f in te.stack if not is_internal(f.filename)]
    hidden = len(kept) < len(te.stack)
    te.stack = traceback.StackSummary.from_list(kept)
    for other in (te.__cause__, te.__context__, *(getattr(te, "exceptions", None) or ())):
        if other is not None:
            hidden = trim(other, seen) or hidden
    return hidden


def hook(tp, value, tb):
    sys.stderr.write(user_traceback(tp, value, tb))
    sys.stderr.flush()


def install():
    """Print uncaught exceptions with user_traceback, unless the program (or a tool such
    as IPython) has its own hook."""
    if sys.excepthook is sys.__excepthook__:
        sys.excepthook = hook


def stack_traceback(frame, last_line) -> str:
    """A traceback of a thread's current stack (from sys._current_frames), user frames
    only unless SPMD_TRACEBACK=full, ending with last_line (e.g. "KeyboardInterrupt")."""
    frames = traceback.extract_stack(frame)
    kept = frames if full() else [f for f in frames if not is_internal(f.filename)]
    text = "Traceback (most recent call last):\n" + "".join(traceback.format_list(kept)) + last_line + "\n"
    return text + (HIDDEN_NOTE if len(kept) < len(frames) else "")
