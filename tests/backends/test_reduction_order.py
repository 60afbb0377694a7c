"""A float sum's order is the op's own (element i into partial i % lanes, combined in a
fixed tree), whatever kernel it is fused into, and a multiply-add is fused or not by
the CPU alone: the same reduction alone or next to other outputs gives the same bits
(a recomputed forward pass runs in other kernels than the original)."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import spmd


@settings(max_examples=12, deadline=None)
@given(rows=st.sampled_from([1, 7, 64, 300]), cols=st.sampled_from([5, 16, 32, 100, 256]),
       axis=st.sampled_from([None, 0, 1]), dtype=st.sampled_from(["float32", "float64"]), seed=st.integers(0, 99))
def test_a_sum_fused_with_other_outputs_is_the_same_bits(rows, cols, axis, dtype, seed):
    x = np.random.default_rng(seed).standard_normal((rows, cols)).astype(dtype)
    alone = spmd.jit(lambda x: np.sum(np.tanh(x) * 3 - x, axis=axis))(x)
    with_more = spmd.jit(lambda x: (np.sum(np.tanh(x) * 3 - x, axis=axis), np.tanh(x) * 3 - x, x * x))(x)
    assert np.array_equal(np.asarray(alone), np.asarray(with_more[0]))
    np.testing.assert_allclose(np.asarray(alone), np.sum(np.tanh(x) * 3 - x, axis=axis),
                               rtol=1e-4 if dtype == "float32" else 1e-10, atol=1e-3 if dtype == "float32" else 1e-9)


@pytest.mark.parametrize("n", [4096, 4100])
def test_a_long_sum_is_summed_in_lanes_and_close_to_numpys(n):
    x = np.random.default_rng(1).standard_normal(n).astype(np.float32)
    got = float(spmd.jit(lambda x: np.sum(x))(x))
    want = float(np.sum(x.astype(np.float64)))
    assert abs(got - want) <= 1e-4 * np.abs(x).sum()
