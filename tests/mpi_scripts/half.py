"""float16 / bfloat16 under MPI: the communicator's collectives on 2-byte floats (sent as
raw uint16, reduced in float32 in group order) and a jitted bfloat16 program whose
all_reduce crosses the processes."""
import os
import sys

import numpy as np

import spmd
from spmd.transports.mpi.mpi_communicator import MPICommunicator

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from collective_checks import check_half_collectives  # noqa: E402

spmd.init()
n = spmd.process_count()
mesh = spmd.Mesh((n,), ("x",))
checked = check_half_collectives(MPICommunicator(mesh))
if n == 4:
    checked += check_half_collectives(MPICommunicator(spmd.Mesh((2, 2), ("a", "b"))))
me = spmd.process_index()

# a jitted bfloat16 program: the column sums of a row-sharded array are one all_reduce
x = (np.arange(8 * n * 5).reshape(8 * n, 5) % 7 / 4).astype(spmd.bfloat16)
f = spmd.jit(lambda a: np.sum(a * a, axis=0), in_shardings=(mesh.sharding("x", None),))
cols = f.lower(x).report()["collectives"]
assert [c["op"] for c in cols] == ["all_reduce"] and cols[0]["bytes"] == 5 * 2, cols
got = np.asarray(f(x))
want = (x.astype(np.float32) ** 2).astype(spmd.bfloat16).astype(np.float32).sum(axis=0)
assert got.dtype == np.dtype(spmd.bfloat16)
assert np.allclose(got.astype(np.float32), want, rtol=8e-3), (got, want)
print(f"OK {me} {checked}")
sys.stdout.flush()
