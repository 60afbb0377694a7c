"""The C allocator's settings for the buffers runs make and free.

A call makes new buffers (an argument's shards and the devices' private copies of them,
its results) and frees those of the call before. glibc's malloc serves a large request
from memory mapped for it, and raises that size limit to the largest block freed so far,
returning freed memory at the top of its heaps to the system: whether a call's megabytes
are pages the process still holds or fresh pages the system maps and clears as they are
first written (a fault every 4 KiB: several times the cost of copying the bytes) then
depends on the order of the process's earlier allocations. One stencil program on numpy
arguments faulted on every call, another of the same size never; a calibration measured
one or the other from run to run. `keep_freed_memory` fixes both settings at the start of
a runtime: blocks below MMAP_THRESHOLD come from the heaps and what is freed there stays
the process's, so a step's buffers reuse the pages of the step before and a call costs
the same each time. The process holds, after a step, the most the step held at once.
"""
from __future__ import annotations

import ctypes
import sys

# glibc's mallopt parameters (malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
# glibc's largest mmap threshold on a 64-bit system (HEAP_MAX_SIZE / 2): larger blocks are
# mapped apart, as before
MMAP_THRESHOLD = 32 << 20
# free memory at the top of a heap beyond this goes back to the system
TRIM_THRESHOLD = 1 << 30

_set = []


def keep_freed_memory() -> bool:
    """Fix malloc's thresholds (the module's docstring), once a process; False where the C
    library has no mallopt (not glibc) and nothing changed."""
    if not _set:
        _set.append(_mallopt())
    return _set[0]


def _mallopt() -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
