"""Rank 2 is SIGKILLed while it writes its shard of a checkpoint (run by
tests/runtime/test_checkpoint.py with mpiexec -n 4): the checkpoint saved before must survive."""
import glob
import os
import signal
import sys
import threading
import time

import numpy as np

import spmd

spmd.init()
rank = spmd.process_index()
mesh = spmd.Mesh((2, 2), ("data", "model"))
path = sys.argv[1]
spmd.save(path, {"w": spmd.device_put(np.zeros((8, 8), np.float32), mesh.sharding("data", "model")), "step": 1})
big = spmd.device_put(np.ones((8192, 8192), np.float32), mesh.sharding("data", "model"))   # 64 MiB a rank
if rank == 2:
    def killer():
        mine = None                       # leaf 1 ("w"), the shard of device 2, in this save's temp dir
        while not (mine and os.path.exists(mine) and os.path.getsize(mine) > 0):
            mine = next(iter(glob.glob(path + ".tmp.*/l1_s2.npy")), None)
            time.sleep(0.001)
        os.kill(os.getpid(), signal.SIGKILL)
    threading.Thread(target=killer, daemon=True).start()
spmd.save(path, {"step": 2, "w": big})
print("NOT REACHED", flush=True)
