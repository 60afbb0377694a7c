"""LocalCommunicator: the N ranks are threads of this process; collectives go through
shared memory.

One `LocalWorld` per run of a program holds what the ranks share: one `Group` per
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
  the missing rank(s) after that many seconds (communicator.collective_timeout());
- every rank still running waiting in a rendezvous (none left to arrive: a deadlock) is
  seen by the runtime, which aborts the world with an error naming each rank's wait
  (`world.deadlocked`, LocalRuntime's DEADLOCK_SECONDS).

Started all-reduces (`all_reduce_start` / `wait`) use the same group object but not its
rendezvous: the k-th start of a group (every rank starts them in the same order) is a
`Flight` of its own, so any collectives may run between a start and its wait. The
start deposits (input, fresh output buffer) and returns without waiting; the wait waits
until every member deposited, then reduces as all_reduce does (block i into every
member's output, or, small, the whole array), and, for a large input, waits until every
member has finished reading the inputs before it returns. The waits fail as the
rendezvous do (a rank failed or finished without starting it, or the stopwatch).

Native collectives (backends/native_exchange.py, the interface; backends/llvm/exchange.py,
the instructions): a group also holds a *board*, zeroed int64 memory its members' native
code publishes send buffers and counts in, and the world holds cells that native waits
read: [0] a rank failed (abort), then one per rank, set when its program returned
(finish); a group also keeps, per schedule and key, the memory a native collective's
members share (post counts and mailboxes: backends/llvm/exchange_reduce.py). The
communicator's `native_exchange` (local_native_exchange.py) hands the native code their
addresses and this rank's status cells, where it records why it stopped; its `failure`
raises the CollectiveError the rendezvous would have raised.

More ranks than cores: a rank waiting natively for a rank that has no core spins and
yields until the scheduler runs the other (under load, another process's time slice), so
a stencil's sweep, a handful of microseconds of work, took tens. The world then gives
the ranks *hosts*, one per core (`local_cores()`), each a contiguous run of ranks: a
native segment of a host's ranks runs on one thread, the last of them to arrive, all
ranks in lockstep (native.py spmd_run_multi: instruction i of each before instruction
i + 1 of any, so a message between them is posted before it is read), while the others
sleep until it is done. Ranks of different hosts exchange as before, each host on a core.
A program whose kernels are all small (backends/llvm/schedule.py SMALL_WORK: a 128^2 cavity sweep on
2x2) runs its segments on one host of every rank instead: its exchanges then never wait
for another thread, which costs more than its work. A host's wait fails as a rendezvous
does (a rank failed, finished without arriving, the timeout); the hosted segments of
the ranks must be the same (the same program), or it raises.

The MPI and Ray communicators implement the same methods with the same semantics
(communicator.py); the collective-matching check and the failure messages are worth mirroring.
"""
from __future__ import annotations

import threading
import time

import numpy as np

from ...errors import CollectiveError
from ..collective_args import axes_of
from ..communicator import Communicator, block_of, collective_timeout, describe, reduce_arrays
from ...runtime.cores import local_cores
from .local_native_exchange import LocalNativeExchange
from .local_rendezvous import EMPTY, Flight, Group, Host

# inputs up to this size are copied into the exchange, which saves the second rendezvous
SMALL_BYTES = 1 << 16


class LocalWorld:
    """What the ranks of one run share."""

    def __init__(self, mesh, timeout=None):
        self.mesh = mesh
        self.timeout = collective_timeout() if timeout is None else float(timeout)
        self._lock = threading.Lock()
        self.lock = threading.Lock()      # the groups' shared memory (LocalNativeExchange.shared)
        self._groups = {}
        self.failed = None            # (rank, exception) of the first rank that failed
        self.finished = set()         # ranks whose program has returned
        self.waits = {}               # rank -> (what, since when) while it waits in a rendezvous
        # the ranks run one after another on the caller's thread (LocalRuntime, a program
        # that exchanges nothing): a rendezvous that would wait raises instead (it never
        # completes), and the failed cell is set so a native wait stops at once
        self.solo = False
        # what native waits read (module docstring): failed, then finished per rank
        self.cells = np.zeros(1 + mesh.size, np.int64)
        self._comms = {}
        # rank -> the Host running its native segments, when the ranks are more than the cores
        self.host_of = {}
        self.host_all = None          # one host of every rank: a small program's segments
        cores = local_cores()
        if mesh.size > cores:
            ranks = sorted(int(d) for d in np.asarray(mesh.devices).ravel())
            self.host_all = Host(tuple(ranks), self)
            for c in range(cores):
                members = tuple(ranks[c * len(ranks) // cores:(c + 1) * len(ranks) // cores])
                host = Host(members, self)
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
        self.waits = {}
        self.solo = False
        self.cells[:] = 0
        for g in self._groups.values():
            g.board[:] = 0
            # the ranks count their starts from 0 again: a flight a run left (a start no
            # one finished) would be taken for the next run's first, and never complete
            g.flights.clear()
        for c in self._comms.values():
            c.reset()

    def run_solo(self):
        """This run's ranks go one after another on one thread (the `solo` attribute)."""
        self.solo = True
        self.cells[0] = 1

    def deadlocked(self, ranks, seconds) -> dict:
        """{rank: what it waits in} where each of `ranks` (those still running) has waited
        in a rendezvous for over `seconds`: a rendezvous completes only when a rank arrives,
        and none is left to arrive (a deadlock); else {}. A rank in native code or
        computing is not waiting here, so a long computation is never taken for one."""
        now, waits = time.monotonic(), dict(self.waits)
        if ranks and all(r in waits and now - waits[r][1] > seconds for r in ranks):
            return {r: waits[r][0] for r in sorted(ranks)}
        return {}

    def group(self, devices: tuple) -> "Group":
        with self._lock:
            g = self._groups.get(devices)
            if g is None:
                g = self._groups[devices] = Group(devices, self)
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
            # ranks run one after another: no other thread waits to be woken
            groups = [] if self.solo else self._waited_on()
        for g in groups:
            g.wake()




class LocalCommunicator(Communicator):
    def __init__(self, mesh, rank, world: LocalWorld):
        super().__init__(mesh, rank)
        self.ranks_in_process = mesh.size
        self.world = world
        self._cache = {}
        self._starts = {}            # group devices -> how many all_reduce_start this rank made on it
        # the memory and hosts its native collectives use (backends/native_exchange.py)
        self.native_exchange = LocalNativeExchange(self)

    # -- the rendezvous ------------------------------------------------------------------
    def group_of(self, axes):
        """(axes, devices of the group, this rank's index, the shared Group), memoised."""
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
        axes, devices, i, grp = self.group_of(axes)
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

    def reset(self):
        """Ready for another run (LocalWorld.reset)."""
        self.native_exchange.status[:] = 0
        self._starts = {}

    # -- the collectives (arguments checked by Communicator) ---------------------------------
    def _all_reduce(self, x, axes, op, out):
        given = out
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

    def _all_reduce_start(self, x, axes, op):
        axes, devices, i, grp = self.group_of(axes)
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
            grp.check_failed(i, what)
            f = grp.flights.get(seq)
            if f is None:
                f = grp.flights[seq] = Flight(G)
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
                           lambda: [devices[j] for j in range(G) if f.slots[j] is EMPTY])
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

    def _all_gather(self, x, axes, dim, out):
        return self._collective("all_gather", x, axes, (dim,),
                                lambda xs, _, i, G: np.concatenate(xs, axis=dim, out=out))

    def _reduce_scatter(self, x, axes, dim, op, out):
        return self._collective("reduce_scatter", x, axes, (dim, op),
                                lambda xs, _, i, G: reduce_arrays(op, [block_of(a, dim, i, G) for a in xs], out=out))

    def _all_to_all(self, x, axes, split_dim, concat_dim, out):
        return self._collective("all_to_all", x, axes, (split_dim, concat_dim),
                                lambda xs, _, i, G: np.concatenate([block_of(a, split_dim, i, G) for a in xs],
                                                                   axis=concat_dim, out=out))

    def _permute(self, x, axes, pairs):
        src_of = {d: s for s, d in pairs}

        def compute(xs, _, i, G):
            s = src_of.get(i)
            return np.zeros_like(xs[i]) if s is None else xs[s].copy()

        return self._collective("permute", x, axes, (pairs,), compute)

    def _broadcast(self, x, axes, root):
        return self._collective("broadcast", x, axes, (root,), lambda xs, _, i, G: xs[root].copy())

    def _barrier(self, axes):
        axes = self.mesh.axis_names if axes is None else axes
        self._collective("barrier", np.zeros(0), axes, (), lambda xs, _, i, G: None)
