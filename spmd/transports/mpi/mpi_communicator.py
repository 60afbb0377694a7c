"""MPICommunicator: one process per rank; collectives through mpi4py's buffer
(upper-case) API on contiguous numpy buffers — no pickling on the data path.

A mesh-axis group is an MPI sub-communicator made once with `Split` (color: the
group's first device, key: this rank's index in the group) and cached, so a
collective over ("data",) on a 2x2 mesh runs on a 2-rank communicator.

The calls are MPI's blocking collectives (Allreduce, Allgather, Reduce_scatter_block,
Alltoall, Bcast, Barrier), exactly what a raw mpi4py program calls, into recycled
result buffers (transports/buffer_pool.py), so spmd costs next to nothing over it: MPICH's
nonblocking versions run other (schedule-based) algorithms and only progress while
polled, which made them up to 2x slower at 1 MB. Liveness is kept by a watchdog
thread instead (see _Watchdog and _Heartbeat): a call that can no longer complete —
a peer's process gone, its heartbeats silent, the peer finished, or mpiexec's notice
of a death — prints which collective, at which user line, over which ranks and what
the others are doing, with this rank's stack, and aborts the world; a busy peer is
waited for (SPMD_COLLECTIVE_TIMEOUT adds a stopwatch only when set). Under MPI a rank
cannot leave a broken collective and carry on, so aborting is what raising would
lead to anyway (transports/mpi/mpi_runtime.py aborts on any uncaught exception).

Reductions of floats (sum, prod, max, min; every float dtype) do not use MPI's built-in
operations: each element is reduced over the group in group order by base.reduce_arrays,
as the local and Ray communicators do, so a sum has the same bits on every run and on
every backend (MPI_SUM adds in the order of whichever algorithm MPICH picks for the
size, and another one in its nonblocking version). The data moves as in MPI's own
schedule for large messages: an Alltoall gives rank i block i of every input, it reduces
the block, and an Allgather of the blocks completes the all_reduce (up to GATHER_BYTES
gathered: one Allgather, every rank reducing all of it). Integer and bool reductions,
exact in any order, are MPI's built-ins.

When the group spans hosts with the same number (> 1) of members on each (ranks from
PEERS' host names), an all_reduce of a float sum or product, or of integers or bools,
of at least HIERARCHICAL_BYTES goes host by host (hierarchical_steps): a reduce-scatter
within each host, the all_reduce of each member's block with the members of its place
on the other hosts, an all-gather within the host; half the bytes of the group-order
schedule cross between hosts. Each element is then the sum over the hosts, in host
order, of its host's sum in group order: the same bits on every run (and as on Ray,
whose hierarchical all_reduce sums the same way), not those of one host's run.

Both are generators of rounds (transports/mpi/mpi_progress.py): a blocking all_reduce
makes each round's calls as MPI's blocking collectives; a started one
(`all_reduce_start` / `wait`, the halves passes/schedule.py makes so that the backward
pass overlaps the gradient reductions) makes them nonblocking, on communicators of its
own, and it moves from round to round while the rank computes: the executables call
`progress` between the program's steps (MPICH progresses a nonblocking collective only
inside MPI calls, and the local reduction between rounds needs somebody to run it);
`wait` finishes what is left under the same watchdog as a blocking call.
When the ranks run on several hosts a thread of spmd's own tests them too
(SPMD_MPI_PROGRESS=poll | thread | off; transports/mpi/mpi_progress.py).

Messages over MPI's count limit (MAX_COUNT = 2**31-1 elements per count argument) are
sent in chunks. Results are new arrays; the semantics are those of transports/communicator.py
and the LocalCommunicator, bit for bit.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import sys
import threading
import time
import traceback

import numpy as np

from ...errors import CollectiveError
from ...tracebacks import stack_traceback, user_traceback
from ..communicator import REDUCE_OPS, Communicator, collective_timeout, heartbeat_timeout, into, reduce_arrays
from .mpi_files import unlink_run_files
from .mpi_init import watching_init
from .mpi_progress import ProgressThread, Started, nonblocking, run_blocking
from ..buffer_pool import BufferPool

MAX_COUNT = 2 ** 31 - 1

# world rank -> (host, pid), filled by MPIRuntime when it starts: a timed-out collective
# then names the ranks of its group whose process on this host is gone
PEERS = {}


_MPI = None


def mpi_module():
    global _MPI
    if _MPI is None:              # imported on first use: importing mpi4py.MPI initialises MPI
        yield_when_oversubscribed()
        with watching_init():
            from mpi4py import MPI
        unlink_run_files()        # nothing left in /dev/shm or /tmp however the run ends (mpi_files.py)
        _MPI = MPI
    return _MPI


# MPICH settings for a host with more ranks than cores, each kept if the user set it
OVERSUBSCRIBED = {"MPIR_CVAR_ENABLE_HEAVY_YIELD": "1", "MPIR_CVAR_POLLS_BEFORE_YIELD": "10"}


def yield_when_oversubscribed(environ=None):
    """With many more ranks on this host than cores, MPICH's blocking calls busy-poll on
    the cores the working ranks need: train_gpt's 4x2 mesh under `mpiexec -n 8` on 2
    cores took 8.3 s for 30 steps, 6.2 s with MPICH told to sleep after 10 polls. At
    twice as many ranks as cores it is the other way round (the 2x2 mesh on `-n 4`: 4.1 s
    polling, 5.2-5.7 s sleeping), so only beyond that. MPICH reads these at MPI_Init, so
    this runs before mpi4py.MPI is first imported. The rank count on this host comes from
    the launcher (hydra: MPI_LOCALNRANKS; Open MPI: OMPI_COMM_WORLD_LOCAL_SIZE, which
    ignores MPICH's variables)."""
    env = os.environ if environ is None else environ
    local = 0
    for var in ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE"):
        try:
            local = max(local, int(env.get(var, 0)))
        except ValueError:
            pass
    if local > 2 * (os.cpu_count() or 1):
        for k, v in OVERSUBSCRIBED.items():
            env.setdefault(k, v)


def _axes(axes):
    return (axes,) if isinstance(axes, str) else tuple(axes)


def _key(axes):
    """axes as a dictionary key (a name, or a tuple of names)."""
    return axes if isinstance(axes, (str, tuple)) else tuple(axes)


def _op(op, dtype):
    MPI = mpi_module()
    if op not in REDUCE_OPS:
        raise CollectiveError(f"unknown reduction {op!r} (takes {', '.join(REDUCE_OPS)})")
    if dtype == np.bool_:
        return MPI.LOR if op in ("sum", "max") else MPI.LAND
    return {"sum": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN, "prod": MPI.PROD}[op]


def _in_group_order(op, dtype):
    """Every reduction of floats runs in group order through base.reduce_arrays, the rule
    every backend follows, so a sum has the same bits on every run and on every backend:
    MPI's built-in SUM adds in the order of the algorithm MPICH picks for the message size
    and group (recursive doubling adds (a+b)+(c+d), not ((a+b)+c)+d; the nonblocking
    version picks others), and its MAX/MIN drop NaN (C's fmax), where numpy's
    maximum/minimum propagate it. Integers and bools keep MPI's built-in reductions:
    exact in any order."""
    if op not in REDUCE_OPS:
        raise CollectiveError(f"unknown reduction {op!r} (takes {', '.join(REDUCE_OPS)})")
    return np.dtype(dtype).kind in "fc" or np.dtype(dtype).name in _HALFS


# an all_reduce in group order of up to this many bytes gathered (G times the input) is one
# Allgather, every rank reducing all of it; a bigger one goes block-wise (each rank reduces
# 1/G of it: an Alltoall, then an Allgather of the reduced blocks), MPI's own schedule
# for large messages (Rabenseifner's), with the same bytes on the wire
GATHER_BYTES = 1 << 16


# 2-byte floats: MPI has no bfloat16 (nor, portably, float16) type: they travel as raw
# uint16 and every reduction of them goes through base.reduce_arrays (float32 sums)
_HALFS = ("float16", "bfloat16")


def contiguous(x):
    """A C-contiguous ndarray of x, without a copy when it already is one; 0-d stays 0-d
    (the numpy helper for this turns 0-d arrays into 1-d ones)."""
    x = np.asarray(x)
    return x if x.flags.c_contiguous else x.copy(order="C")


def mpi_buffer(a):
    """A message for mpi4py: bools travel as C_BOOL."""
    MPI = mpi_module()
    if a.dtype == np.bool_:
        return [a, MPI.C_BOOL]
    if a.dtype.name in _HALFS:
        return [a.view(np.uint16), MPI.UINT16_T]
    return a


def _blocks(what, x, G, dim):
    """x split in G equal blocks along dim, as one contiguous (G, *block) buffer; along
    dim 0 that is x itself, reshaped."""
    x = np.asarray(x)
    if x.shape[dim] % G:
        raise CollectiveError(f"{what}: dim {dim} of {list(x.shape)} does not split into {G} blocks")
    if dim == 0:
        return contiguous(x).reshape((G, x.shape[0] // G) + x.shape[1:])
    parts = np.split(x, G, axis=dim)
    return np.stack(parts, out=POOL.empty((G,) + parts[0].shape, x.dtype))


def _concatenate(parts, dim):
    """np.concatenate(list(parts), axis=dim) into a pooled buffer."""
    shape = list(parts.shape[1:])
    shape[dim] *= parts.shape[0]
    return np.concatenate(list(parts), axis=dim, out=POOL.empty(tuple(shape), parts.dtype))


def _chunks(n):
    """[lo, hi) ranges of at most MAX_COUNT elements covering n (one empty range for 0)."""
    if n <= MAX_COUNT:
        return ((0, n),)
    return [(lo, min(lo + MAX_COUNT, n)) for lo in range(0, n, MAX_COUNT)]


# results come from a pool of recycled buffers (transports/buffer_pool.py): fresh pages cost a
# page fault each, raw mpi4py code reuses its buffers
POOL = BufferPool()


# -- the deadline ------------------------------------------------------------------------------
def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")   # a zombie is dead
    except OSError:
        try:
            os.kill(pid, 0)       # no /proc (not Linux): ask the kernel
            return True
        except ProcessLookupError:
            return False
        except OSError:
            return True


def gone(ranks):
    """The ranks among `ranks` whose process ran on this host and no longer does."""
    host = socket.gethostname()
    return [r for r in ranks if r in PEERS and PEERS[r][0] == host and not _alive(PEERS[r][1])]


def ranks_text(ranks) -> str:
    """'rank(s) [2, 3]', with their hosts when the world spans several: 'rank(s) [2, 3]
    on host h2' (from PEERS), so a lost host is named with its ranks."""
    text = f"rank(s) {list(ranks)}"
    if len({h for h, _ in PEERS.values()}) > 1:
        hosts = sorted({PEERS[r][0] for r in ranks if r in PEERS})
        if hosts:
            text += f" on host{'s' if len(hosts) > 1 else ''} {', '.join(hosts)}"
    return text


def _at(loc):
    return f" at {loc}" if loc else ""


class _Heartbeat:
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
        for call in list(WATCHDOG.calls.values()):
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
        period = max(0.05, min(1.0, heartbeat_timeout() / 4))
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
        """Ranks heard from before whose heartbeats stopped (taken for dead)."""
        limit = heartbeat_timeout()
        return [r for r in ranks if r in self.heard and r not in self.exited_at
                and now - self.heard[r][0] > limit]

    def describe(self, ranks):
        out = []
        for r in ranks:
            h = self.heard.get(r)
            if h is None:
                continue
            if h[1] == "wait":
                out.append(f"rank {r} waits in {h[2]}{_at(h[3])} over ranks {h[4]}")
            elif h[1] == "busy":
                out.append(f"rank {r} is busy (computing, not in a collective)")
            else:
                out.append(f"rank {r} has finished")
        return "; ".join(out)


HEARTBEAT = _Heartbeat()


def timeout_message(rank, what, group, timeout, loc=None):
    lost = gone(group)
    why = (f"{ranks_text(lost)} of this group are gone (their processes exited or were killed)"
           if lost else "a rank of this group died or stopped calling collectives")
    states = HEARTBEAT.describe([r for r in group if r != rank])
    return (f"rank {rank}: {what}{_at(loc)} over ranks {list(group)} timed out after {timeout:g} s "
            f"(SPMD_COLLECTIVE_TIMEOUT): {why}" + (f"; {states}" if states else ""))


class _Watchdog:
    """One daemon thread per process that aborts the world when a rank blocked in an
    MPI call can no longer be released (the hot path only stores a tuple in a dict):

    - a rank of its group is gone: its process on this host exited or was killed, or
      its heartbeats stopped for SPMD_HEARTBEAT_TIMEOUT seconds (see _Heartbeat);
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
        self.calls = {}                   # thread id -> (deadline, what, group, rank, timeout, loc, start)
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
        doing = f"rank {rank} waits in {what}{_at(loc)} over ranks {list(group)}"
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
        doing = (f" while in {calls[0][1][1]}{_at(calls[0][1][5])} over ranks {list(calls[0][1][2])}"
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


WATCHDOG = _Watchdog()

# the exit status of a program a Ctrl-C ended, as a shell reports it (128 + SIGINT)
INTERRUPTED = 130
_ENDING = threading.Lock()


def end_interrupted(rank, report):
    """End this rank after a Ctrl-C. The terminal (or mpiexec, passing it on) interrupted
    every rank at once, so each has the same story: rank 0 tells it once (report: the
    user's traceback, as a local run prints it), the others leave quietly, at once. The
    status is 130, as Python's after a KeyboardInterrupt, without MPI_Abort (whose report
    and status 1 would be all the user saw); hydra's mpiexec exits 130 when every rank
    did (hold_launcher_link). Leaving before MPI_Finalize leaves no file behind: MPICH's
    files were unlinked at start (transports/mpi/mpi_files.py)."""
    _ENDING.acquire()           # the main thread and the watchdog may both come here: one tells
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)    # a second Ctrl-C must not cut this short
    try:
        if rank == 0 or rank is None:
            sys.stderr.write(report)
        sys.stderr.flush()
        sys.stdout.flush()
    finally:
        hold_launcher_link()
        os._exit(INTERRUPTED)


# seconds a rank's link to its launcher outlives the rank after a Ctrl-C
LINK_HOLD = 1.0


def hold_launcher_link():
    """Keep this rank's PMI connection open for a moment after it exits. Hydra's proxy
    takes a rank whose PMI connection closes before MPI_Finalize for a failure and
    SIGKILLs every other rank at once; after a Ctrl-C every rank is leaving on its own,
    but not in the same millisecond, and a rank killed that way makes mpiexec exit 9,
    not 130. A forked child holding the connection (and nothing else) lets the others
    finish leaving first."""
    try:
        fd = int(os.environ.get("PMI_FD", ""))
    except ValueError:
        return
    try:
        if os.fork() != 0:
            return
    except OSError:
        return
    try:
        os.closerange(0, fd)
        os.closerange(fd + 1, 1 << 16)
        time.sleep(LINK_HOLD)
    finally:
        os._exit(0)


def keyboard_interrupt(tp, value, tb, rank):
    """The excepthook's part for a KeyboardInterrupt raised on this rank."""
    end_interrupted(rank, user_traceback(tp, value, tb))


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
    peer died, hangs or left; see _Watchdog) or, when SPMD_COLLECTIVE_TIMEOUT is set,
    it is still blocked after that many seconds."""
    return WATCHDOG.guard(fn, what, group, rank, collective_timeout() if timeout is None else timeout, loc)


# -- all_reduce in rounds (transports/mpi/mpi_progress.py) -----------------------------------------
# an all_reduce over a group spanning hosts goes host by host from this many bytes (smaller
# ones are a round trip either way)
HIERARCHICAL_BYTES = 1 << 16


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


def _start_call(comm, name, send, recv):
    return getattr(comm, nonblocking(name))(mpi_buffer(send), mpi_buffer(recv))


def group_order_steps(c, x, op, G, out=None):
    """op over the G members of communicator c, each element reduced in group order
    (base.reduce_arrays). Small: an Allgather of the inputs, each rank reduces all of
    them. Large: the flat input as G equal blocks (and fewer than G elements left over,
    gathered whole); each rank gets block i of every input (Alltoall), reduces it, and
    the reduced blocks are gathered (Allgather; MPICH's Alltoallv / Allgatherv are up
    to 3x slower than these). The bits do not depend on the path or the blocks."""
    if x.nbytes * G <= GATHER_BYTES:
        rows = POOL.empty((G,) + x.shape, x.dtype)
        yield [(c, "Allgather", x, rows)]
        return reduce_arrays(op, list(rows), out=POOL.empty(x.shape, x.dtype) if out is None else out)
    fx = x.reshape(-1)
    n = fx.size
    k = n // G                            # each member reduces k elements
    mid = G * k
    got = POOL.empty((G, k), x.dtype)     # row j: block i of member j's x
    rest = POOL.empty((G, n - mid), x.dtype)
    yield [(c, "Alltoall", fx[:mid], got)] * bool(k) + [(c, "Allgather", fx[mid:], rest)] * (n > mid)
    r = POOL.empty(x.shape, x.dtype) if out is None else out
    fr = r.reshape(-1)
    if k:
        yield [(c, "Allgather", reduce_arrays(op, list(got)), fr[:mid])]
    if n > mid:
        reduce_arrays(op, list(rest), out=fr[mid:])
    return r


def hierarchical_steps(comms, x, op, hosts, out=None):
    """op over a group spanning H hosts with L members each (`hosts`: the members'
    group indices by host), host by host: a reduce-scatter within the host (member k
    gets block k of its host's sum, in group order), the all_reduce of the blocks at
    place k across the hosts, in host order (the only traffic between hosts: about
    2N(H-1)/H bytes each way per host, where the group-order all_reduce moves about
    2N(G-L)/G per rank), and an all-gather within the host. Every element is the sum
    over the hosts, in host order, of its host's sum in group order (the fewer than L
    elements left over by the blocks too): the same bits on every run, but not those
    of the group-order reduction of one host."""
    c, local, across = comms
    H, L = len(hosts), len(hosts[0])
    fx = x.reshape(-1)
    n = fx.size
    kl = n // L
    main = L * kl
    got = POOL.empty((L, kl), x.dtype)
    rest = POOL.empty((H * L, n - main), x.dtype)
    yield [(local, "Alltoall", fx[:main], got)] * bool(kl) + [(c, "Allgather", fx[main:], rest)] * (n > main)
    part = reduce_arrays(op, list(got), out=POOL.empty((kl,), x.dtype))      # this host's sum of block k
    whole = yield from group_order_steps(across, part, op, H)
    r = POOL.empty(x.shape, x.dtype) if out is None else out
    fr = r.reshape(-1)
    if kl:
        yield [(local, "Allgather", whole, fr[:main])]
    if n > main:
        sums = [reduce_arrays(op, [rest[j] for j in members]) for members in hosts]
        reduce_arrays(op, sums, out=fr[main:])
    return r


# -- the communicator --------------------------------------------------------------------------
class MPICommunicator(Communicator):
    _comms = {}      # (mesh key, axes, color) -> sub-communicator, shared by the process

    def __init__(self, mesh, rank=None, world=None):
        MPI = mpi_module()
        self.world = world or MPI.COMM_WORLD
        super().__init__(mesh, self.world.Get_rank() if rank is None else rank)
        self.timeout = collective_timeout()
        self._groups = {}           # axes as given -> (sub-communicator, group)
        self._host_layouts = {}     # axes -> the group's members by host, or None (_hosts)
        self._slot_comms = {}       # (axes, slot) -> communicators of a slot (_comms_of)
        self._slots_busy = {}       # axes -> the slots held by started all_reduces
        self._polled = []           # started all_reduces that progress() moves on

    # -- groups --------------------------------------------------------------------------
    def comm(self, axes):
        if not isinstance(axes, (str, tuple)):
            axes = tuple(axes)
        hit = self._groups.get(axes)
        if hit is None:
            hit = self._groups[axes] = self._make_comm(axes)
        return hit

    def _make_comm(self, axes):
        axes = _axes(axes)
        group = self.mesh.group(self.rank, axes)
        key = (hash(self.mesh), axes, group[0])
        c = self._comms.get(key)
        if c is None:
            color = 0 if len(group) == self.world.Get_size() else group[0]
            key_in = self.mesh.index_in_group(self.rank, axes)
            c = self._guard(lambda: self.world.Split(color, key_in), "making the communicator of a group",
                            list(range(self.world.Get_size())))
            self._comms[key] = c
        return c, group

    def _guard(self, fn, what, group):
        return guarded(fn, what, group, self.rank, self.timeout, self.loc)

    # -- the collectives -----------------------------------------------------------------
    def all_reduce(self, x, axes, op="sum", out=None):
        given = out
        x = contiguous(x)
        c, group = self.comm(axes)
        if out is not None and not out.flags.c_contiguous:
            out = None
        if self._plan(x, axes, op) != "builtin":
            r = self._gather_reduce(x, axes, op, out)
        else:
            out = POOL.empty(x.shape, x.dtype) if out is None else out
            mop = _op(op, x.dtype)
            fx, fo = x.reshape(-1), out.reshape(-1)
            inplace = np.shares_memory(fx, fo)       # out is x: MPI_IN_PLACE
            for lo, hi in _chunks(fx.size):
                send = mpi_module().IN_PLACE if inplace else mpi_buffer(fx[lo:hi])
                self._guard(lambda: c.Allreduce(send, mpi_buffer(fo[lo:hi]), op=mop), f"all_reduce({op})", group)
            r = out
        if given is not None and r is not given:
            np.copyto(given, r)
            return given
        return r

    def all_reduce_start(self, x, axes, op="sum"):
        x = contiguous(x)
        c, group = self.comm(axes)
        what = f"all_reduce({op})"
        if self._plan(x, axes, op) != "builtin":
            if len(_chunks(x.size)) > 1:          # (beyond MPI's counts: run it now)
                r = self._gather_reduce(x, axes, op)
                return self.put_handle(([], lambda: r, what, group, (x, self.loc)))
            # its rounds run on communicators of this handle's own (transports/mpi/mpi_progress.py)
            slot = self._take_slot(axes)
            started = Started(self._steps(self._comms_of(axes, slot), x, axes, op), _start_call,
                              mpi_module().Request.Testall)
            mode = progress_mode()
            if mode == "thread":
                PROGRESS.add(started)
            if mode != "off":
                self._polled.append(started)
            return self.put_handle((started, (_key(axes), slot), what, group, (x, self.loc)))
        out = POOL.empty(x.shape, x.dtype)
        mop = _op(op, x.dtype)
        fx, fo = x.reshape(-1), out.reshape(-1)
        reqs = [c.Iallreduce(mpi_buffer(fx[lo:hi]), mpi_buffer(fo[lo:hi]), op=mop) for lo, hi in _chunks(fx.size)]
        # the handle keeps x (the send buffer) and out referenced while the call is in flight
        return self.put_handle((reqs, lambda: out, what, group, (x, self.loc)))

    def wait(self, handle):
        first, second, what, group, keep = self.take_handle(handle)
        MPI = mpi_module()
        waitall = lambda reqs: guarded(lambda: MPI.Request.Waitall(reqs), what, group,   # noqa: E731
                                       self.rank, self.timeout, keep[1])
        loc, self.loc = self.loc, keep[1]      # (what the rest of the call waits in is named by it)
        try:
            if isinstance(first, Started):
                PROGRESS.remove(first)
                if first in self._polled:
                    self._polled.remove(first)
                try:
                    return first.finish(waitall)
                finally:
                    self._slots_busy[second[0]].discard(second[1])
            if first:
                waitall(first)
            return second()
        finally:
            self.loc = loc

    def progress(self):
        for started in self._polled:
            if not started.done:
                started.progress()

    # -- all_reduce in group order, or host by host ------------------------------------------
    def _plan(self, x, axes, op):
        """How an all_reduce of x runs: 'hosts' (host by host: a group spanning hosts, L > 1
        members on each), 'group' (every element reduced over the group in group order) or
        'builtin' (MPI's own reduction: integers and bools, exact in any order)."""
        in_order = _in_group_order(op, x.dtype)
        if x.nbytes >= HIERARCHICAL_BYTES and self._hosts(axes) is not None and len(_chunks(x.size)) == 1 \
                and (x.dtype.kind in "biu" or (op in ("sum", "prod") and x.dtype.itemsize > 2
                                               and np.dtype(x.dtype).name not in _HALFS)):
            return "hosts"
        return "group" if in_order else "builtin"

    def _hosts(self, axes):
        """The group's members (their indices in the group) by host, hosts in the order of
        their first member: [[0, 1], [2, 3]]; None unless the group spans several hosts
        with the same number (> 1) of members on each."""
        key = _key(axes)
        if key not in self._host_layouts:
            _, group = self.comm(axes)
            by = {}
            for j, d in enumerate(group):
                by.setdefault(PEERS.get(d, (d,))[0], []).append(j)
            hosts = list(by.values())
            even = len(hosts) > 1 and len({len(h) for h in hosts}) == 1 and len(hosts[0]) > 1
            self._host_layouts[key] = hosts if even else None
        return self._host_layouts[key]

    def _take_slot(self, axes):
        """The lowest slot no started all_reduce over axes holds (every rank takes and
        gives slots in program order, so all agree on it)."""
        busy = self._slots_busy.setdefault(_key(axes), set())
        slot = 1
        while slot in busy:
            slot += 1
        busy.add(slot)
        return slot

    def _comms_of(self, axes, slot):
        """(group communicator, this host's members, this place's members across hosts) of
        a slot: 0 is the group's own communicator (blocking calls, on the rank's thread),
        every other a duplicate of it for one started all_reduce at a time. The last two
        are None unless the group spans hosts (_hosts)."""
        key = (_key(axes), slot)
        got = self._slot_comms.get(key)
        if got is None:
            c, group = self.comm(axes)
            if slot:
                c = self._guard(c.Dup, "making the communicator of a started all_reduce", group)
            local = across = None
            hosts = self._hosts(axes)
            if hosts is not None:
                i = self.mesh.index_in_group(self.rank, _axes(axes))
                h = next(n for n, members in enumerate(hosts) if i in members)
                place = hosts[h].index(i)
                local = self._guard(lambda: c.Split(h, place), "making the communicators of a host", group)
                across = self._guard(lambda: c.Split(place, h), "making the communicators of a host", group)
            got = self._slot_comms[key] = (c, local, across)
        return got

    def _gather_reduce(self, x, axes, op, out=None):
        """op over the group's x (into out, which may be x), with blocking calls."""
        _, group = self.comm(axes)
        what = f"all_reduce({op})"
        call = lambda comm, name, send, recv: self._guard(   # noqa: E731
            lambda: getattr(comm, name)(mpi_buffer(send), mpi_buffer(recv)), what, group)
        comms = self._comms_of(axes, 0)
        if out is None:
            out = POOL.empty(x.shape, x.dtype)
        fx, fo = x.reshape(-1), out.reshape(-1)
        for lo, hi in _chunks(fx.size):
            run_blocking(self._steps(comms, fx[lo:hi], axes, op, fo[lo:hi]), call)
        return out

    def _steps(self, comms, x, axes, op, out=None):
        """The rounds of an all_reduce (transports/mpi/mpi_progress.py), into out (which may
        be x; a new array if None)."""
        if self._plan(x, axes, op) == "hosts":
            return hierarchical_steps(comms, x, op, self._hosts(axes), out)
        return group_order_steps(comms[0], x, op, len(self.comm(axes)[1]), out)

    def all_gather(self, x, axes, dim=0, out=None):
        x = contiguous(x)
        c, group = self.comm(axes)
        G = len(group)
        given = out
        if given is not None and dim == 0 and given.flags.c_contiguous and x.size <= MAX_COUNT:
            # (G, n, ...) laid out row-major is the concatenation along dim 0: straight into out
            self._guard(lambda: c.Allgather(mpi_buffer(x), mpi_buffer(given)), "all_gather", group)
            return given
        out = POOL.empty((G,) + x.shape, x.dtype)
        if x.size <= MAX_COUNT:
            self._guard(lambda: c.Allgather(mpi_buffer(x), mpi_buffer(out)), "all_gather", group)
        else:                      # each member's x in chunks, gathered into its row
            fx, fo = x.reshape(-1), out.reshape(G, -1)
            for lo, hi in _chunks(fx.size):
                part = np.empty((G, hi - lo), x.dtype)
                self._guard(lambda: c.Allgather(mpi_buffer(fx[lo:hi]), mpi_buffer(part)), "all_gather", group)
                fo[:, lo:hi] = part
        if dim == 0:               # (G, n, ...) is already the concatenation along dim 0
            return into(given, out.reshape((G * x.shape[0],) + x.shape[1:]))
        return into(given, _concatenate(out, dim))

    def reduce_scatter(self, x, axes, dim=0, op="sum", out=None):
        c, group = self.comm(axes)
        G = len(group)
        blocks = _blocks("reduce_scatter", x, G, dim)
        given = out if out is not None and out.flags.c_contiguous else None
        if _in_group_order(op, blocks.dtype):
            got = self.all_to_all(blocks, axes, 0, 0).reshape(blocks.shape)   # row j: member j's block i
            r = reduce_arrays(op, list(got), out=given if given is not None else
                              POOL.empty(blocks.shape[1:], blocks.dtype))
            return into(out, r)
        if given is not None and given.size > MAX_COUNT:
            given = None
        if given is not None:      # each member's block i, reduced, straight into out
            mop = _op(op, blocks.dtype)
            self._guard(lambda: c.Reduce_scatter_block(mpi_buffer(blocks), mpi_buffer(given), op=mop),
                        f"reduce_scatter({op})", group)
            return given
        r = self._reduce_scatter(blocks, c, group, G, op)
        return into(out, r)

    def _reduce_scatter(self, blocks, c, group, G, op):
        out = POOL.empty(blocks.shape[1:], blocks.dtype)
        mop = _op(op, blocks.dtype)
        if out.size <= MAX_COUNT:
            self._guard(lambda: c.Reduce_scatter_block(mpi_buffer(blocks), mpi_buffer(out), op=mop),
                        f"reduce_scatter({op})", group)
            return out
        fb, fo = blocks.reshape(G, -1), out.reshape(-1)
        for lo, hi in _chunks(fo.size):    # the same element range of every block
            part = np.ascontiguousarray(fb[:, lo:hi])
            self._guard(lambda: c.Reduce_scatter_block(mpi_buffer(part), mpi_buffer(fo[lo:hi]), op=mop),
                        f"reduce_scatter({op})", group)
        return out

    def all_to_all(self, x, axes, split_dim, concat_dim, out=None):
        c, group = self.comm(axes)
        G = len(group)
        send = _blocks("all_to_all", x, G, split_dim)
        direct = out is not None and concat_dim == 0 and out.flags.c_contiguous
        # (along dim 0 the received (G, *block) buffer is the concatenation: out itself)
        recv = out.reshape(send.shape) if direct else POOL.empty(send.shape, send.dtype)
        if send[0].size <= MAX_COUNT:
            self._guard(lambda: c.Alltoall(mpi_buffer(send), mpi_buffer(recv)), "all_to_all", group)
        else:
            fs, fr = send.reshape(G, -1), recv.reshape(G, -1)
            for lo, hi in _chunks(fs.shape[1]):
                part, got = np.ascontiguousarray(fs[:, lo:hi]), np.empty((G, hi - lo), send.dtype)
                self._guard(lambda: c.Alltoall(mpi_buffer(part), mpi_buffer(got)), "all_to_all", group)
                fr[:, lo:hi] = got
        if direct:
            return out
        if concat_dim == 0:
            return into(out, recv.reshape((G * recv.shape[1],) + recv.shape[2:]))
        return into(out, _concatenate(recv, concat_dim))

    def permute(self, x, axes, pairs):
        x = contiguous(x)
        c, group = self.comm(axes)
        me = c.Get_rank()
        out = np.zeros_like(x)
        fx, fo = x.reshape(-1), out.reshape(-1)
        reqs = []
        for s, d in pairs:
            if s == me and d == me:
                out[...] = x
            elif s == me:
                reqs += [c.Isend(mpi_buffer(fx[lo:hi]), dest=d, tag=17) for lo, hi in _chunks(fx.size)]
            elif d == me:
                reqs += [c.Irecv(mpi_buffer(fo[lo:hi]), source=s, tag=17) for lo, hi in _chunks(fo.size)]
        if reqs:
            MPI = mpi_module()
            self._guard(lambda: MPI.Request.Waitall(reqs), "collective_permute", group)
        return out

    def broadcast(self, x, axes, root=0):
        x = np.asarray(x)
        out = POOL.empty(x.shape, x.dtype)
        out[...] = x
        x = out
        c, group = self.comm(axes)
        flat = x.reshape(-1)
        for lo, hi in _chunks(flat.size):
            self._guard(lambda: c.Bcast(mpi_buffer(flat[lo:hi]), root=root), "broadcast", group)
        return x

    def barrier(self, axes=None):
        if axes is None:
            c, group = self.world, list(range(self.world.Get_size()))
        else:
            c, group = self.comm(axes)
        self._guard(c.Barrier, "barrier", group)
