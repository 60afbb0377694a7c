"""The local transport's side of the native exchange (backends/native_exchange.py): the
memory its ranks' native collectives share (a group's board, the world's failed and
finished cells, a rank's status cells), the host that runs several ranks' segments in
lockstep, and the CollectiveError a stopped native collective raises."""
from __future__ import annotations

import weakref

import numpy as np

from ...backends.native_exchange import NativeExchange, timed_out, timeout_ns
from ...errors import CollectiveError


class LocalNativeExchange(NativeExchange):
    def __init__(self, comm):
        self.comm = comm
        self.status = np.zeros(3, np.int64)      # why this rank's native code stopped
        self.boards = {}                         # axes -> board(axes)
        self.own = weakref.WeakKeyDictionary()   # owner -> {key: shared(...)} of a group of this rank alone

    @property
    def host(self):
        """run(key, program address, instructions, run_multi, small) for this rank's
        native segments when hosts run them (local_communicator.py's docstring), else None; a small
        program's (`small`) run on the host of every rank."""
        host = self.comm.world.host_of.get(self.comm.rank)
        if host is None:
            return None
        every = self.comm.world.host_all
        i, j = host.devices.index(self.comm.rank), every.devices.index(self.comm.rank)

        def run(key, prog, n, run_multi, small):
            if small:
                return every.run(j, key, prog, n, run_multi)
            return host.run(i, key, prog, n, run_multi)
        return run

    def board(self, axes) -> dict:
        """Addresses the native collectives of this rank's group over `axes` use: the
        group's board, this rank's index in it, the world's failed cell, the finished cell
        of a group member (index -> address; a zero cell for None), the timeout in ns and
        this rank's status cells."""
        hit = self.boards.get(axes)
        if hit is not None:
            return hit
        _, devices, i, grp = self.comm.group_of(axes)
        cells = self.comm.world.cells
        base = cells.ctypes.data
        board = grp.board if grp is not None else np.zeros((1, 8), np.int64)
        zero = np.zeros(1, np.int64)
        fins = np.array([base + 8 * (1 + d) for d in devices], np.int64)
        t = self.comm.world.timeout
        hit = self.boards[axes] = {
            "board": board.ctypes.data, "index": i, "failed": base,
            "finished": lambda j: zero.ctypes.data if j is None else base + 8 * (1 + devices[j]),
            "fins": fins.ctypes.data,
            "timeout_ns": timeout_ns(t), "status": self.status.ctypes.data,
            "keep": (board, zero, fins)}
        return hit

    def shared(self, axes, owner, key, nbytes) -> int:
        _, devices, i, grp = self.comm.group_of(axes)
        owners = grp.shared if grp is not None else self.own
        with self.comm.world.lock:
            regions = owners.get(owner)
            if regions is None:
                regions = owners[owner] = {}
            x = regions.get(key)
            if x is None:
                # (on a cache line of its own: the members' counts sit 64 bytes apart)
                x = regions[key] = np.zeros(max(int(nbytes), 8) + 64, np.uint8)
            elif x.nbytes < nbytes + 64:
                raise CollectiveError(f"internal error: shared memory {key} of group {list(devices)} asked for "
                                      f"{nbytes} bytes, made with {x.nbytes - 64}")
        return -(-x.ctypes.data // 64) * 64

    def failure(self, what, axes):
        """Raise the CollectiveError for why this rank's native collective (`what`, over
        `axes`) stopped."""
        _, devices, i, grp = self.comm.group_of(axes)
        why, rank = self.take_status(devices)
        if why == 1 and self.comm.world.solo:
            raise CollectiveError(f"{what} on rank {self.comm.rank}: the ranks ran one after another (the runtime "
                                  f"judged the program to exchange nothing), but it waited for rank [{rank}]")
        if why == 1 and self.comm.world.failed is not None:
            grp.check_failed(i, what)
        if why == 2:
            raise CollectiveError(f"{what} on rank {self.comm.rank}: rank(s) [{rank}] finished the program "
                                  f"without joining it (the ranks ran different programs)")
        if why == 3:
            raise timed_out(f"{what} on rank {self.comm.rank}", self.comm.world.timeout, rank, devices)
        raise CollectiveError(f"{what} on rank {self.comm.rank}: stopped (a rank of the run failed)")
