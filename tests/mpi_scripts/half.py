"""float16 / bfloat16 under MPI: the communicator's collectives on 2-byte floats (sent as
raw uint16, reduced in float32 in group order) and a jitted bfloat16 program whose
all_reduce crosses the processes."""
import sys

import numpy as np

import spmd
from spmd.collectives.mpi import MPICommunicator

spmd.init()
n = spmd.process_count()
mesh = spmd.Mesh((n,), ("x",))
comm = MPICommunicator(mesh)
me = comm.rank
_F = {"sum": np.add, "max": np.maximum, "min": np.minimum, "prod": np.multiply}
for dt in (np.dtype(np.float16), np.dtype(spmd.bfloat16)):
    xs = [np.random.default_rng(d).uniform(-4, 4, (n * 2, 3)).astype(dt) for d in range(n)]
    for op in ("sum", "max", "min", "prod"):
        acc = xs[0].astype(np.float32)
        for x in xs[1:]:
            acc = _F[op](acc, x.astype(np.float32))
        want = acc.astype(dt)
        got = comm.all_reduce(xs[me], ("x",), op)
        assert got.dtype == dt and np.array_equal(got.view(np.uint16), want.view(np.uint16)), (dt, op, got, want)
        rs = comm.reduce_scatter(xs[me], ("x",), 0, op)
        assert np.array_equal(rs.view(np.uint16), np.split(want, n)[me].view(np.uint16)), (dt, "reduce_scatter", op)
    ag = comm.all_gather(xs[me], ("x",), 1)
    assert ag.dtype == dt and np.array_equal(ag.view(np.uint16), np.concatenate(xs, axis=1).view(np.uint16))
    a2a = comm.all_to_all(xs[me], ("x",), 0, 1)
    assert np.array_equal(a2a.view(np.uint16), np.concatenate([np.split(z, n)[me] for z in xs], axis=1).view(np.uint16))
    pm = comm.permute(xs[me], ("x",), [(i, (i + 1) % n) for i in range(n)])
    assert np.array_equal(pm.view(np.uint16), xs[(me - 1) % n].view(np.uint16))

# a jitted bfloat16 program: the column sums of a row-sharded array are one all_reduce
x = (np.arange(8 * n * 5).reshape(8 * n, 5) % 7 / 4).astype(spmd.bfloat16)
f = spmd.jit(lambda a: np.sum(a * a, axis=0), in_shardings=(mesh.sharding("x", None),))
cols = f.lower(x).report()["collectives"]
assert [c["op"] for c in cols] == ["all_reduce"] and cols[0]["bytes"] == 5 * 2, cols
got = np.asarray(f(x))
want = (x.astype(np.float32) ** 2).astype(spmd.bfloat16).astype(np.float32).sum(axis=0)
assert got.dtype == np.dtype(spmd.bfloat16)
assert np.allclose(got.astype(np.float32), want, rtol=8e-3), (got, want)
print(f"OK {me}")
sys.stdout.flush()
