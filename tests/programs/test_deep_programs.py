"""No recursion limits: a 10,000-op elementwise chain traces, optimises, fuses into one
LLVM kernel and runs, agreeing with numpy (issue #16; the codegen once recursed once
per op and hit Python's limit near 330 ops)."""
import numpy as np

import spmd


def chain(n):
    def f(x, y):
        for i in range(n):
            x = np.tanh(x) if i % 2 else x + y
        return x
    return f


def test_ten_thousand_elementwise_ops():
    f = chain(10_000)
    x, y = np.linspace(-1, 1, 16), np.full(16, 0.25)
    np.testing.assert_allclose(np.asarray(spmd.jit(f)(x, y)), f(x, y), rtol=1e-12, atol=1e-12)
