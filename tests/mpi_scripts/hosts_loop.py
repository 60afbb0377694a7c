"""A job that keeps its ranks talking until it is stopped (at most LOOP_SECONDS, default
120): a data-parallel step with an all-reduce, again and again. Rank 0 prints READY
after the first step, so a test knows when to cut a link or kill a host."""
import os
import time

import numpy as np

import spmd

spmd.init()
mesh = spmd.Mesh((spmd.device_count(),), ("data",))
step = spmd.jit(lambda x: np.tanh(x).sum(axis=0), in_shardings=mesh.sharding("data", None))
x = np.ones((8 * spmd.device_count(), 64))
end = time.monotonic() + float(os.environ.get("LOOP_SECONDS", "120"))
first = True
while time.monotonic() < end:
    np.asarray(step(x))
    if first and spmd.process_index() == 0:
        print("READY", flush=True)
    first = False
    time.sleep(0.01)
print("LOOP DONE", flush=True)
