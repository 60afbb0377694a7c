"""Rank 1 leaves without an error before an all_reduce the others call."""
import os
import time

import numpy as np

import spmd

spmd.init()
mesh = spmd.Mesh((spmd.process_count(),), ("x",))
f = spmd.jit(lambda x: x.sum(), in_shardings=mesh.sharding("x"))
f(np.arange(8.0))
if spmd.process_index() == 1:
    os._exit(0)                # no MPI_Finalize, no error: it just stops taking part
f(np.arange(8.0))
time.sleep(60)
