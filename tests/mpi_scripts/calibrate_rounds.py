"""calibrate.timed under mpiexec: every process runs the same rounds of the programs it
times (collectives over all of them), however its own clock would decide: here rank 0
samples for 0.2 s and rank 1 for 0.6 s, as a process whose clock reads past the
sampling time a moment before another's decides one round fewer."""
import time

import numpy as np

import spmd
from spmd.jit import calibrate

spmd.init()
mesh = spmd.Mesh((spmd.device_count(),), ("x",))
row = mesh.sharding("x", None)
xs = spmd.device_put(np.ones((spmd.device_count(), 4), np.float32), row)
total = spmd.jit(lambda x: x + x.sum() * 1e-6, in_shardings=row, out_shardings=row)
rounds = []


def counted(x):
    rounds.append(1)
    time.sleep(0.02)                 # (a round of 20 ms: tens of rounds in the sampling time)
    return total(x)


calibrate.timed([(counted, (xs,))], 3, seconds=0.2 if spmd.process_index() == 0 else 0.6)
print(f"ROUNDS {spmd.process_index()} {len(rounds)}", flush=True)
