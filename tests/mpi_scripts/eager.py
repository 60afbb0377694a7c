"""Eager numpy on spmd.Arrays under mpiexec: CG with a Python while loop and k-means with a
per-sample loop, compared with numpy on every rank; then rank 0 alone reads a replicated
value (local, no collective) and prints it."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import spmd  # noqa: E402
from eager_programs import cg, kmeans, spd_problem  # noqa: E402

spmd.init()
mesh = spmd.Mesh((spmd.process_count(),), ("x",))
A, b = spd_problem(24)
x, norms = cg(spmd.device_put(A, mesh.sharding("x", None)), spmd.device_put(b, mesh.sharding("x")))
xw, nw = cg(A, b)
assert isinstance(x, spmd.Array) and x.sharding == mesh.sharding("x"), x.sharding
assert np.allclose(x.numpy(), xw) and np.allclose(norms, nw), (norms, nw)
rng = np.random.default_rng(1)
X = rng.standard_normal((10, 3))
c, labels = kmeans(spmd.device_put(X, mesh.sharding("x", None)), X[:3].copy(), steps=2)
cw, lw = kmeans(X, X[:3].copy(), steps=2)
assert np.allclose(c.numpy(), cw) and (labels == lw).all()
# data-dependent shapes: local selections, counts all-gathered, no gather of the input
X = spmd.device_put(np.arange(30.0).reshape(10, 3) % 7, mesh.sharding("x", None))
sel = X[X > 3]
assert sel.sharding == mesh.sharding("x") and np.array_equal(sel.numpy(), X.numpy()[X.numpy() > 3])
assert np.array_equal(np.argwhere(X > 3).numpy(), np.argwhere(X.numpy() > 3))
loss = np.sum(x * x)                     # replicated: reading it on one rank is local
if spmd.process_index() == 0:
    print(f"loss {float(loss):.6f}")
print(f"EAGER OK {len(norms)}")
