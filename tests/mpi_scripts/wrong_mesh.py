import numpy as np

import spmd

spmd.init()
mesh = spmd.Mesh((4,), ("x",))
spmd.jit(lambda x: x * 2, in_shardings=mesh.sharding("x"))(np.ones(8))
