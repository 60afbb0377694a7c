"""The messages that arrived at one Ray rank, keyed by (run id, call key, sender), and
why the current run cannot complete (aborted, a peer lost, the stopwatch)."""
from __future__ import annotations

import threading
import time

import numpy as np

from ...errors import CollectiveError


class Mailbox:
    """The messages that arrived at one rank, and the abort flag of the current run.
    Filled by the link threads and `abort` (a Ray call); `take` runs on the run thread."""

    def __init__(self):
        self.cond = threading.Condition()
        self.run_id = -1
        self.box = {}            # (run_id, key, src) -> (tag, payload, header)
        self.failed = {}         # run_id -> reason (str)
        self.dead = {}           # rank -> why its link is down (for the current transport)
        self.awaited = set()     # the keys `take` still waits for: it is woken when the last one comes
        # nonzero while the current run cannot complete: the native collectives' "failed"
        # cell (ray_native_exchange.py), which they read without taking the lock
        self.cell = np.zeros(1, np.int64)

    def start(self, run_id):
        """A new run: forget what is left of older ones (an aborted run's messages)."""
        with self.cond:
            self.run_id = run_id
            self.box = {k: v for k, v in self.box.items() if k[0] >= run_id}
            self.failed = {r: v for r, v in self.failed.items() if r >= run_id}
            self.cell[0] = int(run_id in self.failed or bool(self.dead))

    def deposit(self, run_id, key, src, tag, payload, header=None):
        with self.cond:
            if run_id < self.run_id:
                return           # from a run that has ended (aborted): nobody waits for it
            self.box[(run_id, key, src)] = (tag, payload, header)
            if (run_id, key, src) in self.awaited:
                self.awaited.discard((run_id, key, src))
                if not self.awaited:     # one wake-up per take, not one per message
                    self.cond.notify_all()

    def abort(self, run_id, reason):
        with self.cond:
            if run_id >= self.run_id:
                self.failed.setdefault(run_id, reason)
                if run_id == self.run_id:
                    self.cell[0] = 1
                self.cond.notify_all()

    def lost(self, src, reason):
        """The link to rank src is down: its process died or its host is unreachable."""
        with self.cond:
            self.dead.setdefault(src, reason)
            self.failed.setdefault(self.run_id, f"rank {src} is lost: {reason}")
            self.cell[0] = 1
            self.cond.notify_all()

    def revive(self):
        with self.cond:
            self.dead = {}

    def take(self, run_id, key, srcs, timeout, what, group):
        """{src: (tag, payload, header)} for every src in srcs, or CollectiveError when the
        run is aborted, a src is lost, or the deadline passes first."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                missing = [s for s in srcs if (run_id, key, s) not in self.box]
                self.awaited = {(run_id, key, s) for s in missing}
                if not missing:
                    return {s: self.box.pop((run_id, key, s)) for s in srcs}
                left = self.check(run_id, missing, deadline, timeout, what, group)
                self.cond.wait(min(left, 1.0))   # left may be infinite (no stopwatch)

    def check(self, run_id, missing, deadline, timeout, what, group):
        """CollectiveError if one of the ranks `missing` is lost, the run is aborted, or
        the deadline passed (the wait started `timeout` seconds before it); else the
        seconds left. For `take`, and for a rank waiting on its peers' boards."""
        lost = [s for s in missing if s in self.dead]
        if lost:
            raise CollectiveError(f"{what}: rank {lost[0]} is lost: {self.dead[lost[0]]}")
        reason = self.failed.get(run_id)
        if reason is not None:
            raise CollectiveError(f"{what}: aborted because {reason}")
        left = deadline - time.monotonic()
        if left <= 0:
            raise CollectiveError(
                f"{what}: timed out after {timeout:g} s waiting for rank(s) {list(missing)} of group "
                f"{list(group)} (SPMD_COLLECTIVE_TIMEOUT): they died or stopped calling collectives")
        return left
