"""Eager functions whose numpy arguments give the result's structure (positions to insert
or delete, counts to repeat, split points, pad widths, quantiles, bins) run sharded, as
they do under jit where those arguments are constants: nothing gathered, numpy's values."""
import warnings

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import spmd
from spmd.eager import programs as eager

MESH = spmd.Mesh((2,), ("d",))
X = np.arange(48.0).reshape(8, 6) * 0.75 - 3.0

CASES = {
    "insert": lambda a: np.insert(a, np.array([1, 1, 4]), -2.0, axis=1),
    "delete": lambda a: np.delete(a, np.array([0, 3]), axis=1),
    "split": lambda a: np.split(a, np.array([2, 5]), axis=1),
    "array_split": lambda a: np.array_split(a, np.array([1, 4]), axis=1),
    "repeat": lambda a: np.repeat(a, np.array([1, 0, 2, 1, 3, 1]), axis=1),
    "roll": lambda a: np.roll(a, np.array([1, -2]), axis=(0, 1)),
    "pad": lambda a: np.pad(a, np.array([[1, 0], [2, 1]])),
    "partition": lambda a: np.sort(np.partition(a, np.array([1, 3]), axis=1)[:, [1, 3]], axis=1),
    "percentile": lambda a: np.percentile(a, np.array([10.0, 50.0, 90.0]), axis=1),
    "quantile": lambda a: np.quantile(a, np.array([0.25, 0.75]), axis=1),
    "reduceat": lambda a: np.add.reduceat(a, np.array([0, 2, 3]), axis=1),
    "histogram": lambda a: np.histogram(a, bins=np.array([-3.0, 0.0, 10.0, 40.0]))[0],
}


def _leaves(r):
    return list(r) if isinstance(r, (list, tuple)) else [r]


@pytest.mark.parametrize("name", sorted(CASES))
def test_numpy_structure_arguments_run_sharded_eagerly(name):
    f = CASES[name]
    eager.reset_stats()
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)      # a gather (ReshardWarning) fails
        got = f(spmd.device_put(X, MESH.sharding("d", None)))
    assert eager.STATS["fallbacks"] == 0
    want = f(X)
    for g, w in zip(_leaves(got), _leaves(want), strict=True):
        assert isinstance(g, spmd.Array)
        g = np.asarray(g)
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)


@settings(max_examples=15, deadline=None)
@given(st.lists(st.integers(0, 6), min_size=1, max_size=4), st.integers(-5, 5))
def test_each_insert_position_array_gives_numpys_result(positions, value):
    """Positions are part of the program's key: new ones make a program of their own."""
    x = spmd.device_put(X, MESH.sharding("d", None))
    p = np.array(positions)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        got = np.insert(x, p, value, axis=1)
    np.testing.assert_array_equal(np.asarray(got), np.insert(X, p, value, axis=1))


def test_a_large_numpy_argument_still_falls_back_with_a_warning():
    x = spmd.device_put(X, MESH.sharding("d", None))
    p = np.zeros(eager.CONSTANT_ELEMENTS + 1, dtype=np.int64)
    with pytest.warns(UserWarning, match="np.insert"):
        got = np.insert(x, p, 1.0, axis=1)
    np.testing.assert_array_equal(np.asarray(got), np.insert(X, p, 1.0, axis=1))
