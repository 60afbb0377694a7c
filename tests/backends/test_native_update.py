"""A one-element write through a view (views.py: a dynamic_update_slice at constant
starts) runs as native copies (steps.update_instrs), with numpy's values, for every
item size and position, whether the operand is an argument, a temporary or a view."""
import numpy as np
from hypothesis import given, settings, strategies as st

import spmd
from spmd.backends.llvm.schedule import Segment


def python_steps(f, *args) -> int:
    """steps of the program's schedule that run from Python"""
    exe = spmd.jit(f).lower(*args).compile()
    return sum(1 for it in exe.schedule(1).items if not isinstance(it, Segment))


@settings(max_examples=25, deadline=None)
@given(shape=st.lists(st.integers(1, 5), min_size=1, max_size=3),
       dtype=st.sampled_from([np.bool_, np.float16, np.int32, np.float32, np.float64, np.complex128]),
       seed=st.integers(0, 99), source=st.sampled_from(["argument", "temporary", "transposed"]))
def test_one_element_writes_equal_numpy(shape, dtype, seed, source):
    rng = np.random.default_rng(seed)
    x = np.asarray((rng.random(shape) * 10).astype(dtype) if dtype != np.bool_ else rng.random(shape) < 0.5)
    at = tuple(int(rng.integers(-n, n)) for n in shape)
    at2 = tuple(int(rng.integers(0, n)) for n in shape)

    def f(x):
        y = x if source == "argument" else (x + 1 if source == "temporary" else x.T.T)
        y = y.copy() if source == "argument" else y
        y[at] = x[at2] * 2 if dtype != np.bool_ else ~x[at2]
        y[at2] = 7 if dtype != np.bool_ else True
        return y

    xj = x.copy()             # (a write through x.T.T writes the argument, in numpy and jit alike)
    np.testing.assert_array_equal(np.asarray(spmd.jit(f)(xj)), f(x))
    np.testing.assert_array_equal(xj, x)


def test_a_one_element_write_needs_no_python_step():
    def f(x):
        y = x * 2
        y[1, 2] = x[0, 0]
        return y + 1

    x = np.arange(12.0).reshape(3, 4)
    np.testing.assert_array_equal(np.asarray(spmd.jit(f)(x)), f(x))
    assert python_steps(f, x) == 0
