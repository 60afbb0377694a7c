"""The partitioner's validation programs, runnable on any runtime: random programs with
a random sharding on every value (partition_util), partitioned for a 4-device mesh,
their inputs placed as padded shards (garbage in the padding, pending sums split into
random addends), and the global outputs assembled from what every device returns.

Every process builds the same cases from the same seeds (tracing, sharding and
partitioning are deterministic), so an MPI rank, a Ray driver and the local runtime
run identical per-device programs on identical shards; the tests compare the outputs.
"""
import warnings

import numpy as np

from partition_util import assemble, place, random_program, random_sharding, sharding_of
from spmd.backends import compile_graph
from spmd.sharding import Mesh
from spmd.sharding.partition import partition

SEEDS = tuple(range(10))


def meshes():
    return [Mesh((4,), ("x",)), Mesh((2, 2), ("a", "b")), Mesh((2, 2), ("a", "b"), devices=[[2, 0], [3, 1]])]


def case(seed):
    """-> (mesh, per-device executable, {device: [input shards]}, finish) where
    finish({device: [output shards]}) assembles the global outputs."""
    rng = np.random.default_rng(seed)
    mesh = meshes()[seed % 3]
    dims = (4, 8, 16) if seed % 2 == 0 else (3, 5, 7, 9)
    dtype = "int64" if seed % 3 == 0 else "float64"
    g, args = random_program(rng, dtype, dims, int(rng.integers(5, 21)))
    g.mesh = mesh
    for v in g.values():
        v.sharding = random_sharding(rng, mesh, v)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pg = partition(g)
    placed = [place(a, sharding_of(v, mesh), rng) for a, v in zip(args, g.inputs)]
    per_dev = {d: [p[d] for p in placed] for d in range(mesh.size)}

    def finish(res):
        return [assemble({d: res[d][k] for d in res}, sharding_of(v, mesh).replace(partial=()), v.shape, v.dtype,
                         f"seed {seed} output {k}") for k, v in enumerate(g.outputs)]

    return mesh, compile_graph(pg, "numpy"), per_dev, finish


def run_all(run):
    """{seed: [global outputs]}; run(exe, mesh, per_dev) -> {device: [output arrays]}."""
    out = {}
    for seed in SEEDS:
        mesh, exe, per_dev, finish = case(seed)
        out[seed] = finish(run(exe, mesh, per_dev))
    return out


def flat(results):
    """{seed: outputs} -> {"s<seed>_<k>": array}, for np.savez."""
    return {f"s{s}_{k}": a for s, outs in results.items() for k, a in enumerate(outs)}


def assert_same(got, want, what):
    """Bit-identical; float outputs of all_reduce may differ in the last bits where an
    MPI library reduces in another order than group order (mpi=True)."""
    assert set(got) == set(want), what
    for key in sorted(want):
        g, w = np.asarray(got[key]), np.asarray(want[key])
        assert g.dtype == w.dtype and g.shape == w.shape, (what, key)
        if w.dtype.kind == "f" and what.startswith("mpi"):
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12, err_msg=f"{what} {key}")
        else:
            np.testing.assert_array_equal(g, w, err_msg=f"{what} {key}")
