"""The rendezvous of the local transport's ranks (threads of one process): a `Group` of
the devices of one mesh-axis group carries one value per rank (the collectives' deposits),
a `Host` runs several ranks' native segments on one thread, a `Flight` is one started
all_reduce. local_communicator.py's docstring tells the protocol."""
from __future__ import annotations

import threading
import time
import weakref

import numpy as np

from ...errors import CollectiveError

# an empty slot (a member that has not deposited yet)
EMPTY = object()


class Group:
    """A reusable rendezvous of the G devices of one group, carrying one value per rank."""

    def __init__(self, devices, world):
        self.devices = devices
        self.world = world
        self.cond = threading.Condition()
        self.gen = 0                   # completed rendezvous
        self.slots = [EMPTY] * len(devices)
        self.arrived = 0
        self.result = None             # the slots of the last completed rendezvous
        self.flights = {}              # k -> _Flight: the k-th all_reduce_start of the group
        self.board = np.zeros((len(devices), 8), np.int64)     # native collectives' (exchange.py)
        # owner -> {key: memory the members' native collectives share} (native_exchange.py)
        self.shared = weakref.WeakKeyDictionary()

    def wake(self):
        with self.cond:
            self.cond.notify_all()

    def exchange(self, i, value, what):
        """Deposit `value` as member i; return every member's value (group order) once all
        have deposited. The returned list stays valid: the next rendezvous cannot
        complete before this member deposits again."""
        G = len(self.devices)
        with self.cond:
            self.check_failed(i, what)
            gen = self.gen
            self.slots[i] = value
            self.arrived += 1
            if self.arrived == G:
                self.result, self.slots, self.arrived = self.slots, [EMPTY] * G, 0
                self.gen += 1
                self.cond.notify_all()
                return self.result
            self.wait_until(lambda: self.gen != gen, i, what,
                            lambda: [self.devices[j] for j in range(G) if self.slots[j] is EMPTY])
            return self.result

    def wait_until(self, ready, i, what, missing):
        """Wait (holding self.cond) until ready() is true, failing as exchange does;
        missing() -> the devices not there yet."""
        w = self.world
        deadline = time.monotonic() + w.timeout
        rank = self.devices[i]
        w.waits[rank] = (what, time.monotonic())     # (LocalWorld.deadlocked reads it)
        try:
            while not ready():
                self.check_failed(i, what)
                if w.solo:
                    # the ranks run one after another on one thread: the others cannot arrive
                    raise CollectiveError(f"{what} on rank {rank}: the ranks ran one after another "
                                          f"(the runtime judged the program to exchange nothing), but it waited "
                                          f"for rank(s) {missing()}")
                gone = sorted(set(missing()) & w.finished)
                if gone:
                    raise CollectiveError(f"{what} on rank {rank}: rank(s) {gone} finished the "
                                          f"program without joining it (the ranks ran different programs)")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise CollectiveError(f"{what} on rank {rank}: timed out after {w.timeout:g} s "
                                          f"waiting for rank(s) {missing()} of group {list(self.devices)} "
                                          f"(SPMD_COLLECTIVE_TIMEOUT)")
                self.cond.wait(min(left, 1.0))
        finally:
            w.waits.pop(rank, None)

    def check_failed(self, i, what):
        f = self.world.failed
        if f is not None:
            rank, exc = f
            raise CollectiveError(f"{what} on rank {self.devices[i]}: aborted because rank {rank} failed: "
                                  f"{type(exc).__name__}: {exc}")


class Host(Group):
    """Ranks whose native segments run on one thread, in lockstep (the module's docstring)."""

    def __init__(self, ranks, world):
        super().__init__(ranks, world)
        self.pending = {}              # member index -> (segment key, program address, instructions)
        self.alone = np.zeros(1, np.int64)     # one rank's program address, in a solo run
        self.alone_at = self.alone.ctypes.data

    def run(self, i, key, prog, n, run_multi):
        """Member i's segment `key` (program at address `prog`, n instructions): returns once
        it ran, on this thread (the last member to arrive) or another."""
        what = "a native segment"
        if self.world.solo:
            # the ranks run one after another: each runs its own segment alone (a program
            # that exchanges nothing; a native wait in it stops at once, the failed cell set)
            self.check_failed(i, what)
            self.alone[0] = prog
            run_multi(self.alone_at, 1, n)
            return
        with self.cond:
            self.check_failed(i, what)
            gen = self.gen
            self.pending[i] = (key, prog, n)
            if len(self.pending) < len(self.devices):
                self.wait_until(lambda: self.gen != gen, i, what,
                                lambda: [self.devices[j] for j in range(len(self.devices)) if j not in self.pending])
                if self.result is not None:
                    raise CollectiveError(self.result)
                return
            batch, self.pending = self.pending, {}
        keys = {k for k, _, _ in batch.values()}
        error = None
        if len(keys) != 1:
            error = (f"ranks {list(self.devices)} hosted on one thread reached different native segments "
                     f"(the ranks ran different programs)")
        else:
            progs = np.array([batch[j][1] for j in range(len(self.devices))], np.int64)
            run_multi(progs.ctypes.data, len(progs), n)
        with self.cond:
            self.result = error
            self.gen += 1
            self.cond.notify_all()
        if error is not None:
            raise CollectiveError(error)


class Flight:
    """One started all_reduce of a group: what each member deposited, and how many have
    finished reading the deposits."""

    def __init__(self, G):
        self.slots = [EMPTY] * G
        self.arrived = 0
        self.read = 0
