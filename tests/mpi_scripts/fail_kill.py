"""Rank 1 is SIGKILLed just before an all_reduce; the others must not hang."""
import os
import signal
import time

import numpy as np

import spmd

spmd.init()
mesh = spmd.Mesh((spmd.process_count(),), ("x",))
f = spmd.jit(lambda x: x.sum(), in_shardings=mesh.sharding("x"))
f(np.arange(8.0))
if spmd.process_index() == 1:
    os.kill(os.getpid(), signal.SIGKILL)
f(np.arange(8.0))
time.sleep(60)
