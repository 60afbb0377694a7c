"""LocalCommunicator: the N ranks are threads of this process; collectives go through
shared memory.

One `LocalWorld` per run of a program holds what the ranks share: one `_Group` per
device group (the devices of a mesh-axis group, in group order), an abort flag, and
the set of ranks whose program has returned. Each rank gets a `LocalCommunicator`
(`world.communicator(rank)`).

A collective is two rendezvous on its group:

1. *deposit*: each rank puts its input (and, for all_reduce, its fresh output buffer)
   in its slot and waits until all G have; the last to arrive releases the others.
2. each rank computes its own result from the deposited inputs, reading them in group
   order, so every rank's result is bit-identical and independent of thread timing.
   (all_reduce: rank i reduces block i of the flattened inputs and writes it into every
   rank's output buffer — the reduce-scatter + all-gather schedule, each element
   reduced once.)
3. *done*: each rank waits until all G have finished reading, then returns. Only then
   may a rank reuse or free its input buffer, so inputs are never copied on the way in.
   Small inputs (<= SMALL_BYTES) are copied into the exchange instead, which makes the
   done-rendezvous unnecessary (latency matters more than bytes there), and all_reduce
   of a small input reduces the whole array on every rank (still in group order).

Results are always new arrays owned by the caller. Every rank first checks that the
group agrees on what it is doing (same collective, shapes, dtype, attributes) and
raises CollectiveError naming the ranks that differ.

Failure, never a hang:
- `world.abort(rank, exc)` (the runtime calls it when a rank's program raises) wakes
  every waiting rank, which raises CollectiveError naming the failed rank;
- `world.finish(rank)` (the rank's program returned) makes ranks waiting for it in a
  collective fail at once: it skipped a collective the others called;
- a rank that is still computing is waited for (threads of this process cannot die
  silently); with SPMD_COLLECTIVE_TIMEOUT set, the waiters raise CollectiveError naming
  the missing rank(s) after that many seconds (base.collective_timeout()).

Started all-reduces (`all_reduce_start` / `wait`) use the same group object but not its
rendezvous: the k-th start of a group (every rank starts them in the same order) is a
`_Flight` of its own, so any collectives may run between a start and its wait. The
start deposits (input, fresh output buffer) and returns without waiting; the wait waits
until every member deposited, then reduces as all_reduce does (block i into every
member's output, or, small, the whole array), and, for a large input, waits until every
member has finished reading the inputs before it returns. The waits fail as the
rendezvous do (a rank failed or finished without starting it, or the stopwatch).

Native collectives (backends/llvm/exchange.py): a group also holds a *board*, zeroed
int64 memory its members' native code publishes send buffers and counts in, and the
world holds cells that native waits read: [0] a rank failed (abort), then one per rank,
set when its program returned (finish). A rank's native code records why it stopped in
its `native_status` ([why, group index of the peer, op id]: 1 a rank failed, 2 the peer
finished, 3 the timeout); `native_failure` raises the CollectiveError the rendezvous
would have raised.

More ranks than cores: a rank waiting natively for a rank that has no core spins and
yields until the scheduler runs the other (under load, another process's time slice), so
a stencil's sweep, a handful of microseconds of work, took tens. The world then gives
the ranks *hosts*, one per core (`local_cores()`), each a contiguous run of ranks: a
native segment of a host's ranks runs on one thread, the last of them to arrive, all
ranks in lockstep (native.py spmd_run_multi: instruction i of each before instruction
i + 1 of any, so a message between them is posted before it is read), while the others
sleep until it is done. Ranks of different hosts exchange as before, each host on a core.
A program whose kernels are all small (schedule.py SMALL_WORK: a 128^2 cavity sweep on
2x2) runs its segments on one host of every rank instead: its exchanges then never wait
for another thread, which costs more than its work. A host's wait fails as a rendezvous
does (a rank failed, finished without arriving, the timeout); the hosted segments of
the ranks must be the same (the same program), or it raises.

The MPI and Ray communicators implement the same methods with the same semantics
(base.py); the collective-matching check and the failure messages are worth mirroring.
"""
from __future__ import annotations

import os
import threading
import time

import numpy as np

from ...errors import CollectiveError
from ..communicator import (Communicator, as_input, axes_of, block_of, check_dim, check_op, collective_timeout,
                   describe, reduce_arrays)

_EMPTY = object()

# inputs up to this size are copied into the exchange, which saves the second rendezvous
SMALL_BYTES = 1 << 16


def local_cores() -> int:
    """The cores the local runtime's ranks share: SPMD_LOCAL_CORES, else the cores this
    process may run on."""
    v = os.environ.get("SPMD_LOCAL_CORES", "").strip()
    if v:
        return max(1, int(v))
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


class LocalWorld:
    """What the ranks of one run share."""

    def __init__(self, mesh, timeout=None):
        self.mesh = mesh
        self.timeout = collective_timeout() if timeout is None else float(timeout)
        self._lock = threading.Lock()
        self._groups = {}
        self.failed = None            # (rank, exception) of the first rank that failed
        self.finished = set()         # ranks whose program has returned
        # what native waits read (module docstring): failed, then finished per rank
        self.cells = np.zeros(1 + mesh.size, np.int64)
        self._comms = {}
        # rank -> the _Host running its native segments, when the ranks are more than the cores
        self.host_of = {}
        self.host_all = None          # one host of every rank: a small program's segments
        cores = local_cores()
        if mesh.size > cores:
            ranks = sorted(int(d) for d in np.asarray(mesh.devices).ravel())
            self.host_all = _Host(tuple(ranks), self)
            for c in range(cores):
                members = tuple(ranks[c * len(ranks) // cores:(c + 1) * len(ranks) // cores])
                host = _Host(members, self)
                self.host_of.update((r, host) for r in members)

    def communicator(self, rank) -> "LocalCommunicator":
        c = self._comms.get(rank)
        if c is None:
            c = self._comms[rank] = LocalCommunicator(self.mesh, rank, self)
        return c

    def reset(self):
        """Ready for another run, after one in which every rank returned and none failed:
        the same groups, hosts and communicators (what a rank's native code was given stays
        valid), their counts and cells at zero."""
        self.failed = None
        self.finished = set()
        self.cells[:] = 0
        for g in self._groups.values():
            g.board[:] = 0
        for c in self._comms.values():
            c.native_status[:] = 0
            c._starts = {}

    def group(self, devices: tuple) -> "_Group":
        with self._lock:
            g = self._groups.get(devices)
            if g is None:
                g = self._groups[devices] = _Group(devices, self)
            return g

    def abort(self, rank, exc):
        """Rank `rank` failed: wake every waiting rank so it fails too."""
        with self._lock:
            if self.failed is None:
                self.failed = (rank, exc)
            self.cells[0] = 1
            groups = self._waited_on()
        for g in groups:
            g.wake()

    def _waited_on(self) -> list:
        """every group and host ranks may wait in (holding self._lock)"""
        hosts = set(self.host_of.values()) | ({self.host_all} if self.host_all is not None else set())
        return list(self._groups.values()) + list(hosts)

    def finish(self, rank):
        with self._lock:
            self.finished.add(rank)
            if isinstance(rank, int):
                self.cells[1 + rank] = 1
            groups = self._waited_on()
        for g in groups:
            g.wake()


class _Group:
    """A reusable rendezvous of the G devices of one group, carrying one value per rank."""

    def __init__(self, devices, world):
        self.devices = devices
        self.world = world
        self.cond = threading.Condition()
        self.gen = 0                   # completed rendezvous
        self.slots = [_EMPTY] * len(devices)
        self.arrived = 0
        self.result = None             # the slots of the last completed rendezvous
        self.flights = {}              # k -> _Flight: the k-th all_reduce_start of the group
        self.board = np.zeros((len(devices), 8), np.int64)     # native collectives' (exchange.py)

    def wake(self):
        with self.cond:
            self.cond.notify_all()

    def exchange(self, i, value, what):
        """Deposit `value` as member i; return every member's value (group order) once all
        have deposited. The returned list stays valid: the next rendezvous cannot
        complete before this member deposits again."""
        G = len(self.devices)
        with self.cond:
            self._check_failed(i, what)
            gen = self.gen
            self.slots[i] = value
            self.arrived += 1
            if self.arrived == G:
                self.result, self.slots, self.arrived = self.slots, [_EMPTY] * G, 0
                self.gen += 1
                self.cond.notify_all()
                return self.result
            self.wait_until(lambda: self.gen != gen, i, what,
                            lambda: [self.devices[j] for j in range(G) if self.slots[j] is _EMPTY])
            return self.result

    def wait_until(self, ready, i, what, missing):
        """Wait (holding self.cond) until ready() is true, failing as exchange does;
        missing() -> the devices not there yet."""
        w = self.world
        deadline = time.monotonic() + w.timeout
        while not ready():
            self._check_failed(i, what)
            gone = sorted(set(missing()) & w.finished)
            if gone:
                raise CollectiveError(f"{what} on rank {self.devices[i]}: rank(s) {gone} finished the "
                                      f"program without joining it (the ranks ran different programs)")
            left = deadline - time.monotonic()
            if left <= 0:
                raise CollectiveError(f"{what} on rank {self.devices[i]}: timed out after {w.timeout:g} s "
                                      f"waiting for rank(s) {missing()} of group {list(self.devices)} "
                                      f"(SPMD_COLLECTIVE_TIMEOUT)")
            self.cond.wait(min(left, 1.0))

    def _check_failed(self, i, what):
        f = self.world.failed
        if f is not None:
            rank, exc = f
            raise CollectiveError(f"{what} on rank {self.devices[i]}: aborted because rank {rank} failed: "
                                  f"{type(exc).__name__}: {exc}")


class _Host(_Group):
    """Ranks whose native segments run on one thread, in lockstep (the module's docstring)."""

    def __init__(self, ranks, world):
        super().__init__(ranks, world)
        self.pending = {}              # member index -> (segment key, program address, instructions)

    def run(self, i, key, prog, n, run_multi):
        """Member i's segment `key` (program at address `prog`, n instructions): returns once
        it ran, on this thread (the last member to arrive) or another."""
        what = "a native segment"
        with self.cond:
            self._check_failed(i, what)
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


class _Flight:
    """One started all_reduce of a group: what each member deposited, and how many have
    finished reading the deposits."""

    def __init__(self, G):
        self.slots = [_EMPTY] * G
        self.arrived = 0
        self.read = 0


class LocalCommunicator(Communicator):
    def __init__(self, mesh, rank, world: LocalWorld):
        super().__init__(mesh, rank)
        self.ranks_in_process = mesh.size
        self.world = world
        self._cache = {}
        self._starts = {}            # group devices -> how many all_reduce_start this rank made on it
        self.native_status = np.zeros(3, np.int64)      # why this rank's native code stopped
        self._boards = {}

    # -- the rendezvous ------------------------------------------------------------------
    def _group(self, axes):
        """(axes, devices of the group, this rank's index, the shared _Group), memoised."""
        axes = axes_of(axes)
        hit = self._cache.get(axes)
        if hit is None:
            devices = tuple(self.group(axes))
            hit = self._cache[axes] = (axes, devices, devices.index(self.rank),
                                       self.world.group(devices) if len(devices) > 1 else None)
        return hit

    def _collective(self, name, x, axes, attrs, compute, extra=None):
        """Run one collective: deposit (tag, x, extra); compute(inputs, extras, i, G) ->
        this rank's result from the group's inputs; wait until all have computed."""
        axes, devices, i, grp = self._group(axes)
        G = len(devices)
        what = f"{name} over {axes}" + (f" at {self.loc}" if self.loc else "")
        if G == 1:
            return compute([x], [extra], 0, 1)
        tag = (name, x.shape, x.dtype.str, attrs)
        small = x.nbytes <= SMALL_BYTES
        got = grp.exchange(i, (tag, x.copy() if small else x, extra), what)
        differ = [devices[j] for j, (t, _, _) in enumerate(got) if t != tag]
        if differ:
            mine = describe(tag)
            raise CollectiveError(f"{what} on rank {self.rank}: the group does not agree on the call: rank "
                                  f"{self.rank} called {mine}, rank(s) {differ} called "
                                  f"{'; '.join(sorted({describe(got[devices.index(d)][0]) for d in differ}))}")
        out = compute([v for _, v, _ in got], [e for _, _, e in got], i, G)
        if not small:
            grp.exchange(i, None, what + " (done)")
        return out

    # -- native collectives (backends/llvm/exchange.py) -----------------------------------
    @property
    def native_host(self):
        """run(key, program address, instructions, run_multi, small) for this rank's
        native segments when hosts run them (the module's docstring), else None; a small
        program's (`small`) run on the host of every rank."""
        host = self.world.host_of.get(self.rank)
        if host is None:
            return None
        every = self.world.host_all
        i, j = host.devices.index(self.rank), every.devices.index(self.rank)

        def run(key, prog, n, run_multi, small):
            if small:
                return every.run(j, key, prog, n, run_multi)
            return host.run(i, key, prog, n, run_multi)
        return run

    def native_board(self, axes) -> dict:
        """Addresses the native collectives of this rank's group over `axes` use: the
        group's board, this rank's index in it, the world's failed cell, the finished cell
        of a group member (index -> address; a zero cell for None), the timeout in ns and
        this rank's status cells."""
        hit = self._boards.get(axes)
        if hit is not None:
            return hit
        _, devices, i, grp = self._group(axes)
        cells = self.world.cells
        base = cells.ctypes.data
        board = grp.board if grp is not None else np.zeros((1, 8), np.int64)
        zero = np.zeros(1, np.int64)
        t = self.world.timeout
        hit = self._boards[axes] = {
            "board": board.ctypes.data, "index": i, "failed": base,
            "finished": lambda j: zero.ctypes.data if j is None else base + 8 * (1 + devices[j]),
            "timeout_ns": int(min(t, 1e9) * 1e9), "status": self.native_status.ctypes.data,
            "keep": (board, zero)}
        return hit

    def native_failure(self, what, axes):
        """Raise the CollectiveError for why this rank's native collective (`what`, over
        `axes`) stopped."""
        why, peer, _ = (int(v) for v in self.native_status)
        self.native_status[:] = 0
        _, devices, i, grp = self._group(axes)
        rank = devices[peer] if 0 <= peer < len(devices) else peer
        if why == 1 and self.world.failed is not None:
            grp._check_failed(i, what)
        if why == 2:
            raise CollectiveError(f"{what} on rank {self.rank}: rank(s) [{rank}] finished the program without "
                                  f"joining it (the ranks ran different programs)")
        if why == 3:
            raise CollectiveError(f"{what} on rank {self.rank}: timed out after {self.world.timeout:g} s waiting "
                                  f"for rank(s) [{rank}] of group {list(devices)} (SPMD_COLLECTIVE_TIMEOUT)")
        raise CollectiveError(f"{what} on rank {self.rank}: stopped (a rank of the run failed)")

    # -- the collectives -----------------------------------------------------------------
    def all_reduce(self, x, axes, op="sum", out=None):
        given = out
        x = as_input(x)
        check_op(op)
        if x.nbytes <= SMALL_BYTES:
            r = self._collective("all_reduce", x, axes, (op,), lambda xs, _, i, G: reduce_arrays(op, xs))
            if given is not None:       # (the group's inputs were copies: out may be x)
                np.copyto(given, r)
                return given
            return r
        # each rank reduces one block of everyone's x and writes it into everyone's out: a
        # block is read before it is written, by one rank only, so out may be x itself
        out = np.empty_like(x) if out is None or not out.flags.c_contiguous else out

        def compute(xs, outs, i, G):
            flat = [a.reshape(-1) for a in xs]
            n = flat[0].size
            lo, hi = n * i // G, n * (i + 1) // G
            block = reduce_arrays(op, [a[lo:hi] for a in flat])
            for o in outs:
                o.reshape(-1)[lo:hi] = block
            return outs[i]

        r = self._collective("all_reduce", x, axes, (op,), compute, extra=out)
        if given is not None and r is not given:
            np.copyto(given, r)
            return given
        return r

    def all_reduce_start(self, x, axes, op="sum"):
        x = as_input(x)
        check_op(op)
        axes, devices, i, grp = self._group(axes)
        what = f"all_reduce over {axes}" + (f" at {self.loc}" if self.loc else "")
        if grp is None:
            return self.put_handle((None, reduce_arrays(op, [x])))
        seq = self._starts.get(devices, 0)
        self._starts[devices] = seq + 1
        small = x.nbytes <= SMALL_BYTES
        tag = ("all_reduce", x.shape, x.dtype.str, (op,))
        mine = (tag, x.copy() if small else x, None if small else np.empty_like(x))
        G = len(devices)
        with grp.cond:
            grp._check_failed(i, what)
            f = grp.flights.get(seq)
            if f is None:
                f = grp.flights[seq] = _Flight(G)
            f.slots[i] = mine
            f.arrived += 1
            if f.arrived == G:
                grp.cond.notify_all()
        return self.put_handle((grp, (seq, i, devices, f, tag, small, op, what)))

    def wait(self, handle):
        grp, item = self.take_handle(handle)
        if grp is None:
            return item
        seq, i, devices, f, tag, small, op, what = item
        G = len(devices)
        with grp.cond:
            grp.wait_until(lambda: f.arrived == G, i, what,
                           lambda: [devices[j] for j in range(G) if f.slots[j] is _EMPTY])
        got = f.slots
        differ = [devices[j] for j, (t, _, _) in enumerate(got) if t != tag]
        if differ:
            raise CollectiveError(f"{what} on rank {self.rank}: the group does not agree on the call: rank "
                                  f"{self.rank} started {describe(tag)}, rank(s) {differ} started "
                                  f"{'; '.join(sorted({describe(got[devices.index(d)][0]) for d in differ}))}")
        xs = [v for _, v, _ in got]
        if small:
            out = reduce_arrays(op, xs)
        else:
            flat = [a.reshape(-1) for a in xs]
            n = flat[0].size
            lo, hi = n * i // G, n * (i + 1) // G
            block = reduce_arrays(op, [a[lo:hi] for a in flat])
            for _, _, o in got:
                o.reshape(-1)[lo:hi] = block
            out = got[i][2]
        with grp.cond:
            f.read += 1
            if f.read == G:
                del grp.flights[seq]
                grp.cond.notify_all()
            elif not small:      # the others still read this rank's input and write its output
                grp.wait_until(lambda: f.read == G, i, what + " (done)", lambda: [])
        return out

    def all_gather(self, x, axes, dim=0, out=None):
        x = as_input(x)
        check_dim("all_gather", x, dim)
        return self._collective("all_gather", x, axes, (dim,),
                                lambda xs, _, i, G: np.concatenate(xs, axis=dim, out=out))

    def reduce_scatter(self, x, axes, dim=0, op="sum", out=None):
        x = as_input(x)
        check_op(op)
        G = self.mesh.axes_size(axes_of(axes))
        check_dim("reduce_scatter", x, dim, G)
        return self._collective("reduce_scatter", x, axes, (dim, op),
                                lambda xs, _, i, G: reduce_arrays(op, [block_of(a, dim, i, G) for a in xs], out=out))

    def all_to_all(self, x, axes, split_dim, concat_dim, out=None):
        x = as_input(x)
        G = self.mesh.axes_size(axes_of(axes))
        check_dim("all_to_all", x, split_dim, G)
        check_dim("all_to_all", x, concat_dim)
        return self._collective("all_to_all", x, axes, (split_dim, concat_dim),
                                lambda xs, _, i, G: np.concatenate([block_of(a, split_dim, i, G) for a in xs],
                                                                   axis=concat_dim, out=out))

    def permute(self, x, axes, pairs):
        x = as_input(x)
        G = self.mesh.axes_size(axes_of(axes))
        pairs = tuple(sorted((int(s), int(d)) for s, d in pairs))
        dsts = [d for _, d in pairs]
        if any(not (0 <= k < G) for p in pairs for k in p) or len(set(dsts)) != len(dsts):
            raise CollectiveError(f"permute over {axes_of(axes)}: pairs {pairs} must be (src, dst) group indices "
                                  f"in [0, {G}) naming each dst at most once")
        src_of = {d: s for s, d in pairs}

        def compute(xs, _, i, G):
            s = src_of.get(i)
            return np.zeros_like(xs[i]) if s is None else xs[s].copy()

        return self._collective("permute", x, axes, (pairs,), compute)

    def broadcast(self, x, axes, root=0):
        x = as_input(x)
        G = self.mesh.axes_size(axes_of(axes))
        if not 0 <= root < G:
            raise CollectiveError(f"broadcast over {axes_of(axes)}: root {root} is not a group index in [0, {G})")
        return self._collective("broadcast", x, axes, (root,), lambda xs, _, i, G: xs[root].copy())

    def barrier(self, axes=None):
        axes = self.mesh.axis_names if axes is None else axes_of(axes)
        self._collective("barrier", np.zeros(0), axes, (), lambda xs, _, i, G: None)


# -- helpers ---------------------------------------------------------------------------------
