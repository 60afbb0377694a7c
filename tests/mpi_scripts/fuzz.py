"""The random-program fuzzer under MPI (tests/test_multihost.py runs it with mpiexec -n 4):
random annotated programs (tests/partition_util.py) through jit's real stages on 4-rank
meshes, each compared with single-device numpy. Every rank draws the same programs;
since each MPI process has its own hash seed, the per-call program fingerprint also
checks that tracing, propagation and partitioning are deterministic across processes."""
import os
import sys
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from partition_util import random_program, random_sharding, reference  # noqa: E402

import spmd  # noqa: E402
from spmd.api import Lowered, lower_graph  # noqa: E402

spmd.init()
n = int(sys.argv[1]) if len(sys.argv) > 1 else 200
first = int(sys.argv[2]) if len(sys.argv) > 2 else 0
perm = np.random.default_rng(7).permutation(4).reshape(2, 2)
MESHES = [spmd.Mesh((4,), ("x",)), spmd.Mesh((2, 2), ("a", "b")), spmd.Mesh((2, 2), ("a", "b"), devices=perm)]
t0 = time.monotonic()
for seed in range(first, first + n):
    rng = np.random.default_rng(seed)
    mesh = MESHES[seed % len(MESHES)]
    even = seed % 2 == 0
    dims = (4, 8, 16) if even else (3, 5, 7, 9)
    dtype = "int64" if seed % 3 == 0 else "float64"

    def constrain(v):
        return random_sharding(rng, mesh, v, p_partial=0).spec if rng.random() < 0.2 else None

    g, args = random_program(rng, dtype, dims, int(rng.integers(5, 31)), constrain)
    g.mesh = mesh
    in_sh = [random_sharding(rng, mesh, v) if rng.random() < 0.5 else None for v in g.inputs]
    want = reference(g, args)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        low = Lowered(lower_graph(g, mesh, in_sh, [None] * len(g.outputs))[0], None, None, "numpy", mesh)
        got = low(*args)
    for k, (w, r) in enumerate(zip(want, got)):
        msg = f"output {k} of seed {seed} on {mesh.text()}:\n{low.as_text('propagated')}"
        if dtype == "int64":
            np.testing.assert_array_equal(r.numpy(), w, err_msg=msg)
        else:
            np.testing.assert_allclose(r.numpy(), w, rtol=1e-9, atol=1e-9, err_msg=msg)
print(f"OK fuzz {n} programs in {time.monotonic() - t0:.1f} s", flush=True)
