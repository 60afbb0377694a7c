"""Save a sharded tree under MPI (each rank writes its own shards)."""
import sys

import numpy as np

import spmd

spmd.init()
mesh = spmd.Mesh((2, 2), ("data", "model"))
x = np.arange(7 * 6, dtype=np.float32).reshape(7, 6)
a = spmd.device_put(x, mesh.sharding("data", "model"))
b = spmd.device_put(np.arange(5.0), mesh.sharding())
spmd.save(sys.argv[1], {"a": a, "b": b, "step": np.int64(11)})
print("saved")
