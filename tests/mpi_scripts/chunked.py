"""The chunked paths (messages over MPI's count limit), with the limit lowered to 7
elements so that small arrays take them, and the block-wise all_reduce of floats with its
threshold lowered to 0: every collective must still match numpy."""
import os
import sys

import numpy as np

import spmd
import spmd.transports.mpi.mpi_all_reduce as mpi_all_reduce
import spmd.transports.mpi.mpi_library as mpi_library
from spmd.transports.mpi.mpi_communicator import MPICommunicator

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from collective_checks import check_collectives  # noqa: E402

spmd.init()
n = spmd.process_count()
mesh = spmd.Mesh((n,), ("x",))
# the block-wise all_reduce of floats first, on its own (G equal blocks, the rest gathered)
mpi_all_reduce.GATHER_BYTES = mpi_all_reduce.PAIR_GATHER_BYTES = 0
checked = check_collectives(MPICommunicator(mesh), dtypes=("float64", "float32"))
mpi_library.MAX_COUNT = 7
checked += check_collectives(MPICommunicator(mesh), dtypes=("float64", "bool"))
a = spmd.device_put(np.arange(20.0 * n).reshape(4 * n, 5), mesh.sharding("x"))      # shards of 20 > 7
assert np.array_equal(a.numpy(), np.arange(20.0 * n).reshape(4 * n, 5))
print(f"OK {checked + 1}")
