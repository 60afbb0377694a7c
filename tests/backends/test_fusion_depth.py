"""A long chain of fusible ops (a Python loop writing one element a step: a select per
step) is cut into kernels of at most fuse.MAX_DEPTH ops along their longest chain, so the
LLVM code generator (recursive over a kernel's expression) never runs out of stack and
each element's work stays bounded; results are numpy's."""
import numpy as np

import spmd
from spmd.backends.llvm import fuse
from write_programs import per_point


def test_a_per_point_loop_longer_than_a_kernel_compiles_with_numpys_values():
    n = 12                                   # 100 single-element writes: past MAX_DEPTH
    assert (n - 2) ** 2 > fuse.MAX_DEPTH
    u = np.random.default_rng(0).random((n, n))
    f = per_point(n)
    for mesh in (None, spmd.Mesh((2,), ("x",))):
        sh = (mesh.sharding("x", None),) if mesh else None
        got = spmd.jit(f, in_shardings=sh, backend="llvm", fallback=False)(u)
        np.testing.assert_allclose(np.asarray(got), f(u), rtol=1e-15)


def test_a_long_elementwise_chain_is_cut_into_kernels(monkeypatch):
    monkeypatch.setenv("SPMD_ROLL", "0")        # (x > k steps with k: rolled, it would be one scan)

    def chain(x):
        for k in range(3 * fuse.MAX_DEPTH):
            x = np.where(x > k, x - 0.5, x + 0.25)
        return x
    x = np.linspace(-3.0, 300.0, 64)
    exe = spmd.jit(chain, backend="llvm").lower(x).compile()
    kernels = exe.plan.fusion.kernels()
    assert len(kernels) >= 3
    assert all(len([op for op in k.ops if op.name == "select"]) <= fuse.MAX_DEPTH for k in kernels)
    np.testing.assert_allclose(np.asarray(spmd.jit(chain, backend="llvm")(x)), chain(x), rtol=1e-15)
