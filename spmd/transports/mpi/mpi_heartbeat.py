"""Liveness over MPI: every rank tells every peer, several times a second, whether it is
busy, waiting in a collective (which, where) or gone; the watchdog (mpi_watchdog.py)
judges peers by what it hears."""
from __future__ import annotations

import json
import socket
import threading
import time

from ..communicator import heartbeat_timeout
from .mpi_peers import PEERS

# thread id -> the MPI call it is blocked in, (deadline, what, group, rank, timeout, loc,
# start): the watchdog (mpi_watchdog.py) keeps it, the heartbeats tell the peers of it
BLOCKED = {}


def at(loc):
    return f" at {loc}" if loc else ""


def period_of(timeout) -> float:
    """Seconds between a rank's heartbeats: a quarter of the timeout, at most 1 s."""
    return max(0.05, min(1.0, timeout / 4))


class Heartbeat:
    """Liveness, not a stopwatch. Every process sends a small UDP datagram to every peer
    each period (SPMD_HEARTBEAT_TIMEOUT / 4, at most 1 s) from a daemon thread, saying
    what it is doing: busy (computing, not in a collective), waiting in a collective
    (which, at which user line) or exited. A rank that is alive but busy — rank 0
    evaluating for minutes — keeps sending, so nobody waiting for it gives up; a rank
    whose heartbeats stop for SPMD_HEARTBEAT_TIMEOUT seconds is taken for dead. Peers
    never heard from (a firewall between hosts) are judged only by the other signs
    (process table, mpiexec's notice)."""

    def __init__(self):
        self.sock = None
        self.addrs = {}             # rank -> (ip, port)
        self.heard = {}             # rank -> (monotonic time, state, what, loc, group)
        self.exited_at = {}         # rank -> monotonic time its "exit" arrived
        self.rank = None
        self.exiting = False
        self._thread = None

    def open(self):
        """Bind the socket; returns this process's address for its peers."""
        if self.sock is None:
            self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            self.sock.bind(("0.0.0.0", 0))
            self.sock.setblocking(False)
        try:
            ip = socket.gethostbyname(socket.gethostname())
        except OSError:
            ip = "127.0.0.1"
        return ip, self.sock.getsockname()[1]

    def start(self, rank, addrs):
        host = socket.gethostname()
        self.rank = rank
        self.addrs = {r: (("127.0.0.1" if PEERS.get(r, ("",))[0] == host else a[0]), a[1])
                      for r, a in addrs.items() if r != rank and a is not None}
        import atexit
        atexit.register(self.exit)
        self._thread = threading.Thread(target=self._run, name="spmd-mpi-heartbeat", daemon=True)
        self._thread.start()

    def exit(self):
        """This process is leaving (atexit): tell the peers at once."""
        self.exiting = True
        self._send()

    def _state(self):
        if self.exiting:
            return ["exit", None, None, None]
        for call in list(BLOCKED.values()):
            return ["wait", call[1], call[5], list(call[2])]
        return ["busy", None, None, None]

    def _send(self):
        if self.sock is None:
            return
        msg = json.dumps([self.rank] + self._state()).encode()
        for a in self.addrs.values():
            try:
                self.sock.sendto(msg, a)
            except OSError:
                pass

    def _run(self):
        import select
        period = period_of(heartbeat_timeout())
        next_send = 0.0
        while True:
            now = time.monotonic()
            if now >= next_send:
                self._send()
                next_send = now + period
            try:
                ready, _, _ = select.select([self.sock], [], [], max(0.0, next_send - time.monotonic()))
            except (OSError, ValueError):
                return
            if ready:
                while True:
                    try:
                        data = self.sock.recv(4096)
                    except (BlockingIOError, OSError):
                        break
                    try:
                        r, state, what, loc, group = json.loads(data)
                    except ValueError:
                        continue
                    t = time.monotonic()
                    if state == "exit" and r not in self.exited_at:
                        self.exited_at[r] = t
                    self.heard[r] = (t, state, what, loc, group)

    def silent(self, ranks, now):
        """Ranks heard from before whose heartbeats stopped (taken for dead). A lost host
        silences all its ranks at once, their last heartbeats up to a period apart: with
        one of them past the limit, the others of its host (PEERS) that missed their
        last heartbeat too are named with it."""
        limit = heartbeat_timeout()

        def quiet(r, after):
            return r in self.heard and r not in self.exited_at and now - self.heard[r][0] > after
        out = [r for r in ranks if quiet(r, limit)]
        hosts = {PEERS[r][0] for r in out if r in PEERS}
        return [r for r in ranks if r in out or (r in PEERS and PEERS[r][0] in hosts
                                                   and quiet(r, limit - period_of(limit)))]

    def describe(self, ranks):
        out = []
        for r in ranks:
            h = self.heard.get(r)
            if h is None:
                continue
            if h[1] == "wait":
                out.append(f"rank {r} waits in {h[2]}{at(h[3])} over ranks {h[4]}")
            elif h[1] == "busy":
                out.append(f"rank {r} is busy (computing, not in a collective)")
            else:
                out.append(f"rank {r} has finished")
        return "; ".join(out)


HEARTBEAT = Heartbeat()
