"""x[idx[m]] = v[m] -- a write whose index is a selection through a traced mask, with a
value selected by the same mask (or a scalar) -- is a scatter with the unselected writes
dropped: no size from the data, no graph break. numpy keeps the last write where an index
repeats, and so must we (compaction keeps order). x[i[m], j[m]] reads and x[idx[m]] += v[m]
too. Compared with numpy on sharded inputs, with repeated indices; fallback=False, so a
graph break would fail the test."""
import warnings

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import spmd
from spmd.errors import FallbackWarning

MESH = spmd.Mesh((4,), ("d",))


def run(f, *args):
    want = f(*[a.copy() for a in args])
    shardings = tuple(MESH.sharding("d", *([None] * (a.ndim - 1))) for a in args)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        got = spmd.jit(f, in_shardings=shardings, fallback=False)(*[a.copy() for a in args])
    wants = want if isinstance(want, tuple) else (want,)
    gots = got if isinstance(got, tuple) else (got,)
    for g, w in zip(gots, wants):
        g = g.numpy() if hasattr(g, "numpy") else np.asarray(g)
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, w.shape, g.dtype, w.dtype)
        np.testing.assert_array_equal(g, w)


@settings(max_examples=12, deadline=None)
@given(st.integers(0, 2 ** 31 - 1), st.sampled_from([3, 7, 20]))
def test_write_through_selected_indices_keeps_numpys_last_write(seed, n):
    rng = np.random.default_rng(seed)
    idx = rng.integers(-n, n, 16)            # repeats (16 writes into n), negative ones too
    val = rng.integers(-50, 50, 16).astype(np.float64)
    key = rng.random(16)

    def f(idx, val, key):
        m = key > 0.4
        out = np.full(n, -1.0)
        out[idx[m]] = val[m]
        return out
    run(f, idx, val, key)


def test_bellman_ford_predecessors():
    src = np.array([0, 1, 2, 2, 3, 1, 0, 3])
    dst = np.array([1, 2, 3, 3, 1, 3, 1, 0])
    w = np.array([1.0, 1.0, 1.0, 5.0, 7.0, 2.0, 1.0, 9.0])

    def f(src, dst, w):
        d = np.array([0.0, 1.0, 2.0, 3.0])
        tight = d[src] + w == d[dst]
        pred = np.full(4, -1)
        pred[dst[tight]] = src[tight]
        return pred
    run(f, src, dst, w)


def test_two_selected_indices_a_scalar_and_selected_rows():
    i = np.array([0, 1, 1, 3, 2, 0, 3, 3])
    j = np.array([2, 0, 0, 1, 2, 2, 1, 0])
    v = np.arange(8.0)
    lab = np.array([0, -1, 1, 2, -1, 0, 1, 1])

    def f(i, j, v, lab):
        known = lab >= 0
        Y = np.zeros((4, 3))
        Y[i[known], j[known]] = 1                     # a scalar
        Z = np.zeros((4, 3))
        Z[np.arange(8)[known] % 4, lab[known]] = v[known]
        R = np.zeros((4, 3))
        R[i[known], :] = np.arange(3.0) * 2           # whole rows: a row broadcast over the selection
        return Y, Z, R
    run(f, i, j, v, lab)


def test_read_and_add_through_selected_indices():
    idx = np.array([0, 2, 2, 5, 1, 0, 2, 5])
    v = np.arange(1.0, 9.0)

    def f(idx, v):
        m = v % 3 != 0
        x = np.arange(6.0)
        got = x[idx[m]].sum()                 # a read through the selection, reduced
        x[idx[m]] += v[m]                     # buffered: the last write wins where idx repeats
        return x, got
    run(f, idx, v)


def test_a_value_per_selected_element_from_another_array_still_takes_the_length():
    # v does not select through m: numpy pairs by compacted position, which needs the count
    idx = np.array([0, 2, 2, 3])

    def f(idx):
        x = np.zeros(4)
        x[idx[idx > 0]] = np.ones(4)[:3]
        return x
    with pytest.raises(Exception):
        spmd.jit(f, in_shardings=(MESH.sharding("d"),), fallback=False)(idx)
