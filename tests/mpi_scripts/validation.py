"""The partitioner's validation programs under MPI (tests/validation_programs.py): every
rank runs its device's program; rank 0 saves the assembled outputs to argv[1] (.npz)."""
import os
import sys

import numpy as np

import spmd
from spmd.runtime.current_runtime import get_runtime

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import validation_programs as vp  # noqa: E402

spmd.init()
rt = get_runtime()


def run(exe, mesh, per_dev):
    me = rt.process_index()
    out = rt.run(exe, mesh, {me: per_dev[me]})[me]
    # every device's output shards, on every rank (an Allgather per output)
    shards = [rt.all_shards({me: o}, mesh) for o in out]
    return {d: [s[d] for s in shards] for d in range(mesh.size)}


results = vp.run_all(run)
if rt.process_index() == 0:
    np.savez(sys.argv[1], **vp.flat(results))
    print(f"saved {len(results)} programs")
