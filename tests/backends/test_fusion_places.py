"""A value its readers read at several places an element (a stencil sweep's grid, read by
the next sweep at 5 or 7 shifted places) is stored by the kernel that makes it, not fused
into its readers, which would compute it again at each place (ir.places_read,
ir.recomputed_ops); a value read at one place, through one re-indexing or a broadcast,
or cheap to make again (a guarded load's select, a 5-point sweep's few ops), still
fuses. Results are numpy's."""
import numpy as np
import pytest

import spmd
from spmd.ir import RECOMPUTE_LIMIT, places_read, recomputed_ops


def _sweeps(k):
    def f(u):
        for _ in range(k):
            c = u[1:-1, 1:-1, 1:-1]
            u[1:-1, 1:-1, 1:-1] = c + 0.1 * (u[2:, 1:-1, 1:-1] + u[:-2, 1:-1, 1:-1] + u[1:-1, 2:, 1:-1]
                                             + u[1:-1, :-2, 1:-1] + u[1:-1, 1:-1, 2:] + u[1:-1, 1:-1, :-2] - 6.0 * c)
        return u
    return f


@pytest.mark.parametrize("k", [2, 3])
def test_each_sweep_of_a_stencil_on_one_device_is_a_kernel_of_its_own(monkeypatch, k):
    monkeypatch.setenv("SPMD_ROLL", "0")          # (the sweeps unrolled, as a few steps are)
    u = np.random.default_rng(0).random((12, 10, 9))
    f = spmd.jit(_sweeps(k), backend="llvm", fallback=False)
    exe = f.lower(u.copy()).compile()
    kernels = exe.plan.fusion.kernels()
    computing = [kn for kn in kernels if any(op.name == "multiply" for op in kn.ops)]
    assert len(computing) == k
    assert all(sum(op.name == "multiply" for op in kn.ops) == 2 for kn in computing)   # one sweep's each
    np.testing.assert_allclose(np.asarray(f(u.copy())), _sweeps(k)(u.copy()), rtol=1e-14)


def test_a_value_read_at_one_place_fuses_into_its_readers():
    def f(x):
        y = np.exp(x) * 2.0
        return (y + 1.0) * y + y[::-1].sum() * 0.0 + np.tanh(y)
    x = np.linspace(-1.0, 1.0, 64)
    low = spmd.jit(f, backend="llvm", fallback=False).lower(x)
    g = low.graph
    users = {}
    for op in g.ops:
        for o in op.operands:
            users.setdefault(o, []).append(op)
    exp = next(op.results[0] for op in g.ops if op.name == "exp")
    assert places_read(exp, users) == 1
    y = next(op.results[0] for op in g.ops if op.name == "multiply" and exp in op.operands)
    assert places_read(y, users) == 2            # y, and y reversed
    assert recomputed_ops(y, users) == 2 <= RECOMPUTE_LIMIT     # exp and the multiply, once more: fused
    exe = low.compile()
    assert len(exe.plan.fusion.kernels()) == 1
    np.testing.assert_allclose(np.asarray(spmd.jit(f, backend="llvm")(x)), f(x), rtol=1e-13)
