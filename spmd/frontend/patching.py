"""Module attributes replaced while some thread traces: numpy's creation functions
(numpy_buffers.py), Python's math functions (math_module.py). The replacements run the
original for every caller that is not tracing; they are installed when the first thread
starts tracing and put back when the last one ends, counted across threads."""
from __future__ import annotations

import contextlib
import threading


def while_tracing(install, restore):
    """A context manager: `install()` when the first of the contexts open in any thread
    opens, `restore()` when the last one closes."""
    lock, active = threading.Lock(), [0]

    @contextlib.contextmanager
    def context():
        with lock:
            if active[0] == 0:
                install()
            active[0] += 1
        try:
            yield
        finally:
            with lock:
                active[0] -= 1
                if active[0] == 0:
                    restore()
    return context
