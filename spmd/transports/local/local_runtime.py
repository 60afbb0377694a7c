"""LocalRuntime: every device of the mesh is a thread of this process (the default backend).

`run(program, mesh, args)` runs `program(inputs, comm)` once per device of `mesh`, each
on its own worker thread with a LocalCommunicator of a fresh LocalWorld (so nothing of
a failed run can leak into the next). A handle is the shard itself, a numpy array;
`put` takes ownership of the array it is given (device_put hands it fresh copies).

Any mesh size runs: `num_devices` (spmd.init(num_devices=N), default os.cpu_count())
is only what `spmd.device_count()` reports; a mesh of M devices runs on M threads.
Worker threads are kept between runs (a pool per device id), since starting threads
on every call of a jitted function would cost more than a small program; a small
program that exchanges nothing (SOLO_BYTES) runs its ranks one after another on the
calling thread instead, which costs less than handing them to the workers.

Errors: the first rank to raise aborts the world (the others, waiting in collectives,
wake and fail at once); `run` re-raises that first exception with its rank in the
message (SpmdError) and as a note (any exception), after giving the other ranks a
moment to stop. A rank stuck outside any collective is left behind (its worker is
retired, a fresh one replaces it) rather than making the caller hang. Every task ends
with its rank's report, whatever fails after the program; were a report still lost (the
rank's worker gone, or idle with nothing queued), the run raises an error naming the rank.
"""
from __future__ import annotations

import atexit
import os
import queue
import sys
import threading
import time
import weakref

from ..communicator import collective_timeout
from ...runtime.cores import local_cores
from .local_communicator import LocalWorld
from ...errors import CollectiveError, SpmdError
from ...runtime import blas
from ...runtime.backend import Runtime
from ...runtime.program import runner, talks

# how long run() waits, after the first failure, for the other ranks to stop
GRACE_SECONDS = 0.25
# how often the caller's wait wakes: a signal (Ctrl-C, a SIGTERM handler) is handled by
# the main thread only, and only between bytecodes, so it must never block for good
POLL_SECONDS = 0.1
# a pending rank whose worker sits idle this many polls in a row is lost (LocalRuntime._lost)
LOST_POLLS = 20
# every running rank waiting in a rendezvous this long is a deadlock (LocalWorld.deadlocked)
DEADLOCK_SECONDS = 10.0
# a program that exchanges nothing and makes at most this many bytes a rank runs its
# ranks one after another on the calling thread: handing each to its worker thread and
# waiting for them costs more (tens of microseconds a rank) than the work itself
SOLO_BYTES = 1 << 18

_WORKERS = weakref.WeakSet()         # every worker thread, to let them finish at exit


def shutdown_wait() -> float:
    """Seconds the process waits at exit for device threads still computing (an
    interrupted step) before it leaves without them (SPMD_SHUTDOWN_WAIT, default 60)."""
    return float(os.environ.get("SPMD_SHUTDOWN_WAIT", "60"))


class _Worker(threading.Thread):
    def __init__(self, device):
        super().__init__(name=f"spmd-device-{device}", daemon=True)
        self.tasks = queue.Queue()
        self.busy = False
        _WORKERS.add(self)
        self.start()

    def run(self):
        while True:
            task = self.tasks.get()
            if task is None:
                return
            self.busy = True
            try:
                task()
            finally:
                self.busy = False


@atexit.register
def _drain():
    """At exit, let device threads of an interrupted step finish (their world is
    aborted: they stop at their next collective). A daemon thread frozen by the
    interpreter's shutdown in the middle of a BLAS call holds BLAS's locks, and BLAS's
    own exit handler then waits for them forever. Past SPMD_SHUTDOWN_WAIT, the process
    leaves without them (os._exit) rather than hang."""
    busy = [w for w in list(_WORKERS) if w.busy and w.is_alive()]
    if not busy:
        return
    deadline = time.monotonic() + shutdown_wait()
    for w in busy:
        w.tasks.put(None)
        w.join(max(0.0, deadline - time.monotonic()))
    if any(w.is_alive() and w.busy for w in busy):
        sys.stderr.write(f"spmd: device threads of an interrupted step still running after "
                         f"{shutdown_wait():g} s at exit (SPMD_SHUTDOWN_WAIT); leaving without them\n")
        sys.stderr.flush()
        sys.stdout.flush()
        os._exit(1)


CLEAN_WORLDS = 8


class LocalRuntime(Runtime):
    name = "local"
    solo_bytes = SOLO_BYTES

    def __init__(self, num_devices=None):
        self._num_devices = int(num_devices) if num_devices else (os.cpu_count() or 1)
        self._workers = {}
        self._lock = threading.Lock()      # one run at a time
        # key -> the world of a run on that mesh in which every rank returned and none
        # failed (the last CLEAN_WORLDS meshes): the next run on the mesh uses it again,
        # reset, so its ranks keep their communicators (a native schedule fills in what it
        # reads from one once)
        self._clean = {}

    # -- the contract --------------------------------------------------------------------
    @property
    def num_devices(self) -> int:
        return self._num_devices

    def local_devices(self, mesh=None) -> list:
        """Every device: this process holds all shards."""
        # (a mesh holds each of the ranks 0..size-1 once)
        return list(range(self._num_devices if mesh is None else mesh.size))

    def put(self, device, array):
        return array

    def native_scope(self, mesh):
        return "process" if mesh is not None and mesh.size > 1 else None

    def get(self, handles: dict) -> dict:
        return dict(handles)

    def all_shards(self, handles: dict, mesh) -> dict:
        return dict(handles)

    def run(self, program, mesh, args: dict) -> dict:
        devices = self.local_devices(mesh)
        missing = [d for d in devices if d not in args]
        if missing:
            raise SpmdError(f"local runtime: no inputs for device(s) {missing} of {mesh.text()}")
        with self._lock:
            return self._run(program, mesh, args, devices)

    def shutdown(self):
        with self._lock:
            for w in self._workers.values():
                w.tasks.put(None)
            self._workers = {}

    # -- running -------------------------------------------------------------------------
    def _world(self, mesh):
        key = (mesh, collective_timeout(), local_cores())
        world = self._clean.pop(key, None)
        if world is not None:
            world.reset()
            return key, world
        return key, LocalWorld(mesh)

    def _run(self, program, mesh, args, devices):
        key, world = self._world(mesh)
        if runs_in_turn(program):
            return self._run_here(program, world, key, args, devices)
        # the ranks share this process's BLAS: one thread count for the whole run (blas.py)
        blas.start_run(len(devices))
        done = queue.Queue()             # (device, ok, outputs or exception)

        def task(device):
            def body():
                try:
                    out, ok = list(program(list(args[device]), world.communicator(device))), True
                except BaseException as e:   # noqa: BLE001 - reported to the caller below
                    out, ok = e, False
                try:
                    if ok:
                        world.finish(device)
                    else:
                        world.abort(device, out)
                except BaseException as e:   # noqa: BLE001 - the rank's failure, still reported
                    out, ok = e, False
                # every task ends with its report: a rank whose report went missing would
                # leave the caller waiting for it with every thread idle
                done.put((device, ok, out))
            return body

        workers = {d: self._worker(d) for d in devices}
        for d in devices:
            workers[d].tasks.put(task(d))
        results, errors = {}, []
        pending = set(devices)
        idle = {}                        # pending device -> polls its worker has sat idle
        try:
            while pending:
                try:
                    d, ok, val = done.get(timeout=GRACE_SECONDS if errors else POLL_SECONDS)
                except queue.Empty:
                    if errors:
                        break
                    lost = self._lost(workers, pending, idle)
                    if lost:
                        errors.append((lost[0], SpmdError(
                            f"local runtime: rank(s) {lost} of {mesh.text()} never reported a result: their "
                            f"device thread is {'idle' if workers[lost[0]].is_alive() else 'gone'} "
                            f"(an internal error of spmd; please report it)")))
                        world.abort(lost[0], errors[-1][1])
                        break
                    stuck = world.deadlocked(pending, DEADLOCK_SECONDS)
                    if stuck:
                        # the others' reports (woken by the abort, they fail) follow
                        errors.append((min(stuck), CollectiveError(
                            "local runtime: a deadlock: every rank still running waits for another, and none "
                            "is left to arrive (the ranks called collectives in different orders, or over "
                            "different groups): " + "; ".join(f"rank {r} in {w}" for r, w in stuck.items()))))
                        world.abort(*errors[-1])
                    continue
                pending.discard(d)
                if ok:
                    results[d] = val
                else:
                    errors.append((d, val))
        except BaseException as e:          # Ctrl-C in the caller: stop the ranks too
            world.abort("caller", e)
            raise
        finally:
            for d in pending:               # still busy: retire its worker, a new one serves next time
                w = self._workers.pop(d, None)
                if w is not None:
                    w.tasks.put(None)
        if errors:
            raise _first_error(world, errors)
        self._keep_clean(key, world)
        return results

    @staticmethod
    def _lost(workers, pending, idle) -> list:
        """The pending devices whose worker thread ended, or has sat idle (no task queued,
        none running) for LOST_POLLS polls of an empty report queue: their report can no
        longer come. A worker between taking its task and starting it looks idle for an
        instant, hence the many polls."""
        lost = []
        for d in sorted(pending):
            w = workers[d]
            if not w.is_alive():
                lost.append(d)
            elif w.busy or not w.tasks.empty():
                idle.pop(d, None)
            else:
                idle[d] = idle.get(d, 0) + 1
                if idle[d] >= LOST_POLLS:
                    lost.append(d)
        return lost

    def _run_here(self, program, world, key, args, devices):
        """The ranks of a small program that exchanges nothing, one after another on the
        calling thread (each through program.runner: what is the same for every rank
        looked up once); the first to fail stops the run, its error labelled as any
        rank's. Were the judgement wrong, a rank that waits for another raises
        (world.run_solo) rather than waiting for a rank that runs only after it. The BLAS
        thread count is the threaded run's, so results are the same bits."""
        blas.start_run(len(devices))
        world.run_solo()
        results, run = {}, None
        for d in devices:
            comm = world.communicator(d)
            try:
                run = run or runner(program, comm)
                results[d] = run(args[d], comm)
            except BaseException as e:   # noqa: BLE001 - re-raised below, labelled
                world.abort(d, e)
                raise _first_error(world, [(d, e)]) from None
            world.finish(d)
        self._keep_clean(key, world)
        return results

    def _keep_clean(self, key, world):
        """A run on the mesh of `key` ended with every rank returned: its world serves the
        next run on that mesh (the last CLEAN_WORLDS meshes')."""
        self._clean[key] = world
        while len(self._clean) > CLEAN_WORLDS:
            del self._clean[next(iter(self._clean))]

    def _worker(self, device):
        w = self._workers.get(device)
        if w is None or not w.is_alive():
            w = self._workers[device] = _Worker(device)
        return w


def runs_in_turn(program) -> bool:
    """Are `program`'s ranks run one after another on the calling thread: it exchanges
    nothing and makes at most SOLO_BYTES a rank? An Executable declares both; a plain
    function handed to run (program(inputs, comm), as tests do) declares neither and is
    taken to talk."""
    return not talks(program) and program.work_bytes <= SOLO_BYTES


def _first_error(world, errors):
    """The exception that caused the failure, labelled with its rank. Ranks that only
    failed because another one did (CollectiveError "aborted because ...") come last."""
    rank, exc = world.failed if world.failed is not None else errors[0]
    if isinstance(exc, CollectiveError):
        # a collective error (timeout, mismatch) names the ranks already; prefer a root cause
        roots = [(d, e) for d, e in errors if not isinstance(e, CollectiveError)]
        if roots:
            rank, exc = roots[0]
    label = f"rank {rank}"
    if isinstance(exc, SpmdError) and exc.args and isinstance(exc.args[0], str) \
            and not exc.args[0].startswith(label):
        exc.args = (f"{label}: {exc.args[0]}",) + exc.args[1:]
    if hasattr(exc, "add_note"):
        exc.add_note(f"spmd: raised on {label} of the local runtime ({len({d for d, _ in errors})} rank(s) failed)")
    return exc
