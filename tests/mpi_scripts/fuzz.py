"""The random-program fuzzer under MPI (tests/test_multihost.py runs it with mpiexec -n 4):
random annotated programs (tests/partition_util.py) through jit's real stages on 4-rank
meshes, each compared with single-device numpy. Every rank draws the same programs;
since each MPI process has its own hash seed, the per-call program fingerprint also
checks that tracing, propagation and partitioning are deterministic across processes."""
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from partition_util import check_random_jit_program  # noqa: E402

import spmd  # noqa: E402

spmd.init()
n = int(sys.argv[1]) if len(sys.argv) > 1 else 200
first = int(sys.argv[2]) if len(sys.argv) > 2 else 0
perm = np.random.default_rng(7).permutation(4).reshape(2, 2)
MESHES = [spmd.Mesh((4,), ("x",)), spmd.Mesh((2, 2), ("a", "b")), spmd.Mesh((2, 2), ("a", "b"), devices=perm)]
t0 = time.monotonic()
for seed in range(first, first + n):
    check_random_jit_program(seed, MESHES[seed % len(MESHES)], even=seed % 2 == 0)
print(f"OK fuzz {n} programs in {time.monotonic() - t0:.1f} s", flush=True)
