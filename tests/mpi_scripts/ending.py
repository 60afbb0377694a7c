"""A run that ends the way argv[1] says, for the tests that nothing is left behind
(tests/runtime/test_leftovers.py). Every rank says "ready <pid>" once MPI runs.

clean  the program finishes          raise    rank 1 raises after a collective
raise0 process 0 raises (under Ray: the driver)
mesh   a mesh of 4 on 2 ranks        exit     rank 1 calls sys.exit(3) early
os_exit rank 1 leaves by os._exit    loop     run until a signal ends the run
"""
import os
import sys
import time

import numpy as np

import spmd

how = sys.argv[1]
spmd.init()
n = spmd.process_count()
mesh = spmd.Mesh((n,), ("x",))
f = spmd.jit(lambda x: x.sum(), in_shardings=mesh.sharding("x"))
f(np.arange(8.0))
print(f"ready {os.getpid()}", flush=True)
if how == "mesh":
    bad = spmd.Mesh((2 * n,), ("x",))
    spmd.jit(lambda x: x * 2, in_shardings=bad.sharding("x"))(np.ones(8))
if how == "raise0" and spmd.process_index() == 0:
    raise RuntimeError("boom on purpose")
if spmd.process_index() == 1:
    if how == "raise":
        raise RuntimeError("boom on purpose")
    if how == "exit":
        sys.exit(3)
    if how == "os_exit":
        os._exit(0)
if how == "loop":
    while True:
        f(np.arange(8.0))
f(np.arange(8.0))
if how != "clean":
    time.sleep(60)
