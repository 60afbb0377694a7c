"""runtime/allocator.py: a call's new buffers reuse the pages the calls before freed."""
import resource
import sys

import numpy as np
import pytest

import spmd
from spmd.runtime.allocator import keep_freed_memory
from spmd.runtime.current_runtime import get_runtime

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux") or not hasattr(resource, "RUSAGE_THREAD"),
                                reason="glibc's mallopt and per-thread fault counts are Linux's")


def _faults():
    return resource.getrusage(resource.RUSAGE_THREAD).ru_minflt


def test_a_call_on_a_numpy_argument_maps_no_new_pages_once_warm():
    """Placing an 8 MiB numpy argument on four devices makes four 2 MiB shards each call,
    freed when the call ends: with malloc's own thresholds the calling thread faulted on
    about half their pages every call (calibrate's `argument` then priced the faults,
    which another program of the same size never paid)."""
    get_runtime()                   # (the runtime's start sets malloc's thresholds)
    mesh = spmd.Mesh((4,), ("x",))
    row = mesh.sharding("x", None)
    x = np.ones((32, 1 << 15))
    f = spmd.jit(lambda x: x[0] + 1.0, in_shardings=row)
    for _ in range(5):
        f(x)
    before = _faults()
    for _ in range(10):
        f(x)
    pages = x.nbytes / 4096
    assert (_faults() - before) / 10 < pages / 20
    assert keep_freed_memory()      # (set already: a second call changes nothing)
