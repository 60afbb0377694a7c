"""The Ray transport's side of the native exchange (backends/native_exchange.py), for
ranks that are processes of one host: the memory their native all-reduces, all-gathers,
reduce-scatters and all-to-alls share.

Why: a training step's all-reduce from Python stops the native segment, and the stop
(the executable's step, the communicator's checks, the boards' hand-shake, numpy's
reduction) costs each rank more than the reduction of a small step's gradients itself.
As native instructions (backends/llvm/exchange_reduce.py) the all-reduce joins the
segments around it, as on the local transport.

What crosses processes is only what `shared` gives: a region of the group's members'
slots (counts and mailboxes) in one memfd segment (ray_shm.py) that the group's first
member makes and the others map through /proc. Its place in each process differs, so
the native code finds everything through the region (scope "host": no native
collective that reads a peer's private memory by its address, as a permute does).
The members agree on each region in a small all-gather (pid, fd, bytes) from Python
when a schedule first runs with this communicator: every member resolves the same
schedule's entries in the same order at the start of the same run. A region lives as
long as this communicator and the schedule (its owner); after a run that failed, the
driver has every rank start over with new communicators (ray_rank.Rank.run's
`generation`), so a count left behind by an aborted all-reduce is never read again.

The other cells are each rank's own: `failed` is set by the Mailbox when the current
run is aborted or a peer is lost (a native wait then stops, and `failure` raises the
mailbox's CollectiveError); a peer's `finished` cell is never set (a peer that ends
its program without joining is waited for as from Python; the driver's timeout
applies)."""
from __future__ import annotations

import os
import weakref

import numpy as np

from ...backends.native_exchange import NativeExchange, timed_out, timeout_ns
from ...errors import CollectiveError
from . import ray_shm as shm


class RayNativeExchange(NativeExchange):
    scope = "host"

    def __init__(self, comm):
        self.comm = comm
        self.status = np.zeros(3, np.int64)      # why this rank's native code stopped
        self.boards = {}                         # axes -> board(axes)
        self.regions = weakref.WeakKeyDictionary()   # owner -> {key: (address, what keeps it mapped)}
        self._zero = np.zeros(1, np.int64)       # every peer's "finished" cell

    @classmethod
    def of(cls, comm, transport):
        """The exchange of a communicator whose mesh's ranks all map each other's memory
        (processes of this host), else None: then every collective runs from Python."""
        if transport.slab is None:
            return None
        ranks = comm.mesh.devices.reshape(-1).tolist()
        if not all(r == comm.rank or r in transport.shm_peers for r in ranks):
            return None
        return cls(comm)

    def board(self, axes) -> dict:
        hit = self.boards.get(axes)
        if hit is not None:
            return hit
        devices = self.comm.group(axes)
        zero = self._zero.ctypes.data
        fins = np.full(len(devices), zero, np.int64)
        t = self.comm.timeout
        hit = self.boards[axes] = {
            "board": 0, "index": devices.index(self.comm.rank), "failed": self.comm.mailbox.cell.ctypes.data,
            "finished": lambda j: zero, "fins": fins.ctypes.data,
            "timeout_ns": timeout_ns(t), "status": self.status.ctypes.data,
            "keep": (fins,)}
        return hit

    def shared(self, axes, owner, key, nbytes) -> int:
        regions = self.regions.get(owner)
        if regions is None:
            regions = self.regions[owner] = {}
        hit = regions.get(key)
        if hit is None:
            hit = regions[key] = self._agree(axes, int(nbytes) + 64)
        return hit[0]

    def _agree(self, axes, nbytes):
        """(address, what keeps it mapped) of a new zeroed region of nbytes that every
        member of this rank's group over `axes` maps: made by the first member."""
        devices = self.comm.group(axes)
        view = None
        if devices[0] == self.comm.rank:
            seg = shm.Segment(nbytes)
            view = seg.bytes                     # (it keeps the mapping; the fd is closed with it)
            weakref.finalize(view, os.close, seg.fd)
            me = [os.getpid(), seg.fd, nbytes]
        else:
            me = [0, -1, nbytes]
        got = self.comm.all_gather(np.array(me, np.int64), axes).reshape(len(devices), 3)
        sizes = sorted(set(got[:, 2].tolist()))
        if len(sizes) != 1:
            raise CollectiveError(f"internal error: the native all-reduce of group {list(devices)} asked for "
                                  f"regions of {sizes} bytes on different ranks")
        if view is None:
            view = shm.map_peer(int(got[0, 0]), int(got[0, 1]), write=True)
        return view.ctypes.data, view

    def failure(self, what, axes):
        """Raise the CollectiveError for why this rank's native collective (`what`, over
        `axes`) stopped: the mailbox says why the run cannot complete."""
        comm = self.comm
        devices = comm.group(axes)
        why, rank = self.take_status(devices)
        where = f"{what} on rank {comm.rank}"
        if why == 3:
            raise timed_out(where, comm.timeout, rank, devices)
        others = [d for d in devices if d != comm.rank]
        comm.mailbox.check(comm.run_id, others, float("inf"), comm.timeout, where, devices)
        raise CollectiveError(f"{where}: stopped (a rank of the run failed)")
