"""np.take from a numpy array (a lookup table made before the function) at traced indices
traces as a gather from a constant: numpy's dispatch looks at the table alone, so numpy
would need the indices' values (a graph break)."""
import warnings

import numpy as np
from hypothesis import given, settings, strategies as st

import spmd

MESH = spmd.Mesh((2,), ("d",))
TABLE = np.random.default_rng(0).standard_normal((7, 5))


@settings(max_examples=20, deadline=None)
@given(st.data())
def test_take_from_a_numpy_table_at_traced_indices(data):
    axis = data.draw(st.sampled_from([None, 0, 1, -1]))
    mode = data.draw(st.sampled_from(["raise", "wrap", "clip"]))
    n = TABLE.size if axis is None else TABLE.shape[axis]
    hi = n if mode == "raise" else n + 4
    idx = np.asarray(data.draw(st.lists(st.integers(-n if mode != "clip" else 0, hi - 1), min_size=4, max_size=4)),
                     dtype=np.int64).reshape(2, 2)
    as_list = data.draw(st.booleans())
    table = TABLE.tolist() if as_list else TABLE

    def f(i):
        return np.take(table, i, axis=axis, mode=mode) * 2.0
    want = f(idx)
    with warnings.catch_warnings():
        warnings.simplefilter("error")                # a graph break fails
        outs = [spmd.jit(f)(idx), spmd.jit(f, in_shardings=(MESH.sharding("d", None),))(idx)]
    for got in outs:
        got = np.asarray(got)
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
