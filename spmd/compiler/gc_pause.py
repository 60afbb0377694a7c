"""Python's cyclic garbage collector paused while a program is traced, lowered and
compiled.

Those stages make hundreds of thousands of small objects (Values, Ops, rewritten graphs)
and keep most of them, so each collection the allocations trigger scans a heap that
grows with the program: the collector, not the passes, made lowering superlinear in the
program (a per-point loop of 12,000 ops lowered in 5.5 s with it running, 0.5 s paused).
Nothing these stages make depends on a collection running; the cycles they drop are
collected when the collector runs again, after the stage. Counted across threads: the
collector runs again when the last compiling thread leaves, if it ran before."""
from __future__ import annotations

import contextlib
import gc
import threading

_lock = threading.Lock()
_state = {"depth": 0, "was_enabled": False}


@contextlib.contextmanager
def paused():
    with _lock:
        if _state["depth"] == 0:
            _state["was_enabled"] = gc.isenabled()
            gc.disable()
        _state["depth"] += 1
    try:
        yield
    finally:
        with _lock:
            _state["depth"] -= 1
            if _state["depth"] == 0 and _state["was_enabled"]:
                gc.enable()
