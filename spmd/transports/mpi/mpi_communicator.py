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
thread instead (mpi_watchdog.py, mpi_heartbeat.py): a call that can no longer complete —
a peer's process gone, its heartbeats silent, the peer finished, or mpiexec's notice
of a death — prints which collective, at which user line, over which ranks and what
the others are doing, with this rank's stack, and aborts the world; a busy peer is
waited for (SPMD_COLLECTIVE_TIMEOUT adds a stopwatch only when set). Under MPI a rank
cannot leave a broken collective and carry on, so aborting is what raising would
lead to anyway (transports/mpi/mpi_runtime.py aborts on any uncaught exception).

Reductions of floats (sum, prod, max, min; every float dtype) do not use MPI's built-in
operations: each element is reduced over the group in group order by communicator.reduce_arrays,
as the local and Ray communicators do, so a sum has the same bits on every run and on
every backend (MPI_SUM adds in the order of whichever algorithm MPICH picks for the
size, and another one in its nonblocking version). The data moves as in MPI's own
schedule for large messages: an Alltoall gives rank i block i of every input, it reduces
the block, and an Allgather of the blocks completes the all_reduce (up to mpi_all_reduce.GATHER_BYTES
gathered, and between two members up to PAIR_GATHER_BYTES: one Allgather, every rank
reducing all of it). Integer and bool reductions,
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
(`all_reduce_start` / `wait`, the halves passes/schedule_async.py makes so that the backward
pass overlaps the gradient reductions) makes them nonblocking, on communicators of its
own, and it moves from round to round while the rank computes: the executables call
`progress` between the program's steps (MPICH progresses a nonblocking collective only
inside MPI calls, and the local reduction between rounds needs somebody to run it);
`wait` finishes what is left under the same watchdog as a blocking call.
When the ranks run on several hosts a thread of spmd's own tests them too
(SPMD_MPI_PROGRESS=poll | thread | off; transports/mpi/mpi_progress.py).

Messages over MPI's count limit (mpi_library.MAX_COUNT = 2**31-1 elements per count
argument) are sent in chunks. Results are new arrays; the semantics are those of transports/communicator.py
and the LocalCommunicator, bit for bit.
"""
from __future__ import annotations

import numpy as np

from ..communicator import Communicator, collective_timeout, into, reduce_arrays
from . import mpi_library
from .mpi_all_reduce import HIERARCHICAL_BYTES, group_order_steps, hierarchical_steps, in_group_order
from .mpi_library import HALFS, POOL, chunks, contiguous, mpi_buffer, mpi_module
from .mpi_peers import PEERS
from .mpi_progress import PROGRESS, Started, progress_mode, run_blocking, start_call
from .mpi_watchdog import guarded


def _axes(axes):
    return (axes,) if isinstance(axes, str) else tuple(axes)


def _key(axes):
    """axes as a dictionary key (a name, or a tuple of names)."""
    return axes if isinstance(axes, (str, tuple)) else tuple(axes)


def _op(op, dtype):
    MPI = mpi_module()
    if dtype == np.bool_:
        return MPI.LOR if op in ("sum", "max") else MPI.LAND
    return {"sum": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN, "prod": MPI.PROD}[op]


def _blocks(x, G, dim):
    """x split in G equal blocks along dim, as one contiguous (G, *block) buffer; along
    dim 0 that is x itself, reshaped."""
    if dim == 0:
        return contiguous(x).reshape((G, x.shape[0] // G) + x.shape[1:])
    parts = np.split(x, G, axis=dim)
    return np.stack(parts, out=POOL.empty((G,) + parts[0].shape, x.dtype))


def _concatenate(parts, dim):
    """np.concatenate(list(parts), axis=dim) into a pooled buffer."""
    shape = list(parts.shape[1:])
    shape[dim] *= parts.shape[0]
    return np.concatenate(list(parts), axis=dim, out=POOL.empty(tuple(shape), parts.dtype))


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
    # -- the collectives (arguments checked by Communicator) ---------------------------------
    def _all_reduce(self, x, axes, op, out):
        given = out
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
            for lo, hi in chunks(fx.size):
                send = mpi_module().IN_PLACE if inplace else mpi_buffer(fx[lo:hi])
                self._guard(lambda: c.Allreduce(send, mpi_buffer(fo[lo:hi]), op=mop), f"all_reduce({op})", group)
            r = out
        if given is not None and r is not given:
            np.copyto(given, r)
            return given
        return r

    def _all_reduce_start(self, x, axes, op):
        c, group = self.comm(axes)
        what = f"all_reduce({op})"
        if self._plan(x, axes, op) != "builtin":
            if len(chunks(x.size)) > 1:          # (beyond MPI's counts: run it now)
                r = self._gather_reduce(x, axes, op)
                return self.put_handle(([], lambda: r, what, group, (x, self.loc)))
            # its rounds run on communicators of this handle's own (transports/mpi/mpi_progress.py)
            slot = self._take_slot(axes)
            started = Started(self._steps(self._comms_of(axes, slot), x, axes, op), start_call,
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
        reqs = [c.Iallreduce(mpi_buffer(fx[lo:hi]), mpi_buffer(fo[lo:hi]), op=mop) for lo, hi in chunks(fx.size)]
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
        in_order = in_group_order(op, x.dtype)
        if x.nbytes >= HIERARCHICAL_BYTES and self._hosts(axes) is not None and len(chunks(x.size)) == 1 \
                and (x.dtype.kind in "biu" or (op in ("sum", "prod") and x.dtype.itemsize > 2
                                               and np.dtype(x.dtype).name not in HALFS)):
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
        for lo, hi in chunks(fx.size):
            run_blocking(self._steps(comms, fx[lo:hi], axes, op, fo[lo:hi]), call)
        return out

    def _steps(self, comms, x, axes, op, out=None):
        """The rounds of an all_reduce (transports/mpi/mpi_progress.py), into out (which may
        be x; a new array if None)."""
        if self._plan(x, axes, op) == "hosts":
            return hierarchical_steps(comms, x, op, self._hosts(axes), out)
        return group_order_steps(comms[0], x, op, len(self.comm(axes)[1]), out)

    def _all_gather(self, x, axes, dim, out):
        c, group = self.comm(axes)
        G = len(group)
        given = out
        if given is not None and dim == 0 and given.flags.c_contiguous and x.size <= mpi_library.MAX_COUNT:
            # (G, n, ...) laid out row-major is the concatenation along dim 0: straight into out
            self._guard(lambda: c.Allgather(mpi_buffer(x), mpi_buffer(given)), "all_gather", group)
            return given
        out = POOL.empty((G,) + x.shape, x.dtype)
        if x.size <= mpi_library.MAX_COUNT:
            self._guard(lambda: c.Allgather(mpi_buffer(x), mpi_buffer(out)), "all_gather", group)
        else:                      # each member's x in chunks, gathered into its row
            fx, fo = x.reshape(-1), out.reshape(G, -1)
            for lo, hi in chunks(fx.size):
                part = np.empty((G, hi - lo), x.dtype)
                self._guard(lambda: c.Allgather(mpi_buffer(fx[lo:hi]), mpi_buffer(part)), "all_gather", group)
                fo[:, lo:hi] = part
        if dim == 0:               # (G, n, ...) is already the concatenation along dim 0
            return into(given, out.reshape((G * x.shape[0],) + x.shape[1:]))
        return into(given, _concatenate(out, dim))

    def _reduce_scatter(self, x, axes, dim, op, out):
        c, group = self.comm(axes)
        G = len(group)
        blocks = _blocks(x, G, dim)
        given = out if out is not None and out.flags.c_contiguous else None
        if in_group_order(op, blocks.dtype):
            got = self._all_to_all(blocks, axes, 0, 0, None).reshape(blocks.shape)   # row j: member j's block i
            r = reduce_arrays(op, list(got), out=given if given is not None else
                              POOL.empty(blocks.shape[1:], blocks.dtype))
            return into(out, r)
        if given is not None and given.size > mpi_library.MAX_COUNT:
            given = None
        if given is not None:      # each member's block i, reduced, straight into out
            mop = _op(op, blocks.dtype)
            self._guard(lambda: c.Reduce_scatter_block(mpi_buffer(blocks), mpi_buffer(given), op=mop),
                        f"reduce_scatter({op})", group)
            return given
        r = self._reduce_scatter_builtin(blocks, c, group, G, op)
        return into(out, r)

    def _reduce_scatter_builtin(self, blocks, c, group, G, op):
        out = POOL.empty(blocks.shape[1:], blocks.dtype)
        mop = _op(op, blocks.dtype)
        if out.size <= mpi_library.MAX_COUNT:
            self._guard(lambda: c.Reduce_scatter_block(mpi_buffer(blocks), mpi_buffer(out), op=mop),
                        f"reduce_scatter({op})", group)
            return out
        fb, fo = blocks.reshape(G, -1), out.reshape(-1)
        for lo, hi in chunks(fo.size):    # the same element range of every block
            part = np.ascontiguousarray(fb[:, lo:hi])
            self._guard(lambda: c.Reduce_scatter_block(mpi_buffer(part), mpi_buffer(fo[lo:hi]), op=mop),
                        f"reduce_scatter({op})", group)
        return out

    def _all_to_all(self, x, axes, split_dim, concat_dim, out):
        c, group = self.comm(axes)
        G = len(group)
        send = _blocks(x, G, split_dim)
        direct = out is not None and concat_dim == 0 and out.flags.c_contiguous
        # (along dim 0 the received (G, *block) buffer is the concatenation: out itself)
        recv = out.reshape(send.shape) if direct else POOL.empty(send.shape, send.dtype)
        if send[0].size <= mpi_library.MAX_COUNT:
            self._guard(lambda: c.Alltoall(mpi_buffer(send), mpi_buffer(recv)), "all_to_all", group)
        else:
            fs, fr = send.reshape(G, -1), recv.reshape(G, -1)
            for lo, hi in chunks(fs.shape[1]):
                part, got = np.ascontiguousarray(fs[:, lo:hi]), np.empty((G, hi - lo), send.dtype)
                self._guard(lambda: c.Alltoall(mpi_buffer(part), mpi_buffer(got)), "all_to_all", group)
                fr[:, lo:hi] = got
        if direct:
            return out
        if concat_dim == 0:
            return into(out, recv.reshape((G * recv.shape[1],) + recv.shape[2:]))
        return into(out, _concatenate(recv, concat_dim))

    def _permute(self, x, axes, pairs):
        c, group = self.comm(axes)
        me = c.Get_rank()
        out = np.zeros_like(x)
        fx, fo = x.reshape(-1), out.reshape(-1)
        reqs = []
        for s, d in pairs:
            if s == me and d == me:
                out[...] = x
            elif s == me:
                reqs += [c.Isend(mpi_buffer(fx[lo:hi]), dest=d, tag=17) for lo, hi in chunks(fx.size)]
            elif d == me:
                reqs += [c.Irecv(mpi_buffer(fo[lo:hi]), source=s, tag=17) for lo, hi in chunks(fo.size)]
        if reqs:
            MPI = mpi_module()
            self._guard(lambda: MPI.Request.Waitall(reqs), "collective_permute", group)
        return out

    def _broadcast(self, x, axes, root):
        out = POOL.empty(x.shape, x.dtype)
        out[...] = x
        x = out
        c, group = self.comm(axes)
        flat = x.reshape(-1)
        for lo, hi in chunks(flat.size):
            self._guard(lambda: c.Bcast(mpi_buffer(flat[lo:hi]), root=root), "broadcast", group)
        return x

    def _barrier(self, axes):
        if axes is None:
            c, group = self.world, list(range(self.world.Get_size()))
        else:
            c, group = self.comm(axes)
        self._guard(c.Barrier, "barrier", group)
