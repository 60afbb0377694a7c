"""spmd.debug.print under every launcher: a 2x2 mesh, values split four ways printed
whole, once per call, in program order, between the script's own prints.

    python debug_print.py | mpiexec -n 4 python debug_print.py | spmd run -n 4 --backend ray ..."""
import numpy as np

import spmd

spmd.init(num_devices=4)
mesh = spmd.Mesh((2, 2), ("a", "b"))


def step(x, k):
    y = x * k
    spmd.debug.print("y = {}", y)                            # split over a and b: printed whole
    spmd.debug.print("sum {s:.2f} max {m}", s=y.sum(), m=y.max())
    return y


f = spmd.jit(step, in_shardings=(mesh.sharding("a", "b"), None))
x = np.arange(16.0).reshape(4, 4)
for i in range(3):
    if spmd.process_index() == 0:
        print(f"call {i}", flush=True)
    f(x, np.float64(i + 1))
if spmd.process_index() == 0:
    print("done", flush=True)
