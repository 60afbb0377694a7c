"""Each rank makes its weights with its own (unseeded) random numbers: the jitted step
must fail saying so, once, with the fix for weights first."""
import numpy as np

import spmd

spmd.init()
mesh = spmd.Mesh((spmd.device_count(),), ("data",))
w = np.random.default_rng().standard_normal((3, 3))       # a different w on every rank
x = np.ones((8, 3))


def step(x, w):
    return (x @ w).sum()


spmd.jit(step, in_shardings=(mesh.sharding("data", None), None))(x, w)
print("UNREACHABLE", flush=True)
