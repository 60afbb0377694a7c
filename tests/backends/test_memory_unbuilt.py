"""Lowered.memory() and memory_profile() before the program is compiled come from its plan
and schedule alone (LLVMExecutable(build=False): no code generated): the same figures as
the compiled program's, and such an executable refuses to run."""
import numpy as np
import pytest

import spmd
from spmd.errors import SpmdError


def _loops(a, b):
    c = np.tanh(a @ b) + 1
    c = spmd.fori_loop(0, 3, lambda i, c: c * 0.5 + np.exp(-c), c)
    return (c * c).sum(0), spmd.cond(c.sum() > 0, lambda c: c + 1, lambda c: c - 1, c)


def _mlp(w1, w2, x):
    def loss(w1, w2):
        return np.mean((np.maximum(x @ w1, 0) @ w2) ** 2)
    g1, g2 = spmd.grad(loss, argnums=(0, 1))(w1, w2)
    return w1 - 0.1 * g1, w2 - 0.1 * g2


def _stencil(u):
    for _ in range(3):
        u = u.copy()
        u[1:-1, 1:-1] = 0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:])
    return u


CASES = {
    "loops": (_loops, lambda m: ((np.ones((64, 32), np.float32), np.ones((32, 16), np.float32)),
                                 (m.sharding("x", None), None))),
    "mlp": (_mlp, lambda m: ((np.ones((32, 64), np.float32), np.ones((64, 8), np.float32),
                              np.ones((128, 32), np.float32)), (None, None, m.sharding("x", None)))),
    "stencil": (_stencil, lambda m: ((np.arange(48 * 40, dtype=np.float64).reshape(48, 40),),
                                     (m.sharding("x", None),))),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("devices", [1, 2])
def test_the_figures_before_and_after_compiling_are_the_same(case, devices):
    mesh = spmd.Mesh((devices,), ("x",))
    fn, make = CASES[case]
    args, shardings = make(mesh)
    low = spmd.jit(fn, mesh=mesh, in_shardings=shardings, backend="llvm").lower(*args)
    planned, planned_peak = low.memory(), low.memory_profile().peak_bytes
    assert low._exe is None and not low.planned().built          # nothing compiled for them
    low.compile()
    assert low.planned() is low._exe and low._exe.built
    assert low.memory() == planned and low.memory_profile().peak_bytes == planned_peak
    assert planned["peak_bytes"] > 0


def test_an_unbuilt_executable_does_not_run():
    mesh = spmd.Mesh((1,), ("x",))
    fn, make = CASES["loops"]
    args, shardings = make(mesh)
    low = spmd.jit(fn, mesh=mesh, in_shardings=shardings, backend="llvm").lower(*args)
    with pytest.raises(SpmdError, match="planned without its kernels"):
        low.planned().run({}, None)
