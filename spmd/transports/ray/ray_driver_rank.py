"""Rank 0 in the driver's own process, as MPI's rank 0 is the launching process.

Why: on one host, a step with rank 0 in an actor cost the driver a message to each
rank and a reply from each, and the actor woken by the first message took the
driver's core before the driver sent the next one, so the ranks ran one after the
other (a 2-rank MLP step ~1.2 ms against MPI's ~0.45 ms). Here rank 0's shards live in
the driver and its program runs on the driver's thread, after the messages to the other
ranks are sent, with a Transport like every actor's (Unix sockets and shared memory to
the actors of this host, TCP to the others).

    DriverRank(0)            ray_rank.Rank living here: no control line; its tracing is
                             the driver's own
    LocalChannel(rank)       what the runtime uses in place of a Channel to it: send()
                             answers the message at once, on the caller's thread, and
                             queues the reply; receive() takes it. fileno() is a pipe
                             written once per reply, so the runtime waits for it with
                             the actors' lines (poll). run() answers a run and returns
                             its reply: its small results are there when rank 0's part
                             ends, before the actors' replies

A message other than `run` (a put, a read, call_on) and its reply are copied through
pickle, as on an actor's line: a shard never shares memory with an array the caller
still holds (the caller may write it), nor hands the caller the rank's own read-only
array. A run's arguments are numbers, and its small results are read-only anyway.
"""
from __future__ import annotations

import collections
import os
import pickle
import threading

import numpy as np
from ray import cloudpickle

from .ray_rank import Rank


def wanted(owns_ray) -> bool:
    """Whether rank 0 runs in the driver: SPMD_RAY_DRIVER_RANK=1 always, =0 never; by
    default when this process started its own private Ray (one host, the driver's).
    On a cluster it joined, rank 0 stays an actor, placed as the others are (the
    driver's host may have no rank there)."""
    v = os.environ.get("SPMD_RAY_DRIVER_RANK", "")
    if v in ("0", "1"):
        return v == "1"
    return bool(owns_ray) and not os.environ.get("RAY_ADDRESS")


class DriverRank(Rank):
    in_driver = True

    def open_links(self, control=False):
        return super().open_links(control=False)

    def set_tracing(self, on):
        pass                  # the driver records its own spans, rank 0's among them

    def where(self):
        import ray
        return {"rank": self.rank, "node": ray.get_runtime_context().get_node_id(), "pid": os.getpid()}


def _copied(obj):
    """obj as the other end of a line would get it: its arrays copied once (out of band,
    into fresh aligned buffers, as ray_control.Inbox makes them)."""
    bufs = []
    data = cloudpickle.dumps(obj, protocol=5, buffer_callback=bufs.append)
    copies = []
    for b in bufs:
        raw = b.raw()
        c = np.empty(raw.nbytes, np.uint8)
        c[:] = np.frombuffer(raw, np.uint8)
        copies.append(c)
    return pickle.loads(data, buffers=copies)


class LocalChannel:
    def __init__(self, rank):
        self.rank = rank
        self.lock = threading.Lock()
        self.replies = collections.deque()
        self._read, self._write = os.pipe()
        self.stale = 0
        self.closed = False
        self.failed = False          # the last message's reply is an error

    def fileno(self):
        return self._read

    def send(self, message, by_value=False):
        op = message[0]
        if op != "run":
            message = _copied(message)
        reply = self.rank.answer(message)
        if reply is None:
            return
        self.failed = reply[0] == "err"
        if op != "run" and not self.failed:
            reply = _copied(reply)
        self.replies.append(reply)
        os.write(self._write, b"r")

    def run(self, message):
        """A `run` message answered at once, its reply returned (not queued: the runtime
        reads it when rank 0's part ends, without a wait)."""
        return self.rank.answer(message)

    def receive(self):
        while self.stale:
            self._take()
            self.stale -= 1
        return self._take()

    def pull(self):
        return len(self.replies) > self.stale

    def _take(self):
        if not self.replies:          # (a reply is queued before send returns: never waits)
            raise EOFError("rank 0 in the driver owes no reply")
        os.read(self._read, 1)
        return self.replies.popleft()

    def close(self):
        if not self.closed:
            self.closed = True
            os.close(self._read)
            os.close(self._write)
