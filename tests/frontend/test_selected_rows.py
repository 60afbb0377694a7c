"""`np.argwhere(c)[k]` and `x[mask][k]` for a mask over x's leading dims (a row of the
selection, for a Python int k) trace without taking a length from the data: the k-th
selected row found where it is, numpy's values, dtype and shape, on a mesh too."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import spmd

MESH = spmd.Mesh((2,), ("d",))


def _compare(f, x):
    want = f(x)
    split = MESH.sharding(*(["d"] + [None] * (x.ndim - 1)))
    for j in (spmd.jit(f, fallback=False), spmd.jit(f, fallback=False, in_shardings=(split,))):
        got = j(x)
        for g, w in zip(got, want, strict=True):
            g = np.asarray(g)
            assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, g.dtype, w.shape, w.dtype)
            np.testing.assert_array_equal(g, w)


@settings(max_examples=15, deadline=None)
@given(st.data())
def test_a_selected_row_matches_numpy(data):
    shape = data.draw(st.sampled_from([(6,), (4, 5), (2, 3, 4), (6, 1)]))
    seed = data.draw(st.integers(0, 2 ** 16))
    x = np.random.default_rng(seed).integers(0, 3, shape).astype(np.float64)
    x.flat[seed % x.size] = 2.0                     # at least one selected
    n_pos = int((x == 2).sum())
    n_rows = int((x[..., 0] if x.ndim > 1 else x) .astype(bool).sum()) if x.ndim > 1 else n_pos
    k = data.draw(st.integers(-n_pos, n_pos - 1))
    if x.ndim > 1:
        rows = x[..., 0] > 0
        if not rows.any():
            x[(0,) * (x.ndim - 1)] = 1.0
        n_rows = int((x[..., 0] > 0).sum())
    r = data.draw(st.integers(-n_rows, n_rows - 1))

    def f(x):
        out = [np.argwhere(x == 2)[k]]
        if x.ndim > 1:
            out.append(x[x[..., 0] > 0][r])              # a row of x
        return out
    _compare(f, x)


def test_first_position_of_the_maximum_as_an_index():
    def f(x):
        i, j = np.argwhere(x == np.max(x))[0]        # numpy's first, in C order
        m = np.zeros_like(x).astype(bool)
        m[i, j] = True
        return m, x[x[:, 1] > 0.5, 1:][-1]
    x = np.random.default_rng(1).random((6, 4))
    x[4, 2] = x[2, 3] = x.max() + 1.0
    x[0, 1] = 0.9
    _compare(f, x)


def test_the_whole_argwhere_still_needs_its_length():
    with pytest.raises(spmd.errors.TraceError, match=r"test_selected_rows\.py:\d+"):
        spmd.jit(lambda x: np.argwhere(x > 0.5), fallback=False)(np.random.default_rng(0).random((4, 3)))
