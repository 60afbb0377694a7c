"""np.r_ and np.c_ on traced values trace with numpy's rules (no graph break): items made
at least ndmin-d, 1-d items as columns in np.c_, ranges from slices, scalars promoting as
numpy's do, the leading string's directives; the same values, shapes and dtypes as numpy,
without a mesh and split over one."""
import warnings

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import spmd

MESH = spmd.Mesh((2,), ("d",))


def _check(f, *args, shardings=None):
    want = f(*args)
    with warnings.catch_warnings():
        warnings.simplefilter("error")            # a graph break (FallbackWarning) fails
        got = [spmd.jit(f)(*args)]
        if shardings is not None:
            got.append(spmd.jit(f, in_shardings=shardings)(*args))
    for g in got:
        g = np.asarray(g)
        assert g.shape == want.shape and g.dtype == want.dtype, (g.shape, g.dtype, want.shape, want.dtype)
        np.testing.assert_array_equal(g, want)


X = np.arange(12.0).reshape(4, 3) - 5.0
V = np.arange(4.0) * 0.5
SPLIT = (MESH.sharding("d", None), MESH.sharding("d"))

FORMS = {
    "design matrix": lambda x, v: np.c_[np.ones(x.shape[0]), x],
    "columns": lambda x, v: np.c_[v, v * 2, v.astype(np.int32)],
    "rows and scalars": lambda x, v: np.r_[v, 0.5, v[:2], 3],
    "a range": lambda x, v: np.r_[v, 1:4, -1],
    "a linspace": lambda x, v: np.r_[v, 0:1:5j],
    "stacked as rows": lambda x, v: np.r_["0,2", v, v],
    "1-d as columns": lambda x, v: np.r_["1,2,0", v, v],
    "ndmin 3": lambda x, v: np.r_["-1,3,1", x, x],
    "axis only": lambda x, v: np.r_["1", x, x[:, :1]],
    "2-d rows": lambda x, v: np.r_[x, x[:1]],
    "0-d items": lambda x, v: np.c_[x.sum(), 2.0],
    "float32 and a Python float": lambda x, v: np.r_[v.astype(np.float32), 1.5],
    "int32 and a Python int": lambda x, v: np.r_[v.astype(np.int32), 7],
}


@pytest.mark.parametrize("form", sorted(FORMS))
def test_forms_match_numpy(form):
    _check(FORMS[form], X, V, shardings=SPLIT)


def test_matrix_directive_says_it_is_not_traced():
    with pytest.raises(NotImplementedError, match="matrix"):
        spmd.jit(lambda v: np.r_["r", v, v])(V)


def test_numpy_keys_are_numpys_own_while_tracing():
    def f(x):
        k = np.r_[0:3, 7]                 # no traced item: numpy's array, a constant index
        assert type(k) is np.ndarray
        return x[k % 4]
    _check(f, V)


@settings(max_examples=25, deadline=None)
@given(st.data())
def test_random_keys_match_numpy(data):
    n = data.draw(st.integers(2, 5)) * 2
    kinds = data.draw(st.lists(st.sampled_from(["traced1", "traced2", "const1", "const2", "scalar"]),
                               min_size=1, max_size=4))
    ctor = data.draw(st.sampled_from(["r", "c"]))
    dtype = data.draw(st.sampled_from([np.float64, np.float32, np.int64]))
    if ctor == "r" and any(k.endswith("2") for k in kinds):
        kinds = [k[:-1] + "2" if k != "scalar" else "const2" for k in kinds]    # r_ needs equal ranks
    a = (np.arange(n * 3).reshape(n, 3) % 7).astype(dtype)
    b = (np.arange(n) % 5).astype(dtype)

    def f(a, b):
        items = []
        for k in kinds:
            items.append({"traced1": b, "traced2": a, "const1": np.arange(n) * 1.0,
                          "const2": np.ones((n, 2), np.float32), "scalar": 2}[k])
        if "traced1" not in kinds and "traced2" not in kinds:
            items.append(b)
        return (np.r_ if ctor == "r" else np.c_)[tuple(items)]
    try:
        f(a, b)
    except ValueError:
        return                                   # shapes numpy refuses to join
    _check(f, a, b, shardings=(MESH.sharding("d", None), MESH.sharding("d")))
