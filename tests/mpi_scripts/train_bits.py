"""tests/training_programs.py's training loop, `runs` times per compiler backend; prints
a digest of the final weights' bits per run and rank: BITS <backend> <rank> <digest>.
Runs under mpiexec and, as a plain script, on the local runtime."""
import os
import sys

import spmd

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from training_programs import digest, train  # noqa: E402

spmd.init(num_devices=4)
for _ in range(int(sys.argv[1])):
    for backend in ("llvm", "numpy"):
        print(f"BITS {backend} {spmd.process_index()} {digest(train(backend=backend))}", flush=True)
