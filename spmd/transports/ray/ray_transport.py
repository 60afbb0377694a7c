"""One Ray rank actor's way to its peers: TCP links to every rank (ray_links.py) and,
with the peers of its host, shared memory (ray_shm.py); ray_communicator.py's docstring
tells how the collectives use them."""
from __future__ import annotations

import socket

import numpy as np

from ...errors import CollectiveError
from ..buffer_pool import BufferPool
from . import ray_shm as shm
from .ray_links import Links

# a reader tells a sender which of its slab regions it has read with its next message to
# it (collectives exchange both ways, so that is usually the next collective's); a sender
# that hears nothing back (a broadcast's root) is told once this many wait
RELEASE_BATCH = 4

# results and received arrays come from recycled buffers: fresh pages cost a page fault
# each (transports/buffer_pool.py)
POOL = BufferPool()


def host_id():
    """This machine: its host name, and its boot (so two machines of one name differ)."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        boot = ""
    return socket.gethostname(), boot


class Transport:
    """One rank actor's links to the others and its shared memory; lives as long as the
    set of rank actors (transports/ray/ray_runtime.py makes a new one when an actor is replaced)."""

    def __init__(self, rank, host_ip, mailbox):
        self.rank, self.mailbox = rank, mailbox
        self.links = Links(rank, host_ip, alloc=POOL.empty)
        self.host = host_id()
        self.slab = shm.Slab() if shm.supported() else None
        self.buffers = shm.Buffers() if self.slab is not None else None
        self.board = shm.Board() if self.slab is not None else None
        self.boards = {}             # rank -> its board's fd (peers of this host)
        self._board_views = {}       # rank -> int64 view of its board
        self.peer_memory = shm.PeerMemory()
        self.probe, self._probe_segment = shm.probe() if self.slab is not None else (None, None)
        self.pids = {}
        self.hosts = {}              # rank -> host id
        self.shm_peers = set()       # ranks whose slabs this one maps
        self.unreleased = {}         # rank -> ids of its regions this rank has read
        self.closed = False

    def info(self):
        """What the peers need to reach this rank (exchanged through Ray)."""
        return {"address": self.links.address, "host": self.host, "probe": self.probe,
                "board": None if self.board is None else self.board.fd}

    def connect(self, infos):
        """infos: {rank: info()} of every rank. Returns when every link is up."""
        self.hosts = {r: tuple(i["host"]) for r, i in infos.items()}
        self.pids = {r: i["probe"][0] for r, i in infos.items() if i["probe"]}
        self.shm_peers = {r for r, i in infos.items()
                          if r != self.rank and self.slab is not None and i["probe"]
                          and self.hosts[r] == self.host and shm.reachable(*i["probe"])}
        self.boards = {r: infos[r].get("board") for r in self.shm_peers}
        self._board_views = {}
        self.mailbox.revive()
        near = {r for r in infos if r != self.rank and self.hosts[r] == self.host}
        self.links.connect({r: i["address"] for r, i in infos.items()}, self._deliver, self._lost, near)

    def board_of(self, rank):
        """The int64 words of a peer's Board (shm.Board), to read and write."""
        b = self._board_views.get(rank)
        if b is None:
            b = self._board_views[rank] = self.peer_memory.writable(self.pids[rank], self.boards[rank]).view(np.int64)
        return b

    def abort_peers(self, run_id, reason, ranks):
        """Wake the peers waiting in this run at once (the driver tells them too, later)."""
        for d in ranks:
            if d != self.rank:
                try:
                    self.links.send(d, {"kind": "abort", "run": run_id, "reason": reason})
                except CollectiveError:
                    pass             # that one is gone already

    def read(self, src, rid):
        """This rank is done with src's region rid: src hears it with the next message this
        rank sends it, or at once when RELEASE_BATCH regions of src wait for that."""
        rids = self.unreleased.setdefault(src, [])
        rids.append(rid)
        if len(rids) >= RELEASE_BATCH:
            self.send(src, {"kind": "release"})

    def send(self, dst, header, array=None, later=False, failed=None):
        """Links.send (or send_later), carrying the regions of dst this rank is done with."""
        rids = self.unreleased.pop(dst, None)
        if rids:
            header = dict(header, rids=rids)
        if later:
            self.links.send_later(dst, header, array, failed=failed)
        else:
            self.links.send(dst, header, array)

    def _deliver(self, src, header, array):
        for rid in header.get("rids", ()):
            self.slab.release(rid)
        kind = header["kind"]
        if kind == "abort":
            self.mailbox.abort(header["run"], header["reason"])
            return
        if kind == "release":
            return
        if kind == "shm":
            rid, fd, off, dtype, shape = header["region"]
            array = self.peer_memory.view(self.pids[src], fd, off, dtype, shape)
        self.mailbox.deposit(header["run"], header["key"], src, header["tag"], array, header)

    def _lost(self, src, reason):
        if not self.closed:
            self.mailbox.lost(src, f"{reason} (rank {src} runs on host {self.hosts.get(src, ('?',))[0]})")

    def new_run(self, run_id):
        """Run run_id starts on this rank. The driver sends it before it has read the
        replies to the run before, but after every rank ended the one before that: the
        ranks are at most one run apart, so this rank's slab regions of older runs are
        free (ray_shm.Slab.new_run)."""
        self.unreleased = {}
        if self.slab is not None:
            self.slab.new_run(run_id)

    def close(self):
        self.closed = True
        self.links.close()
        self.peer_memory.forget()
        if self.slab is not None:
            self.slab.close()
            self.buffers.close()
            self._board_views = {}
            self.board.close()
        if self._probe_segment is not None:
            self._probe_segment.close()
