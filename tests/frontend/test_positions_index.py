"""np.nonzero(c)[0] / np.where(c) of a traced 1-d condition as an index next to integers
and slices -- `pos[np.where(pos[:, d] < 0), d] *= -1`, a reflecting wall -- selects what c
selects: it traces as the mask c (the one-element tuple as c after a None, numpy's row of
positions), with no length from the data and no graph break. Compared with numpy on
sharded inputs, fallback=False (a graph break fails the test); where the positions do not
index a dim of c's length, or the row's unit dim is not where a None would put it, they are
compacted, with numpy's values and shapes (a graph break)."""
import warnings

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import spmd
from spmd.errors import FallbackWarning

MESH = spmd.Mesh((2,), ("d",))


def run(f, *args, breaks=False):
    want = f(*[a.copy() for a in args])
    shardings = tuple(MESH.sharding("d", *([None] * (a.ndim - 1))) for a in args)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore" if breaks else "error", FallbackWarning)
        got = spmd.jit(f, in_shardings=shardings, fallback=breaks)(*[a.copy() for a in args])
    wants = want if isinstance(want, tuple) else (want,)
    gots = got if isinstance(got, tuple) else (got,)
    for g, w in zip(gots, wants):
        g = g.numpy() if hasattr(g, "numpy") else np.asarray(g)
        w = np.asarray(w)
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, w.shape, g.dtype, w.dtype)
        np.testing.assert_allclose(g, w, rtol=1e-12)


def reflect(pos, vel):
    for d in range(pos.shape[1]):
        is_out = np.where(pos[:, d] < 0)
        pos[is_out, d] *= -1
        vel[is_out, d] *= -1
        is_out = np.where(pos[:, d] > 1)
        pos[is_out, d] = 1 - (pos[is_out, d] - 1)
        vel[is_out, d] *= -1
    return pos, vel


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 2 ** 31 - 1), st.integers(1, 9), st.integers(1, 3))
def test_reflecting_walls_through_np_where_positions_compile_with_numpys_values(seed, n, dims):
    rng = np.random.default_rng(seed)
    run(reflect, rng.uniform(-1, 2, (n, dims)), rng.standard_normal((n, dims)))


FORMS = {
    "nonzero[0], int": lambda x: (x.__setitem__((np.nonzero(x[:, 0] > 0)[0], 1), 7.0), x)[1],
    "tuple, int, op=": lambda x: (x.__setitem__((np.where(x[:, 1] > 0), 0), x[np.where(x[:, 1] > 0), 0] * 3), x)[1],
    "sum of a read": lambda x: x[np.where(x[:, 0] > 0), 2].sum() + x[np.nonzero(x[:, 0] > 0)[0], 1].sum(),
    "slice, then positions": lambda x: (x.__setitem__((slice(None), np.where(x[0] > 0)), -1.0), x)[1],
    "int, positions row": lambda x: (x.__setitem__((1, np.where(x[0] > 0)), 5.0), x)[1],
}


@pytest.mark.parametrize("form", list(FORMS))
@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 2 ** 31 - 1))
def test_positions_next_to_integers_and_slices(form, seed):
    x = np.random.default_rng(seed).standard_normal((6, 6))
    run(FORMS[form], x)


COMPACTED = {
    # the read itself returned: numpy's (1, k) row of values
    "row read returned": lambda x: x[np.where(x[:, 0] > 0), 1],
    # positions of a shorter condition: numpy indexes the first rows
    "shorter condition": lambda x: x[np.nonzero(x[:3, 0] > 0)[0], 1],
    # the row's unit dim goes first in numpy (index entries not side by side)
    "row, slice, int": lambda x: x[np.where(x[:, 0, 0] > 0), :, 1],
}


@pytest.mark.parametrize("form", list(COMPACTED))
def test_positions_elsewhere_are_compacted_with_numpys_shape(form):
    x = np.random.default_rng(3).standard_normal((6, 6, 3) if form == "row, slice, int" else (6, 6))
    run(COMPACTED[form], x, breaks=True)
