import numpy as np

import spmd

spmd.init()
mesh = spmd.Mesh((spmd.process_count(),), ("x",))
f = spmd.jit(lambda x: np.tanh(x).sum(), in_shardings=mesh.sharding("x"))
print(float(f(np.arange(16.0))))
