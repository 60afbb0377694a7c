"""Only rank 0 reads a *sharded* Array (a collective under MPI): it must fail, not hang.
(A replicated Array is read locally; see eager.py.)"""
import numpy as np

import spmd

spmd.init()
mesh = spmd.Mesh((spmd.process_count(),), ("x",))
doubled = spmd.jit(lambda x: x * 2, in_shardings=mesh.sharding("x"))(np.arange(8.0))
if spmd.process_index() == 0:
    print(doubled.numpy())
