"""Only rank 0 reads an Array (a collective under MPI): it must fail, not hang."""
import numpy as np

import spmd

spmd.init()
mesh = spmd.Mesh((spmd.process_count(),), ("x",))
total = spmd.jit(lambda x: x.sum(), in_shardings=mesh.sharding("x"))(np.arange(8.0))
if spmd.process_index() == 0:
    print(float(total))
