"""Rank 2 raises after a collective; every rank must end promptly."""
import time

import numpy as np

import spmd

spmd.init()
mesh = spmd.Mesh((spmd.process_count(),), ("x",))
f = spmd.jit(lambda x: x.sum(), in_shardings=mesh.sharding("x"))
print(float(f(np.arange(8.0))), flush=True)
if spmd.process_index() == 2:
    raise RuntimeError("boom on purpose")
f(np.arange(8.0))              # the others wait in a collective rank 2 never joins
time.sleep(60)
