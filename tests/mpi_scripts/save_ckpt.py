"""Checkpoints under MPI (run by tests/runtime/test_checkpoint.py with mpiexec -n 4).

argv: <dir>. Saves <dir>/sharded (each rank writes its own shards) for the test to load
locally, loads it back resharded, measures how many bytes each rank reads when loading
its quarter of one big file, and tries a mesh of the wrong size.
"""
import os
import sys

import numpy as np

import spmd


def rchar():
    """Bytes this process has read through read-like system calls (Linux /proc)."""
    with open("/proc/self/io") as f:
        return int(next(ln for ln in f if ln.startswith("rchar:")).split()[1])


spmd.init()
rank = spmd.process_index()
out = sys.argv[1]
mesh = spmd.Mesh((2, 2), ("data", "model"))
x = np.arange(7 * 6, dtype=np.float32).reshape(7, 6)
a = spmd.device_put(x, mesh.sharding("data", "model"))
b = spmd.device_put(np.arange(5.0), mesh.sharding())
spmd.save(os.path.join(out, "sharded"), {"a": a, "b": b, "step": 11})

# resharded onto a 1-D mesh of the same 4 ranks, columns split
line = spmd.Mesh((4,), ("x",))
got = spmd.load(os.path.join(out, "sharded"), {"a": line.sharding(None, "x"), "b": line, "step": None})
box = line.sharding(None, "x").shard_box(x.shape, rank)
np.testing.assert_array_equal(got["a"].local, x[:, box[1][0]:box[1][1]])
np.testing.assert_array_equal(got["b"].local, np.arange(5.0))
assert got["step"] == 11 and type(got["step"]) is int

# one 64 MiB file (a numpy leaf: rank 0 writes it); each rank loads a quarter of its rows
big = np.arange(4096 * 4096, dtype=np.float32).reshape(4096, 4096)
spmd.save(os.path.join(out, "big"), {"big": big})
r0 = rchar()
part = spmd.load(os.path.join(out, "big"), {"big": line.sharding("x")})["big"]
read = rchar() - r0
np.testing.assert_array_equal(part.local, big[rank * 1024:(rank + 1) * 1024])
print(f"READ {rank} {read}", flush=True)

try:
    spmd.load(os.path.join(out, "sharded"), spmd.Mesh((8,), ("x",)))
except spmd.SpmdError as e:
    print(f"MISMATCH {rank} {type(e).__name__}: {e}", flush=True)
print(f"OK {rank}", flush=True)
