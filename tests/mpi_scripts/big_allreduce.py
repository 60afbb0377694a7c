"""Three 8 MB all-reduces over every rank (a sum over the sharded axis); rank 0 prints
OK when each equals numpy's."""
import numpy as np

import spmd

spmd.init()
n = spmd.device_count()
mesh = spmd.Mesh((n,), ("x",))
f = spmd.jit(lambda x: x.sum(axis=0), in_shardings=mesh.sharding("x", None))
x = np.arange(n * (1 << 20), dtype=np.float64).reshape(n, 1 << 20) % 7
for _ in range(3):
    got = np.asarray(f(x))
    np.testing.assert_array_equal(got, x.sum(axis=0))
if spmd.process_index() == 0:
    print("OK big_allreduce", flush=True)
