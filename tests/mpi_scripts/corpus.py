"""Ten corpus programs (tests/programs/corpus/, MPI_NAMES) under mpiexec -n 4: every rank
runs each under spmd.jit and compares its results with plain numpy's, then prints
"OK <name> <how it ran>"."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "programs"))
import spmd  # noqa: E402
import corpus  # noqa: E402

spmd.init()
me = spmd.process_index()
for name in corpus.MPI_NAMES:
    mod = corpus.load(name)
    shape, axes = getattr(mod, "MESH", corpus.DEFAULT_MESH)
    how = corpus.run(name, spmd.Mesh(shape, axes))
    print(f"OK {name} {how}", flush=True)
