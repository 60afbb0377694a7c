"""Shared memory between the rank processes of one host, for the Ray communicator.

Each rank owns a `Slab`: anonymous shared-memory segments (Linux memfd) that it writes
the arrays it sends into, once however many peers of its host read them. A peer of
the same host reads them in place through `PeerMemory`, which maps the owner's segment
by opening /proc/<owner pid>/fd/<fd> (nothing is named in /dev/shm, so nothing is left
behind when a process dies: the memory goes with the last process that maps it).

    slab = Slab()
    region = slab.put(array, readers)     # copy in; -> (rid, fd, offset, dtype, shape)
    slab.release(rid)                     # one reader is done with it; freed after all readers
    peers = PeerMemory()
    view = peers.view(pid, fd, offset, dtype, shape)    # the owner's array, read-only

A rank may overwrite a region only after every reader released it: readers send a
release note (transports/ray/ray_communicator.py) once they have copied or reduced what they read.
Segments are reused once all their regions are free, so a steady program writes into
warm pages.

Collectives of 64 KB and more go the other way (transports/ray/ray_communicator.py): each rank takes a
buffer (its result, or the blocks it reduces) from `Buffers`, in shared memory, and its
peers write their parts straight into it through `PeerMemory.writable`, so each byte is
copied once, from the sender's array into the receiver's buffer. The ranks coordinate
that through their `Board`s, a few words of shared memory each, without messages:

    buffers = Buffers()
    out, where = buffers.empty(shape, dtype)      # where: (fd, serial, kept), named on the board
    board = Board()                               # this rank's; peers map board.fd writable
    dst = peers.writable(pid, fd, serial)         # a peer's uint8 view of a buffer or board

`probe()` / `reachable()` tell whether two processes share memory (same host, no wall
between their /proc), checked once when the links are set up.
"""
from __future__ import annotations

import itertools
import mmap
import os
import secrets
import threading
import weakref

import numpy as np

from ..buffer_pool import BufferPool

SEGMENT_BYTES = 32 << 20
ALIGN = 64


def supported() -> bool:
    return hasattr(os, "memfd_create") and os.path.isdir("/proc/self/fd")


class Segment:
    """nbytes of zeroed shared memory: a memfd (`fd`, which a peer maps through
    /proc/<pid>/fd) and this process's mapping of it (`bytes`, uint8)."""

    def __init__(self, nbytes):
        self.fd = os.memfd_create("spmd-slab", os.MFD_CLOEXEC)
        os.ftruncate(self.fd, nbytes)
        self.map = mmap.mmap(self.fd, nbytes)
        self.bytes = np.frombuffer(self.map, np.uint8)
        self.size, self.top, self.live = nbytes, 0, 0

    def close(self):
        self.bytes = None
        try:
            self.map.close()
        except BufferError:          # a caller still holds a view: the mapping goes with it
            pass
        os.close(self.fd)


class Slab:
    def __init__(self):
        self.segments = []
        self.regions = {}            # rid -> [segment, readers left, run it was put in]
        self.next_rid = 0
        self.run = 0
        self.lock = threading.Lock()

    def put(self, array, readers):
        """Copy array into a free region that `readers` peers will read; its description
        for them: (rid, fd, offset, dtype, shape)."""
        array = np.asarray(array)
        n = array.nbytes
        with self.lock:
            seg = self._room(n)
            off = seg.top
            seg.top = off + (n + ALIGN - 1) // ALIGN * ALIGN
            seg.live += 1
            rid = self.next_rid
            self.next_rid += 1
            self.regions[rid] = [seg, readers, self.run]
        dst = seg.bytes[off:off + n].view(array.dtype).reshape(array.shape)
        np.copyto(dst, array)
        return rid, seg.fd, off, array.dtype, array.shape

    def _room(self, n):
        for seg in self.segments:
            if seg.live == 0:
                seg.top = 0
            if seg.top + n <= seg.size:
                return seg
        seg = Segment(max(SEGMENT_BYTES, (n + ALIGN) // mmap.PAGESIZE * mmap.PAGESIZE + mmap.PAGESIZE))
        self.segments.append(seg)
        return seg

    def release(self, rid):
        with self.lock:
            r = self.regions.get(rid)
            if r is None:
                return
            r[1] -= 1
            if r[1] <= 0:
                del self.regions[rid]
                r[0].live -= 1

    def new_run(self, run_id):
        """Run run_id starts here: the regions put in runs before the last one are free
        (every rank ended those before the driver sent this one; the last run's may
        still be read by a rank that has not ended it: their readers release them)."""
        with self.lock:
            self.run = run_id
            for rid in [rid for rid, r in self.regions.items() if r[2] < run_id - 1]:
                self.regions.pop(rid)[0].live -= 1

    def close(self):
        with self.lock:
            for seg in self.segments:
                seg.close()
            self.segments, self.regions = [], {}


class Buffers:
    """Buffers that the peers of this host write into, each a segment of its own,
    recycled as pool.BufferPool recycles (handed out again once nobody refers to it).
    A buffer is named to peers by (fd, serial, kept): an fd number may be reused once
    its buffer is gone, a serial never is. Peers keep their mapping of a kept buffer
    (it comes back); one the pool does not keep is mapped for one call, and its fd is
    closed once the peers wrote into it (`written`), so held results do not hold fds."""

    def __init__(self, max_bytes=512 << 20, max_count=64):
        self.pool = BufferPool(max_bytes=max_bytes, alloc=self._segment, min_bytes=0, max_count=max_count)
        self.fds = {}                                # id(buffer) -> [fd or -1, serial], while it lives
        self.serials = itertools.count()

    def _segment(self, nbytes):
        seg = Segment(nbytes)
        b = seg.bytes                                # the mapping goes with its last view
        entry = self.fds[id(b)] = [seg.fd, next(self.serials)]
        weakref.finalize(b, self._gone, id(b), entry)
        return b

    def _gone(self, key, entry):
        self.fds.pop(key, None)
        _close(entry)

    def empty(self, shape, dtype):
        """(array, where): a new array (of at least one byte) in shared memory, and its
        name for the peers, (fd, serial, kept)."""
        out = self.pool.empty(shape, dtype)
        fd, serial = self.fds[id(out.base)]
        return out, (fd, serial, int(self.pool.kept(out.base)))

    def written(self, out):
        """The peers wrote into out (from `empty`): unless the pool keeps it, nobody
        opens its fd again."""
        if not self.pool.kept(out.base):
            _close(self.fds[id(out.base)])

    def close(self):
        self.pool.clear()


def _close(entry):
    if entry[0] >= 0:
        os.close(entry[0])
        entry[0] = -1


class Board:
    """A rank's notice board, in shared memory its peers of the host write into: `words`,
    int64: [0] the stamp of the call whose buffer [1] fd, [2] serial and [3] kept name
    (Buffers), [4] the call's signature; [5 + j] the stamp of the last call whose part
    group member j has written into this rank's buffer. A stamp names one collective
    call of one run (never reused), so a word left from an earlier call never reads as
    the current one.
    One 8-byte aligned word is written at once, and x86's stores are seen by other cores
    in the order they were made, so a peer that sees a stamp sees what was written
    before it (transports/ray/ray_communicator.py uses boards on x86 only)."""

    SLOTS = 256                      # group members that can say they are done

    def __init__(self):
        self._segment = Segment((5 + self.SLOTS) * 8)
        self.fd = self._segment.fd
        self.words = self._segment.bytes.view(np.int64)

    def close(self):
        self.words = None
        self._segment.close()


class PeerMemory:
    """The segments of the peers of this host, mapped once each (read-only), and their
    result buffers (writable)."""

    def __init__(self):
        self.maps = {}               # (pid, fd) -> uint8 array over the mapping
        self.writables = {}          # (pid, fd) -> (serial, uint8 array over the mapping)
        self.lock = threading.Lock()

    def view(self, pid, fd, offset, dtype, shape):
        with self.lock:
            b = self.maps.get((pid, fd))
            if b is None:
                b = self.maps[(pid, fd)] = map_peer(pid, fd)
        n = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        return b[offset:offset + n].view(dtype).reshape(shape)

    def writable(self, pid, fd, serial=-1, keep=True):
        """The peer pid's buffer (fd, serial) of Buffers, or its Board (fd), to write
        into; mapped once while it is kept, else for this caller only."""
        if not keep:
            return map_peer(pid, fd, write=True)
        with self.lock:
            hit = self.writables.get((pid, fd))
            if hit is None or hit[0] != serial:       # new, or fd reused by a newer buffer
                hit = self.writables[(pid, fd)] = (serial, map_peer(pid, fd, write=True))
            return hit[1]

    def forget(self):
        with self.lock:
            self.maps.clear()
            self.writables.clear()


def map_peer(pid, fd, write=False):
    """The memfd `fd` of process pid, mapped here: a uint8 array that keeps the mapping."""
    with open(f"/proc/{pid}/fd/{fd}", "r+b" if write else "rb") as f:
        m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ | (mmap.PROT_WRITE if write else 0))
    return np.frombuffer(m, np.uint8)


def probe():
    """A small segment holding a random token, for peers to check they can map this
    process's memory: (pid, fd, token), and the segment (keep it while peers probe)."""
    seg = Segment(mmap.PAGESIZE)
    token = secrets.token_bytes(16)
    seg.bytes[:16] = np.frombuffer(token, np.uint8)
    return (os.getpid(), seg.fd, token), seg


def reachable(pid, fd, token) -> bool:
    """Whether this process maps the memory of the probe (pid, fd, token)."""
    try:
        return map_peer(pid, fd)[:16].tobytes() == token
    except (OSError, ValueError):
        return False
