"""Every MPICommunicator collective vs numpy, on the meshes of the world's size."""
import itertools
import sys

import numpy as np

import spmd
from spmd.collectives.mpi import MPICommunicator

spmd.init()
n = spmd.process_count()
meshes = [spmd.Mesh((n,), ("x",))]
if n == 4:
    meshes.append(spmd.Mesh((2, 2), ("a", "b")))
    meshes.append(spmd.Mesh((2, 2), ("a", "b"), devices=[[2, 0], [3, 1]]))
checked = 0


def value(dev, shape, dtype):
    """Every rank can compute every device's input."""
    rng = np.random.default_rng(dev)
    if dtype == "bool":
        return rng.random(shape) < 0.5
    return (rng.standard_normal(shape) * 10).astype(dtype)


for mesh in meshes:
    c = MPICommunicator(mesh)
    me = c.rank
    groups = [ax for k in range(1, mesh.ndim + 1) for ax in itertools.permutations(mesh.axis_names, k)]
    for axes, dtype in itertools.product(groups, ["float64", "float32", "int64", "bool"]):
        group = mesh.group(me, axes)
        G, i = len(group), mesh.index_in_group(me, axes)
        xs = [value(d, (G * 2, 3), dtype) for d in group]
        ops = ["sum", "max", "min"] if dtype != "bool" else ["sum", "min"]
        for op in ops:
            f = {"sum": np.add, "max": np.maximum, "min": np.minimum}[op]
            want = xs[0].copy()
            for x in xs[1:]:
                want = f(want, x)
            got = c.all_reduce(xs[i], axes, op)
            assert np.allclose(got, want) and got.dtype == want.dtype, (mesh, axes, op, dtype)
            rs = c.reduce_scatter(xs[i], axes, 0, op)
            assert np.allclose(rs, np.split(want, G)[i]), (mesh, axes, "rs", op)
            checked += 2
        for dim in (0, 1):
            assert np.array_equal(c.all_gather(xs[i], axes, dim), np.concatenate(xs, axis=dim))
        a2a = c.all_to_all(xs[i], axes, 0, 1)
        assert np.array_equal(a2a, np.concatenate([np.split(x, G, 0)[i] for x in xs], axis=1))
        pairs = [(k, (k + 1) % G) for k in range(G - 1)]          # a shift, last one gets nothing
        got = c.permute(xs[i], axes, pairs)
        src = {d: s for s, d in pairs}.get(i)
        assert np.array_equal(got, xs[src] if src is not None else np.zeros_like(xs[i]))
        assert np.array_equal(c.broadcast(xs[i], axes, root=G - 1), xs[G - 1])
        scalar = c.all_reduce(np.array(float(me)), axes)
        assert scalar.shape == () and scalar == sum(group)
        c.barrier(axes)
        checked += 6
    c.barrier()
print(f"OK {checked}")
sys.stdout.flush()
