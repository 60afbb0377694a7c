"""One heat2d step (examples/heat2d.py, one step a call) and one small jitted call, median
per call: python benchmarks/ray_step.py BACKEND N RANKS CALLS (mpi: under mpiexec)."""
import sys, time, os
import numpy as np
sys.path.insert(0, os.getcwd())
import spmd
from examples.heat2d import diffuse, initial
backend, n, ranks, calls = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
spmd.init(backend=backend, num_devices=ranks)
mesh = spmd.Mesh((ranks, 1), ("x", "y"))
block = mesh.sharding("x", "y")
step = spmd.jit(lambda u: diffuse(u, 1), in_shardings=block, out_shardings=block)
u = spmd.device_put(initial(n), block)
for _ in range(3): u = step(u)
ts = []
for _ in range(calls):
    t0 = time.perf_counter(); u = step(u); ts.append(time.perf_counter() - t0)
# small call
sh = mesh.sharding("x")
f = spmd.jit(lambda a: a * 2 + 1, in_shardings=sh, out_shardings=sh)
a = spmd.device_put(np.ones(64), sh)
for _ in range(3): a = f(a)
ts2 = []
for _ in range(calls):
    t0 = time.perf_counter(); a = f(a); ts2.append(time.perf_counter() - t0)
print(f"{backend} n={n} ranks={ranks}: heat step median {1e3*np.median(ts):.2f} ms; small call median {1e3*np.median(ts2):.2f} ms", flush=True)
