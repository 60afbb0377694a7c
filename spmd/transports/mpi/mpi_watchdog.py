"""The watchdog: a rank blocked in an MPI call that can no longer complete (a peer died,
hangs or left, the ranks ran different programs, mpiexec reported a lost process) prints
why, with its stack, and aborts the world; a busy peer is waited for."""
from __future__ import annotations

import os
import signal
import sys
import threading
import time
import traceback

from ...tracebacks import stack_traceback
from ..communicator import collective_timeout, heartbeat_timeout
from .mpi_heartbeat import BLOCKED, HEARTBEAT, at
from .mpi_interrupt import end_interrupted
from .mpi_library import mpi_module
from .mpi_peers import PEERS, gone, ranks_text


def timeout_message(rank, what, group, timeout, loc=None):
    lost = gone(group)
    why = (f"{ranks_text(lost)} of this group are gone (their processes exited or were killed)"
           if lost else "a rank of this group died or stopped calling collectives")
    states = HEARTBEAT.describe([r for r in group if r != rank])
    return (f"rank {rank}: {what}{at(loc)} over ranks {list(group)} timed out after {timeout:g} s "
            f"(SPMD_COLLECTIVE_TIMEOUT): {why}" + (f"; {states}" if states else ""))


class Watchdog:
    """One daemon thread per process that aborts the world when a rank blocked in an
    MPI call can no longer be released (the hot path only stores a tuple in a dict):

    - a rank of its group is gone: its process on this host exited or was killed, or
      its heartbeats stopped for SPMD_HEARTBEAT_TIMEOUT seconds (see mpi_heartbeat.py);
    - a rank of its group finished the program (it skipped this collective);
    - every rank waits in a collective, some in another one than this, and nothing
      changed for SPMD_HEARTBEAT_TIMEOUT seconds: the ranks ran different programs;
    - mpiexec signals that a rank died (MPICH's hydra sends SIGUSR1 to the survivors
      when run with -disable-auto-cleanup, as `spmd run` does; see `watch_peer_deaths`);
    - SPMD_COLLECTIVE_TIMEOUT, if set, as a plain stopwatch per call.

    A rank that is alive and busy is waited for, however long: no stopwatch by default."""

    PERIOD = 0.1
    CHECK_EVERY = 0.2           # the liveness checks (process table, heartbeats)
    EXIT_GRACE = 5.0            # a peer that finished may have completed the call we wait in
    INTERRUPT_GRACE = 0.05      # after a Ctrl-C, for a blocked MPI call to return by itself

    def __init__(self):
        self.calls = BLOCKED              # thread id -> (deadline, what, group, rank, timeout, loc, start)
        self.rank = None
        self.signal = None
        self._thread = None
        self._lock = threading.Lock()
        self._stuck = None                # (states seen, since) of an all-waiting world

    def guard(self, fn, what, group, rank, timeout, loc=None):
        if self._thread is None:
            self.start()
        tid = threading.get_ident()
        prev = self.calls.get(tid)
        now = time.monotonic()
        self.calls[tid] = (now + timeout, what, group, rank, timeout, loc, now)
        try:
            return fn()
        finally:
            if prev is None:
                self.calls.pop(tid, None)
            else:
                self.calls[tid] = prev

    def watch_peer_deaths(self, rank):
        """Hear mpiexec's notice that a rank died. Hydra, run with -disable-auto-cleanup
        (as `spmd run` does), sends SIGUSR1 to the survivors; by default that signal
        kills a process silently. Instead, Python's C-level handler writes it to a wakeup
        pipe, which the watchdog thread reads at once: the main thread may be blocked in
        an MPI call, where a Python-level handler would never run. Main thread only;
        left alone if the program already uses a wakeup fd (asyncio)."""
        if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "SIGUSR1"):
            return
        r, w = os.pipe()
        os.set_blocking(w, False)
        old = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
        if old != -1:
            signal.set_wakeup_fd(old)
            os.close(r)
            os.close(w)
            return
        signal.signal(signal.SIGUSR1, lambda *_: None)
        self.rank, self.signal, self._wakeup = rank, signal.SIGUSR1, r
        # At exit, ignore it: MPI_Finalize runs after Python has put the default action
        # (terminate) back on its handled signals, and hydra signals the ranks still in
        # MPI_Finalize as the first ones leave it. Python leaves an ignored signal ignored.
        import atexit
        atexit.register(signal.signal, signal.SIGUSR1, signal.SIG_IGN)
        self.start()

    def start(self):
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._watch, name="spmd-mpi-watchdog", daemon=True)
                self._thread.start()

    def _watch(self):
        import select
        next_check = 0.0
        while True:
            if self.signal is not None:
                ready, _, _ = select.select([self._wakeup], [], [], self.PERIOD)
                got = os.read(self._wakeup, 512) if ready else b""
                if signal.SIGINT in got:
                    self._interrupted()
                if self.signal in got:
                    self._peer_died()
            else:
                time.sleep(self.PERIOD)
            now = time.monotonic()
            check = now >= next_check
            if check:
                next_check = now + self.CHECK_EVERY
            for tid, call in list(self.calls.items()):
                if self.calls.get(tid) is not call:
                    continue
                deadline, what, group, rank, timeout, loc, start = call
                if now > deadline:
                    self._abort(rank, timeout_message(rank, what, group, timeout, loc), tid)
                if check:
                    msg = self._why_stuck(call, now)
                    if msg:
                        self._abort(rank, msg, tid)

    def _why_stuck(self, call, now):
        _, what, group, rank, _, loc, start = call
        others = [r for r in group if r != rank]
        doing = f"rank {rank} waits in {what}{at(loc)} over ranks {list(group)}"
        lost = gone(others)
        if lost:
            return f"{doing}: {ranks_text(lost)} of this group are gone (their processes exited or were killed)"
        silent = HEARTBEAT.silent(others, now)
        if silent:
            return (f"{doing}: {ranks_text(silent)} of this group died or hang: no sign of life for "
                    f"{heartbeat_timeout():g} s (SPMD_HEARTBEAT_TIMEOUT)")
        done = [r for r in others if r in HEARTBEAT.exited_at
                and now - max(HEARTBEAT.exited_at[r], start) > self.EXIT_GRACE]
        if done:
            return (f"{doing}: {ranks_text(done)} finished the program without joining this collective "
                    f"(the ranks ran different programs)")
        return self._deadlock(doing, group, rank, what, loc, now)

    def _deadlock(self, doing, group, rank, what, loc, now):
        world = sorted(PEERS)
        heard = HEARTBEAT.heard
        if len(world) < 2 or any(r != rank and (r not in heard or heard[r][1] != "wait") for r in world):
            self._stuck = None
            return None
        mine = (what, loc, list(group))
        states = tuple((r, heard[r][2], heard[r][3], tuple(heard[r][4] or ())) for r in world if r != rank) \
            + ((rank, what, loc, tuple(group)),)
        if self._stuck is None or self._stuck[0] != states:
            self._stuck = (states, now)
            return None
        differ = [r for r in group if r != rank and tuple(heard[r][2:5]) != mine]
        if not differ or now - self._stuck[1] < heartbeat_timeout():
            return None
        return (f"{doing}, but every rank has been waiting in a collective for {heartbeat_timeout():g} s "
                f"and {HEARTBEAT.describe(differ)}: the ranks ran different programs")

    def _interrupted(self):
        """Ctrl-C reached this rank. Running Python, the main thread raises
        KeyboardInterrupt itself (the program may catch it; if not, the excepthook ends
        the rank quietly, end_interrupted). Blocked in an MPI call it cannot, and the
        peers that would complete the call have left: if it is still in the same call a
        moment later, end the rank from here, without first reporting the peers that
        left (they were interrupted too)."""
        main = threading.main_thread().ident
        call = self.calls.get(main)
        if call is None:
            return
        time.sleep(self.INTERRUPT_GRACE)
        if self.calls.get(main) is not call:
            return
        frame = sys._current_frames().get(main)
        end_interrupted(self.rank, stack_traceback(frame, "KeyboardInterrupt") if frame is not None else "")

    def _peer_died(self):
        time.sleep(0.3)                    # let the dead process leave the process table
        world = sorted(PEERS)
        lost = gone(world)
        who = ranks_text(lost) if lost else "a rank on another host"
        calls = list(self.calls.items())
        doing = (f" while in {calls[0][1][1]}{at(calls[0][1][5])} over ranks {list(calls[0][1][2])}"
                 if calls else "")
        self._abort(self.rank, f"rank {self.rank}: {who} of the {len(world)} died (mpiexec reported a lost "
                               f"process){doing}", calls[0][0] if calls else threading.main_thread().ident)

    def _abort(self, rank, msg, tid):
        frame = sys._current_frames().get(tid)
        stack = "".join(traceback.format_stack(frame)) if frame is not None else ""
        try:
            sys.stderr.write(f"spmd: rank {rank} failed:\nTraceback (most recent call last):\n{stack}"
                             f"spmd.errors.CollectiveError: {msg}\n")
            sys.stderr.flush()
            sys.stdout.flush()
        finally:
            time.sleep(1.0)      # let mpiexec forward the message before the job is torn down
            abort_world()


WATCHDOG = Watchdog()


# seconds MPI_Abort has to end this process before it ends itself
ABORT_GRACE = 5.0


def abort_world(code=1):
    """MPI_Abort, and exit after ABORT_GRACE if that does not end this process: MPI_Abort
    asks mpiexec to end the job, and with mpiexec's host out of reach (a cut link) the
    request never arrives and the call never returns."""
    def leave():
        time.sleep(ABORT_GRACE)
        os._exit(code)
    threading.Thread(target=leave, name="spmd-abort-grace", daemon=True).start()
    mpi_module().COMM_WORLD.Abort(code)


def guarded(fn, what, group, rank, timeout=None, loc=None):
    """fn() (a blocking MPI call), aborting the world if it can no longer complete (a
    peer died, hangs or left; see Watchdog) or, when SPMD_COLLECTIVE_TIMEOUT is set,
    it is still blocked after that many seconds."""
    return WATCHDOG.guard(fn, what, group, rank, collective_timeout() if timeout is None else timeout, loc)
