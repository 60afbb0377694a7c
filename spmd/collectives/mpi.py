"""MPICommunicator: one process per rank; collectives through mpi4py's buffer
(upper-case) API on contiguous numpy buffers — no pickling on the data path.

A mesh-axis group is an MPI sub-communicator made once with `Split` (color: the
group's first device, key: this rank's index in the group) and cached, so a
collective over ("data",) on a 2x2 mesh runs on a 2-rank communicator.

Every collective is nonblocking (Iallreduce, Iallgather, ...) and waited on with a
deadline (SPMD_COLLECTIVE_TIMEOUT): a peer that died or hangs makes this rank raise
CollectiveError naming the group's ranks within the timeout instead of hanging.
Messages over MPI's count limit (2**31-1 elements) are sent in chunks.
The semantics match collectives/base.py and the LocalCommunicator exactly.
"""
from __future__ import annotations

import time

import numpy as np

from ..errors import CollectiveError
from .base import REDUCE_OPS, Communicator, collective_timeout

MAX_COUNT = 2 ** 31 - 1


def _mpi():
    from mpi4py import MPI
    return MPI


def _axes(axes):
    return (axes,) if isinstance(axes, str) else tuple(axes)


def _op(op, dtype):
    MPI = _mpi()
    if op not in REDUCE_OPS:
        raise CollectiveError(f"unknown reduction {op!r} (takes {', '.join(REDUCE_OPS)})")
    if dtype == np.bool_:
        return MPI.LOR if op in ("sum", "max") else MPI.LAND
    return {"sum": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN, "prod": MPI.PROD}[op]


def contiguous(x):
    """A C-contiguous ndarray of x, without a copy when it already is one; 0-d stays 0-d
    (the numpy helper for this turns 0-d arrays into 1-d ones)."""
    x = np.asarray(x)
    return x if x.flags.c_contiguous else x.copy(order="C")


def _buf(a):
    """A message for mpi4py: bools travel as C_BOOL."""
    MPI = _mpi()
    if a.dtype == np.bool_:
        return [a, MPI.C_BOOL]
    return a


def _blocks(what, x, G, dim):
    """x split in G equal blocks along dim, as one contiguous (G, *block) buffer; along
    dim 0 that is x itself, reshaped."""
    x = np.asarray(x)
    if x.shape[dim] % G:
        raise CollectiveError(f"{what}: dim {dim} of {list(x.shape)} does not split into {G} blocks")
    if dim == 0:
        return contiguous(x).reshape((G, x.shape[0] // G) + x.shape[1:])
    return contiguous(np.stack(np.split(x, G, axis=dim)))


class MPICommunicator(Communicator):
    _comms = {}      # (mesh key, axes, color) -> sub-communicator, shared by the process

    def __init__(self, mesh, rank=None, world=None):
        MPI = _mpi()
        self.world = world or MPI.COMM_WORLD
        super().__init__(mesh, self.world.Get_rank() if rank is None else rank)
        self.timeout = collective_timeout()

    # -- groups --------------------------------------------------------------------------
    def comm(self, axes):
        axes = _axes(axes)
        group = self.mesh.group(self.rank, axes)
        key = (hash(self.mesh), axes, group[0])
        c = self._comms.get(key)
        if c is None:
            if len(group) == self.world.Get_size():
                c = self.world.Split(0, self.mesh.index_in_group(self.rank, axes))
            else:
                c = self.world.Split(group[0], self.mesh.index_in_group(self.rank, axes))
            self._comms[key] = c
        return c, group

    def _wait(self, req, what, group):
        """Wait for a nonblocking request, failing (not hanging) past the deadline."""
        deadline = time.monotonic() + self.timeout
        spins = 0
        while not req.Test():
            spins += 1
            if spins > 200:
                time.sleep(5e-5 if spins < 20000 else 1e-3)
            if time.monotonic() > deadline:
                raise CollectiveError(
                    f"rank {self.rank}: {what} over ranks {group} timed out after {self.timeout:g} s "
                    f"(SPMD_COLLECTIVE_TIMEOUT): a rank of this group died or stopped calling collectives")

    # -- the collectives -----------------------------------------------------------------
    def all_reduce(self, x, axes, op="sum"):
        x = contiguous(x)
        c, group = self.comm(axes)
        out = np.empty_like(x)
        mop = _op(op, x.dtype)
        fx, fo = x.reshape(-1), out.reshape(-1)
        for lo in range(0, max(fx.size, 1), MAX_COUNT):
            hi = min(lo + MAX_COUNT, fx.size)
            self._wait(c.Iallreduce(_buf(fx[lo:hi]), _buf(fo[lo:hi]), op=mop), f"all_reduce({op})", group)
        return out

    def all_gather(self, x, axes, dim=0):
        x = contiguous(x)
        c, group = self.comm(axes)
        G = len(group)
        out = np.empty((G,) + x.shape, x.dtype)
        if x.size > MAX_COUNT:
            for i in range(G):     # chunked: one broadcast per member
                out[i] = self.broadcast(x, axes, root=i)
        else:
            self._wait(c.Iallgather(_buf(x), _buf(out)), "all_gather", group)
        if dim == 0:               # (G, n, ...) is already the concatenation along dim 0
            return out.reshape((G * x.shape[0],) + x.shape[1:])
        return np.concatenate(list(out), axis=dim)

    def reduce_scatter(self, x, axes, dim=0, op="sum"):
        c, group = self.comm(axes)
        blocks = _blocks("reduce_scatter", x, len(group), dim)
        out = np.empty(blocks.shape[1:], x.dtype)
        if blocks.size > MAX_COUNT:
            full = self.all_reduce(blocks, axes, op)
            return contiguous(full[c.Get_rank()])
        self._wait(c.Ireduce_scatter_block(_buf(blocks), _buf(out), op=_op(op, x.dtype)),
                   f"reduce_scatter({op})", group)
        return out

    def all_to_all(self, x, axes, split_dim, concat_dim):
        c, group = self.comm(axes)
        G = len(group)
        send = _blocks("all_to_all", x, G, split_dim)
        recv = np.empty_like(send)
        if send.size > MAX_COUNT:
            raise CollectiveError(f"all_to_all of {send.size} elements exceeds MPI's count limit")
        self._wait(c.Ialltoall(_buf(send), _buf(recv)), "all_to_all", group)
        if concat_dim == 0:
            return recv.reshape((G * recv.shape[1],) + recv.shape[2:])
        return np.concatenate(list(recv), axis=concat_dim)

    def permute(self, x, axes, pairs):
        x = contiguous(x)
        c, group = self.comm(axes)
        me = c.Get_rank()
        out = np.zeros_like(x)
        reqs = []
        for s, d in pairs:
            if s == me and d == me:
                out[...] = x
            elif s == me:
                reqs.append(c.Isend(_buf(x), dest=d, tag=17))
            elif d == me:
                reqs.append(c.Irecv(_buf(out), source=s, tag=17))
        for r in reqs:
            self._wait(r, "collective_permute", group)
        return out

    def broadcast(self, x, axes, root=0):
        x = np.array(x, copy=True, order="C")
        c, group = self.comm(axes)
        flat = x.reshape(-1)
        for lo in range(0, max(flat.size, 1), MAX_COUNT):
            self._wait(c.Ibcast(_buf(flat[lo:lo + MAX_COUNT]), root=root), "broadcast", group)
        return x

    def barrier(self, axes=None):
        if axes is None:
            c, group = self.world, list(range(self.world.Get_size()))
        else:
            c, group = self.comm(axes)
        self._wait(c.Ibarrier(), "barrier", group)
