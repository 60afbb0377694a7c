"""The all_reduce of floats in group order, and host by host, as generators of rounds of
MPI calls (mpi_progress.py runs them, blocking or started); MPICommunicator picks the
plan (its module docstring says why)."""
from __future__ import annotations

import numpy as np

from ..communicator import reduce_arrays
from .mpi_library import HALFS, POOL


def in_group_order(op, dtype):
    """Every reduction of floats runs in group order through communicator.reduce_arrays, the rule
    every backend follows, so a sum has the same bits on every run and on every backend:
    MPI's built-in SUM adds in the order of the algorithm MPICH picks for the message size
    and group (recursive doubling adds (a+b)+(c+d), not ((a+b)+c)+d; the nonblocking
    version picks others), and its MAX/MIN drop NaN (C's fmax), where numpy's
    maximum/minimum propagate it. Integers and bools keep MPI's built-in reductions:
    exact in any order."""
    return np.dtype(dtype).kind in "fc" or np.dtype(dtype).name in HALFS


# an all_reduce in group order of up to this many bytes gathered (G times the input) is one
# Allgather, every rank reducing all of it; a bigger one goes block-wise (each rank reduces
# 1/G of it: an Alltoall, then an Allgather of the reduced blocks), MPI's own schedule
# for large messages (Rabenseifner's), with the same bytes on the wire
GATHER_BYTES = 1 << 16

# between two members the gather moves the same bytes as the block-wise schedule (each
# rank sends its whole x either way: half in the Alltoall, half in the Allgather) in one
# round instead of two; each rank then reduces all of x instead of half, which costs less
# than the round saved up to this many bytes gathered (2 ranks, one host, 2 cores: 130 us
# against 255 at 64 KiB, 410 against 527 at 1 MiB, 1.65 ms against 1.98 at 4 MiB, even
# at 16 MiB). A round costs most on an oversubscribed host, where the partner that must
# take part in it may not hold a core: train_gpt d64 2x2 under `mpiexec -n 4` on 2 cores,
# whose all-reduces of 128 KiB over pairs took two rounds each, ran its step 20-35% faster
PAIR_GATHER_BYTES = 1 << 23


# an all_reduce over a group spanning hosts goes host by host from this many bytes (smaller
# ones are a round trip either way)
HIERARCHICAL_BYTES = 1 << 16


def group_order_steps(c, x, op, G, out=None):
    """op over the G members of communicator c, each element reduced in group order
    (communicator.reduce_arrays). Small: an Allgather of the inputs, each rank reduces all of
    them. Large: the flat input as G equal blocks (and fewer than G elements left over,
    gathered whole); each rank gets block i of every input (Alltoall), reduces it, and
    the reduced blocks are gathered (Allgather; MPICH's Alltoallv / Allgatherv are up
    to 3x slower than these); between two members, the gather up to PAIR_GATHER_BYTES.
    The bits do not depend on the path or the blocks."""
    if x.nbytes * G <= (PAIR_GATHER_BYTES if G == 2 else GATHER_BYTES):
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
