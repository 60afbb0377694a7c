"""Result buffers, recycled: a small pool that hands a buffer out again once nobody
refers to it any more. Used by the MPI and Ray communicators for their results."""
from __future__ import annotations

import itertools
import math
import sys
import threading

import numpy as np


class BufferPool:
    """Fresh memory for results, recycled. A new large array costs a page fault per 4 KiB
    page the first time it is written (on this kind of VM, more than the collective
    itself: 0.8 ms of a 1 MB all_reduce's 1.1 ms), while raw mpi4py code reuses its
    buffers. Results must still be new arrays to their callers. So results come from
    here: a buffer is handed out again once nobody holds it or any view of it any more,
    which its reference count shows (every numpy view keeps a reference to the buffer
    that owns the memory). Small arrays use malloc. When a new buffer would pass the
    pool's limits, the free buffers handed out least recently make room for it (a program
    that moves from large collectives to smaller ones keeps warm buffers for the new)."""

    MIN_BYTES = 1 << 16

    def __init__(self, max_bytes=1 << 30, per_size=4, alloc=None, min_bytes=MIN_BYTES, max_count=None):
        """alloc(nbytes) -> a new uint8 buffer that numpy views refer to (np.empty's by
        default); arrays under min_bytes are not pooled (np.empty). At most max_bytes,
        per_size buffers of a size and max_count buffers in all are kept."""
        self.bufs = {}                   # nbytes -> [uint8 buffers of that size]
        self.max_bytes, self.per_size, self.total = max_bytes, per_size, 0
        self.max_count, self.count = max_count, 0
        self.alloc = alloc or (lambda n: np.empty(n, np.uint8))
        self.min_bytes = min_bytes
        self.last_use = {}               # id(buffer) -> when it was last handed out
        self.ticks = itertools.count()
        self._lock = threading.Lock()

    def empty(self, shape, dtype):
        dtype = np.dtype(dtype)
        nbytes = math.prod(shape) * dtype.itemsize
        if nbytes < self.min_bytes:
            return np.empty(shape, dtype)
        with self._lock:
            bucket = self.bufs.setdefault(nbytes, [])
            for b in bucket:
                if sys.getrefcount(b) == 3:  # the bucket, `b` and getrefcount's argument: free
                    self.last_use[id(b)] = next(self.ticks)
                    return b.view(dtype).reshape(shape)
            b = self.alloc(nbytes)
            if len(bucket) < self.per_size and self._room(nbytes):
                bucket.append(b)
                self.total += nbytes
                self.count += 1
                self.last_use[id(b)] = next(self.ticks)
            return b.view(dtype).reshape(shape)

    def _room(self, nbytes):
        """Whether nbytes more fit, after dropping free buffers (least recently used first)
        if they must."""
        def fits():
            return self.total + nbytes <= self.max_bytes and (self.max_count is None or self.count < self.max_count)
        if fits():
            return True
        free = []
        for size, bucket in self.bufs.items():
            for b in bucket:
                if sys.getrefcount(b) == 3:  # as in empty(): nobody else holds it
                    free.append((self.last_use[id(b)], size, b))
        free.sort(key=lambda t: t[0])
        for _, size, b in free:
            self.bufs[size] = [c for c in self.bufs[size] if c is not b]
            if not self.bufs[size]:
                del self.bufs[size]
            del self.last_use[id(b)]
            self.total -= size
            self.count -= 1
            if fits():
                return True
        return False

    def kept(self, buf):
        """Whether buf (an array's .base) is one of the pool's, handed out again later."""
        with self._lock:
            return any(b is buf for b in self.bufs.get(buf.nbytes, ()))

    def clear(self):
        """Keep none of the buffers (those in use stay their holders')."""
        with self._lock:
            self.bufs, self.total, self.count, self.last_use = {}, 0, 0, {}
