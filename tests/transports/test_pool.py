"""transports/buffer_pool.py: recycled result buffers."""
import numpy as np

from spmd.transports.buffer_pool import BufferPool

MB = 1 << 20


def test_a_buffer_comes_back_only_once_nobody_holds_it():
    pool = BufferPool(min_bytes=0)
    a = pool.empty((MB // 8,), np.float64)
    b = pool.empty((MB // 4,), np.float32)
    assert not np.shares_memory(a, b)              # a is held: b is another buffer
    view = a[10:]
    del a, b
    c = pool.empty((MB,), np.uint8)                # b's buffer: a view holds a's
    assert not np.shares_memory(c, view) and pool.count == 2
    del view
    d = pool.empty((MB // 2,), np.uint16)
    assert not np.shares_memory(c, d) and pool.count == 2


def test_past_its_limits_the_pool_drops_the_least_recently_used_free_buffers():
    pool = BufferPool(max_bytes=4 * MB, min_bytes=0)
    held = pool.empty((MB,), np.uint8)
    old = pool.empty((MB,), np.uint8)
    newer = pool.empty((2 * MB,), np.uint8)
    del old, newer                                 # both free; the 1 MB one used longer ago
    big = pool.empty((2 * MB,), np.uint8)          # the free 2 MB buffer comes back
    assert pool.kept(big.base) and pool.total == 4 * MB
    del big
    bigger = pool.empty((3 * MB,), np.uint8)       # room: drops the old 1 MB, then the 2 MB one
    assert pool.kept(bigger.base) and pool.kept(held.base)
    assert pool.total == 4 * MB and sorted(pool.bufs) == [MB, 3 * MB] and len(pool.bufs[MB]) == 1
    huge = pool.empty((8 * MB,), np.uint8)         # past the limit whatever is dropped: not kept
    assert not pool.kept(huge.base) and pool.kept(held.base) and pool.kept(bigger.base)
