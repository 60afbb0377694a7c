"""Every MPICommunicator collective vs numpy, on the meshes of the world's size, and
the calls every transport rejects (the checks are tests/collective_checks.py, shared
with the local and Ray tests)."""
import os
import sys

import spmd
from spmd.transports.mpi.mpi_communicator import MPICommunicator

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from collective_checks import SMALL_INTS, check_collectives, check_rejections  # noqa: E402

spmd.init()
n = spmd.process_count()
meshes = [spmd.Mesh((n,), ("x",))]
if n == 4:
    meshes.append(spmd.Mesh((2, 2), ("a", "b")))
    meshes.append(spmd.Mesh((2, 2), ("a", "b"), devices=[[2, 0], [3, 1]]))
checked = sum(check_collectives(MPICommunicator(mesh), big=True) for mesh in meshes)
checked += check_collectives(MPICommunicator(meshes[-1]), dtypes=SMALL_INTS)
print(f"OK {checked}")
# bad arguments: the same CollectiveError as on every transport, and the ranks still agree after
print(f"REJECTED {sum(check_rejections(MPICommunicator(mesh)) for mesh in meshes)}")
sys.stdout.flush()
