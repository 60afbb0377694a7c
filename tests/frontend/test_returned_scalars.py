"""`return float(x), ...` (frontend/returned_scalars.py): a Python number made from a traced
value only to be returned is an output of the one compiled program (no graph break), turned
into numpy's Python float / int after the run, and so are `x.item()` and numpy's scalar
types (`np.float32(x)`: numpy's scalar of that type); every other use keeps its graph
break, with numpy's values."""
import warnings

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import spmd
from spmd.errors import FallbackWarning


def returns_both(x):
    y = x * 2
    return float(y.sum()), y, int(x.max())


def returns_one(x):
    return float(np.linalg.norm(x))


def run(f, x):
    """(result, number of FallbackWarnings) of spmd.jit(f)(x)"""
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        got = spmd.jit(f)(x)
    return got, sum(issubclass(w.category, FallbackWarning) for w in rec)


@settings(max_examples=10, deadline=None)
@given(n=st.integers(1, 9), seed=st.integers(0, 99))
def test_a_returned_float_is_an_output_of_one_program(n, seed):
    x = np.random.default_rng(seed).standard_normal(n)
    f = spmd.jit(returns_both, fallback=False)      # (a graph break would raise)
    for arg in (x, x + 1):                           # the value comes from each run, not the trace
        s, y, m = f(arg)
        want = returns_both(arg)
        assert type(s) is float and type(m) is int
        assert s == pytest.approx(want[0], rel=1e-12) and m == want[2]
        np.testing.assert_array_equal(np.asarray(y), want[1])
    r = spmd.jit(returns_one, fallback=False)(x)
    assert type(r) is float and r == pytest.approx(returns_one(x), rel=1e-12)


def returns_items_and_numpy_scalars(x):
    y = x * 2
    return y.sum().item(), np.float32(y.mean()), y, np.int32(x.max()), np.float64(x.min()), (x > 0).all().item()


def test_item_and_numpy_scalar_types_returned_are_outputs_of_one_program():
    x = np.random.default_rng(1).standard_normal(6)
    f = spmd.jit(returns_items_and_numpy_scalars, fallback=False)
    for arg in (x, x + 1, x * 3):
        got, want = f(arg), returns_items_and_numpy_scalars(arg)
        for g, w in zip(got, want):
            assert type(g) is type(w), (type(g), type(w))
            np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-6)


def items_in_arithmetic(x):
    return x.sum().item() + 1.0, np.float32(x.sum()) * 2


def assigned_first(x):
    s = float(x.sum())
    return s, x


def used_in_arithmetic(x):
    return float(x.sum()) + 1.0


def in_a_list(x):
    return [float(x.sum())]


def helper(x):
    return float(x.sum())


def through_a_helper(x):
    return helper(x) * 2


def shadowed(x, float=np.float64):
    return float(x.sum())


def in_a_branch(x):
    if float(x.sum()) > 0:
        return x + 1
    return x - 1


def finally_returns_another(x):
    try:
        return float(x.sum()), x
    finally:
        return x * 2, x             # noqa: B012 (what numpy returns: this)


@pytest.mark.parametrize("f", [assigned_first, used_in_arithmetic, in_a_list, through_a_helper, in_a_branch,
                               finally_returns_another, items_in_arithmetic])
def test_any_other_use_keeps_the_graph_break_with_numpys_value(f):
    x = np.arange(5.0) - 1
    got, breaks = run(f, x)
    assert breaks >= 1
    want = f(x)
    for g, w in zip(got if isinstance(got, (tuple, list)) else [got], want if isinstance(want, (tuple, list)) else [want]):
        np.testing.assert_allclose(np.asarray(g), w)
    if f is not finally_returns_another:         # (its finally: discards the error too)
        with pytest.raises(spmd.errors.ConcreteValueError):
            spmd.jit(f, fallback=False)(x)


def test_a_name_float_that_is_not_the_builtin_is_not_taken_for_it():
    x = np.arange(5.0)
    got, breaks = run(shadowed, x)
    assert breaks >= 1 and float(np.asarray(got)) == 10.0


@pytest.mark.parametrize("mesh", [None, "x"])
def test_a_returned_python_constant_is_numpys_python_number(mesh):
    """A Python number the function returns as it made it (a count a loop never raised, a
    flag) is that number under jit, as numpy gives it, not a 0-d array."""
    def f(x, n):
        its = 0
        for _ in range(n):
            its += 1
        return x * 2, its, 2.5, True, 1j
    x = np.arange(4.0)
    kw = {} if mesh is None else {"in_shardings": (spmd.Mesh((2,), ("x",)).sharding("x"),)}
    for n in (0, 3):
        got, want = spmd.jit(f, static_argnums=(1,), **kw)(x, n), f(x, n)
        np.testing.assert_array_equal(np.asarray(got[0]), want[0])
        assert [(type(g), g) for g in got[1:]] == [(type(w), w) for w in want[1:]]


def test_a_numpy_scalar_the_function_made_is_numpys_scalar():
    def f(w):
        s = np.float32(w.sum())             # a graph break: not only returned
        return w, s, np.int64(3), np.float64(2.5), np.bool_(True)
    got, want = run(f, np.arange(4.0))[0], f(np.arange(4.0))
    assert [type(g) for g in got[1:]] == [type(v) for v in want[1:]]
    assert list(got[1:]) == list(want[1:])
