"""A float sum's order is the op's own (element i into partial i % lanes, combined in a
fixed tree), whatever kernel it is fused into, and a multiply-add is fused or not by
the CPU alone: the same reduction alone or next to other outputs gives the same bits
(a recomputed forward pass runs in other kernels than the original)."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import spmd


@settings(max_examples=12, deadline=None)
@given(rows=st.sampled_from([1, 7, 64, 300, 512]), cols=st.sampled_from([5, 16, 64, 100, 256]),
       axis=st.sampled_from([None, 0, 1]), dtype=st.sampled_from(["float32", "float64"]), seed=st.integers(0, 99))
def test_a_sum_fused_with_other_outputs_is_the_same_bits(rows, cols, axis, dtype, seed):
    """A loss's mean, alone, and next to the difference the backward pass keeps (the
    kernel then also stores it: the vectoriser once kept another number of partial sums)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, cols)).astype(dtype)
    y = rng.standard_normal((rows, 2 * cols)).astype(dtype)

    def sq(x, y):
        return (np.maximum(x, 0) - y[:, :cols]) ** 2
    alone = spmd.jit(lambda x, y: np.mean(sq(x, y), axis=axis))(x, y)
    with_more = spmd.jit(lambda x, y: (np.mean(sq(x, y), axis=axis), np.maximum(x, 0) - y[:, :cols]))(x, y)
    tanhs = spmd.jit(lambda x, y: (np.mean(sq(x, y), axis=axis), np.tanh(x) * 3))(x, y)
    assert np.array_equal(np.asarray(alone), np.asarray(with_more[0]))
    assert np.array_equal(np.asarray(alone), np.asarray(tanhs[0]))
    np.testing.assert_allclose(np.asarray(alone), np.mean(sq(x, y), axis=axis),
                               rtol=1e-4 if dtype == "float32" else 1e-10, atol=1e-5 if dtype == "float32" else 1e-12)


def test_a_mean_next_to_a_kept_value_is_the_same_bits():
    x = np.random.default_rng(0).standard_normal((512, 64)).astype(np.float32)
    y = np.random.default_rng(1).standard_normal((512, 128)).astype(np.float32)
    alone = spmd.jit(lambda x, y: np.mean((np.maximum(x, 0) - y[:, :64]) ** 2))(x, y)
    both = spmd.jit(lambda x, y: (np.mean((np.maximum(x, 0) - y[:, :64]) ** 2), np.maximum(x, 0) - y[:, :64]))(x, y)
    assert np.array_equal(np.asarray(alone), np.asarray(both[0]))


@pytest.mark.parametrize("n", [4096, 4100])
def test_a_long_sum_is_summed_in_lanes_and_close_to_numpys(n):
    x = np.random.default_rng(1).standard_normal(n).astype(np.float32)
    got = float(spmd.jit(lambda x: np.sum(x))(x))
    want = float(np.sum(x.astype(np.float64)))
    assert abs(got - want) <= 1e-4 * np.abs(x).sum()
