"""Started all-reduces under MPI (tests/transports/test_mpi.py and tests/runtime/test_multihost.py run it
with mpiexec -n 4), one case per argv[1]:

- `step OUT`: the MLP and the GPT steps of tests/async_programs.py on a 2x2 mesh, with
  SPMD_BUCKET_BYTES as the test sets it; every rank prints how many start/done pairs
  its program has; rank 0 saves every output array to OUT (.npz);
- `inflight_kill`: every rank but 2 starts an all_reduce; rank 2 is SIGKILLed before
  it starts its own; the others wait in it and must name rank 2 promptly instead of hanging."""
import os
import signal
import sys

import numpy as np

import spmd

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from async_programs import flat, gpt_case, mlp_case, pairs  # noqa: E402

case = sys.argv[1]
spmd.init()
rank = spmd.process_index()
mesh = spmd.Mesh((2, 2), ("data", "model"))

if case == "step":
    arrays = []
    for make in (mlp_case, gpt_case):
        step, args, sh = make(mesh)
        f = spmd.jit(step, in_shardings=sh)
        n = len(pairs(f.lower(*args).graph))
        print(f"PAIRS {make.__name__} {n}", flush=True)
        arrays += flat(f(*args))
    if rank == 0:
        np.savez(sys.argv[2], *arrays)
    print("OK step", flush=True)

elif case == "inflight_kill":
    from spmd.transports.mpi.mpi_communicator import MPICommunicator
    comm = MPICommunicator(spmd.Mesh((4,), ("x",)))
    comm.loc = "async_step.py:inflight"
    comm.wait(comm.all_reduce_start(np.ones(1000), ("x",)))      # a first one completes
    # killed; "frozen": stopped, its process still there (a hung host). Before its start:
    # once started, its progress thread may deliver its part, and the others then finish
    if rank == 2:
        os.kill(os.getpid(), signal.SIGSTOP if os.environ.get("FROZEN") else signal.SIGKILL)
    h = comm.all_reduce_start(np.ones(1000), ("x",))
    comm.wait(h)
    print("UNREACHABLE", flush=True)
