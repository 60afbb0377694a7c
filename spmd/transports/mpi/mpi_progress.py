"""Collectives made of rounds, driven to the end at once or while the rank computes.

An all_reduce in group order, or one that goes host by host, is a few rounds of MPI
calls with a local reduction between them. Such a collective is written once, as a
generator that yields each round: a list of calls `(comm, name, send, recv)` (name is
the blocking call's, e.g. "Alltoall"), and returns its result. Then

- `run_blocking` makes each round's calls as MPI's blocking collectives (the fastest
  under MPICH, whose nonblocking versions run schedule-based algorithms);
- `Started` makes them as nonblocking ones (Ialltoall, ...) and moves on to the next
  round when a round completes: from `finish` (the all_reduce's wait) and, meanwhile,
  from `progress`, which tests the round in flight without blocking.

Who calls `progress` (SPMD_MPI_PROGRESS, progress_mode below): `poll` the
executables between the program's steps (Communicator.progress, backends/executor.py);
`thread` also a thread of spmd's own, every PERIOD seconds (`ProgressThread`), the
default when the ranks run on several hosts; `off`
nobody, so a started all_reduce puts its first round on the wire and the rest waits
for the wait: MPICH moves a nonblocking collective on only inside MPI calls, and a round
that follows a local reduction cannot start before somebody runs that reduction.
MPICH's own progress thread (MPIR_CVAR_ASYNC_PROGRESS=1) spins on a core, which ranks
sharing a host's cores cannot spare, and does not run the reductions between rounds.
Between steps costs a test per step and no thread; a thread takes the GIL from the
rank's own thread at every test (benchmarks/overlap_hosts.py compares the three).

The rounds of a started collective run on communicators of its own (MPICommunicator
hands each started all_reduce a set that no other collective in flight uses), because
`progress` makes its calls at times that differ from rank to rank, and MPI requires
the collectives on one communicator in the same order on every rank.
"""
from __future__ import annotations

import os
import threading
import time

from ...errors import CollectiveError
from .mpi_library import mpi_buffer
from .mpi_peers import PEERS

# seconds between the progress thread's tests of the collectives in flight
PERIOD = 0.002


def nonblocking(name):
    """mpi4py's nonblocking name of a blocking collective: Alltoall -> Ialltoall."""
    return "I" + name[0].lower() + name[1:]


def run_blocking(steps, call):
    """The result of the steps, each round's calls made by call(comm, name, send, recv)."""
    try:
        round_ = next(steps)
        while True:
            for c in round_:
                call(*c)
            round_ = steps.send(None)
    except StopIteration as e:
        return e.value


class Started:
    """The steps of a collective in flight: start(comm, name, send, recv) makes a call
    nonblocking and returns its request; test(requests) and wait(requests) are MPI's
    Testall and Waitall."""

    def __init__(self, steps, start, test):
        self.steps, self.start, self.test = steps, start, test
        self.lock = threading.Lock()
        self.requests = []
        self.done = False
        self.value = self.error = None
        self._advance()

    def _advance(self):
        """Run the steps up to their next round and start its calls (or take the result)."""
        try:
            round_ = next(self.steps)
        except StopIteration as e:
            self.done, self.value, self.requests = True, e.value, []
            return
        self.requests = [self.start(*c) for c in round_]

    def progress(self):
        """Move on as far as the rounds completed allow, without blocking (the progress
        thread; a collective being finished by its wait is left to it)."""
        if not self.lock.acquire(blocking=False):
            return
        try:
            while not self.done and self.error is None and self.test(self.requests):
                self._advance()
        except BaseException as e:       # said by the wait, on the rank's own thread
            self.error = e
        finally:
            self.lock.release()

    def finish(self, wait):
        """The result: every remaining round, each waited for by wait(requests)."""
        with self.lock:
            while not self.done:
                if self.error is not None:
                    raise self.error
                wait(self.requests)
                self._advance()
            return self.value


class ProgressThread:
    """Tests the started collectives every PERIOD seconds while any is in flight."""

    def __init__(self):
        self.active = []
        self.cond = threading.Condition()
        self.thread = None

    def add(self, started):
        with self.cond:
            self.active.append(started)
            if self.thread is None:
                self.thread = threading.Thread(target=self._run, name="spmd-mpi-progress", daemon=True)
                self.thread.start()
            self.cond.notify()

    def remove(self, started):
        with self.cond:
            if started in self.active:
                self.active.remove(started)

    def _run(self):
        while True:
            with self.cond:
                while not self.active:
                    self.cond.wait()
                items = list(self.active)
            for s in items:
                s.progress()
                if s.done:               # (its wait takes the result): nothing left to test
                    self.remove(s)
            time.sleep(PERIOD)


# -- who moves started all_reduces on --------------------------------------------------------
PROGRESS_MODES = ("poll", "thread", "off")


def progress_mode(environ=None) -> str:
    """How started all_reduces move on (SPMD_MPI_PROGRESS; transports/mpi/mpi_progress.py):
    `poll` between the program's steps, `thread` also from a thread of spmd's own, `off`
    only inside MPI calls. The default is `thread` when the ranks run on several hosts,
    else `poll`: the LLVM backend runs the kernels between two collectives as one native
    call, so only a thread moves a collective on during them, which pays where the link
    is slow, while on one host the collectives are quick and the thread only takes time
    from the ranks. train_gpt d256, 4 ranks on a 2-core machine (benchmarks/
    overlap_hosts.py): on 2 hosts at 1 Gbit/s the step took 340 ms with the thread, 395 ms
    polling, 398 ms off (the all-reduces alone: 119 ms); on one host 319, 296 and 294 ms."""
    env = os.environ if environ is None else environ
    default = "thread" if len({h for h, _ in PEERS.values()}) > 1 else "poll"
    mode = env.get("SPMD_MPI_PROGRESS", "").strip() or default
    if mode not in PROGRESS_MODES:
        raise CollectiveError(f"SPMD_MPI_PROGRESS={mode!r}: takes one of {', '.join(PROGRESS_MODES)}")
    return mode


PROGRESS = ProgressThread()


def start_call(comm, name, send, recv):
    return getattr(comm, nonblocking(name))(mpi_buffer(send), mpi_buffer(recv))
