"""The chunked paths (messages over MPI's count limit), with the limit lowered to 7
elements so that small arrays take them: every collective must still match numpy."""
import os
import sys

import numpy as np

import spmd
import spmd.collectives.mpi as mpi_comm
from spmd.collectives.mpi import MPICommunicator

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from collective_checks import check_collectives  # noqa: E402

spmd.init()
mpi_comm.MAX_COUNT = 7
n = spmd.process_count()
mesh = spmd.Mesh((n,), ("x",))
checked = check_collectives(MPICommunicator(mesh), dtypes=("float64", "bool"))
a = spmd.device_put(np.arange(20.0 * n).reshape(4 * n, 5), mesh.sharding("x"))      # shards of 20 > 7
assert np.array_equal(a.numpy(), np.arange(20.0 * n).reshape(4 * n, 5))
print(f"OK {checked + 1}")
