"""Loading MPI and handing it numpy buffers: MPI_Init (mpi4py.MPI imported on first use,
with MPICH's settings for an oversubscribed host and a watcher of a stuck MPI_Init), MPI's
count limit and the chunks that keep under it, bools and 2-byte floats as MPI types, and
the pool results come from."""
from __future__ import annotations

import os

import numpy as np

from ..buffer_pool import BufferPool
from .mpi_files import unlink_run_files
from .mpi_init import watching_init

MAX_COUNT = 2 ** 31 - 1

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


# 2-byte floats: MPI has no bfloat16 (nor, portably, float16) type: they travel as raw
# uint16 and every reduction of them goes through communicator.reduce_arrays (float32 sums)
HALFS = ("float16", "bfloat16")


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
    if a.dtype.itemsize == 2 and a.dtype.name in HALFS:     # (dtype.name is slow: asked only of 2-byte types)
        return [a.view(np.uint16), MPI.UINT16_T]
    return a


def chunks(n):
    """[lo, hi) ranges of at most MAX_COUNT elements covering n (one empty range for 0)."""
    if n <= MAX_COUNT:
        return ((0, n),)
    return [(lo, min(lo + MAX_COUNT, n)) for lo in range(0, n, MAX_COUNT)]


# results come from a pool of recycled buffers (transports/buffer_pool.py): fresh pages cost a
# page fault each, raw mpi4py code reuses its buffers
POOL = BufferPool()
