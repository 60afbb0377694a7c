"""The rounds of the group-order all_reduce (transports/mpi/mpi_all_reduce.py), without MPI:
the rounds are run here by a fake that does what each MPI call does on every member at
once. Between two members the all_reduce is one Allgather up to PAIR_GATHER_BYTES (one
round where the block-wise schedule takes two), and whichever path it takes, every
element is the same bits: the members' values reduced in group order."""
import numpy as np
import pytest

from spmd.transports.communicator import reduce_arrays
from spmd.transports.mpi import mpi_all_reduce
from spmd.transports.mpi.mpi_all_reduce import PAIR_GATHER_BYTES, group_order_steps


def run_members(xs, op="sum"):
    """Every member's result and the calls of each round (names), the G generators
    driven in lock step as MPI's collectives would."""
    G = len(xs)
    gens = [group_order_steps("comm", x, op, G) for x in xs]
    rounds, results = [], [None] * G
    calls = [next(g) for g in gens]
    while True:
        rounds.append([name for _, name, _, _ in calls[0]])
        for k, (_, name, _, _) in enumerate(calls[0]):
            sends = [c[k][2].reshape(-1) for c in calls]
            for j, c in enumerate(calls):
                recv = c[k][3].reshape(G, -1)
                for i in range(G):           # row i: from member i
                    if name == "Allgather":
                        recv[i] = sends[i]
                    else:                    # Alltoall: member i's block j
                        recv[i] = sends[i].reshape(G, -1)[j]
        nxt = []
        for j, g in enumerate(gens):
            try:
                nxt.append(g.send(None))
            except StopIteration as e:
                results[j] = e.value
        if all(r is not None for r in results):
            return results, rounds
        calls = nxt


@pytest.mark.parametrize("G, nbytes, want", [
    (2, 128 << 10, [["Allgather"]]),                         # train_gpt's Megatron all-reduces
    (2, PAIR_GATHER_BYTES // 2, [["Allgather"]]),
    (2, PAIR_GATHER_BYTES // 2 + 8, [["Alltoall"], ["Allgather"]]),
    (4, 128 << 10, [["Alltoall"], ["Allgather"]]),           # more members: the gather moves more bytes
    (4, 1024, [["Allgather"]]),
])
def test_pairs_gather_in_one_round_up_to_the_limit(G, nbytes, want):
    xs = [np.full(nbytes // 4, float(i + 1), np.float32) for i in range(G)]
    got, rounds = run_members(xs)
    assert rounds == want
    assert all(np.array_equal(r, np.full(nbytes // 4, G * (G + 1) / 2, np.float32)) for r in got)


@pytest.mark.parametrize("G", [2, 3, 4])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_both_paths_give_the_bits_of_the_group_order_sum(G, dtype, monkeypatch):
    rng = np.random.default_rng(G)
    n = 1001                                                 # blocks and a rest
    xs = [(rng.standard_normal(n) * 10.0 ** rng.integers(-6, 6, n)).astype(dtype) for _ in range(G)]
    want = reduce_arrays("sum", xs)
    gathered, _ = run_members(xs)
    monkeypatch.setattr(mpi_all_reduce, "GATHER_BYTES", 0)
    monkeypatch.setattr(mpi_all_reduce, "PAIR_GATHER_BYTES", 0)
    blocks, rounds = run_members(xs)
    assert rounds[0] == ["Alltoall", "Allgather"]
    for r in gathered + blocks:
        assert r.tobytes() == want.tobytes()
