"""Python's math functions on traced 0-d values under spmd.jit: math's values (a float64,
weak as a Python float), and math's ValueError / OverflowError where math raises and numpy
would give NaN or inf, raised after the run naming the line. Checked against math itself
on edge values, one function of one or two arguments at a time."""
import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import spmd
from spmd.errors import FallbackWarning
from spmd.frontend.math_module import FUNCTIONS

TWO = {"pow", "atan2", "copysign"}
EDGES = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, -2.5, 3.0, 1e-300, 700.0, 710.0, -710.0, 1e300, -1e300,
         math.inf, -math.inf, math.nan]
values = st.one_of(st.sampled_from(EDGES), st.floats(-800, 800))


def _math(name, args):
    try:
        return getattr(math, name)(*args)
    except (ValueError, OverflowError) as e:
        return type(e)


@settings(max_examples=25, deadline=None)
@given(name=st.sampled_from(sorted(FUNCTIONS)), a=values, b=values)
def test_math_of_traced_values_is_maths(name, a, b):
    args = (a, b) if name in TWO else (a,)
    want = _math(name, args)
    f = spmd.jit(lambda xs: getattr(math, name)(*[xs[i] for i in range(len(args))]))
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)      # traced: no value taken from the data
        if isinstance(want, type):
            with pytest.raises(want, match=r"math (domain|range) error \(at test_math_module\.py:\d+\)"):
                f(np.array(args))
            return
        got = f(np.array(args))
    assert type(got) is float
    np.testing.assert_allclose(got, want, rtol=1e-13, equal_nan=True)


def test_a_math_result_is_weak_as_a_python_float():
    # NEP 50: math.sqrt(...) * a float32 array stays float32, as in numpy
    x = np.arange(1.0, 5.0, dtype=np.float32)
    f = lambda x: math.sqrt(x.sum()) * x + math.exp(x[0]) * np.ones(4, np.float32)
    got = spmd.jit(f)(x)
    assert np.asarray(got).dtype == np.float32
    np.testing.assert_allclose(np.asarray(got), f(x), rtol=1e-6)


def test_a_likelihood_written_with_math_compiles_whole_on_a_mesh():
    def likelihood(X):
        m, v = X.mean(0), X.var(0)
        out = 1.0
        for i in range(4):
            for j in range(X.shape[1]):
                out *= math.exp(-math.pow(X[i, j] - m[j], 2) / (2 * v[j])) / math.sqrt(2 * math.pi * v[j])
        return out
    X = np.random.default_rng(0).standard_normal((8, 3))
    mesh = spmd.Mesh((2,), ("a",))
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        got = spmd.jit(likelihood, in_shardings=(mesh.sharding("a", None),))(X)
    assert type(got) is float and np.isclose(got, likelihood(X), rtol=1e-12)


def test_in_a_loop_body_math_needs_the_value_as_before():
    # a body runs many times: its error cannot be one check after the run, so math is math's
    def body(i, c):
        return c + math.sqrt(c)
    with pytest.raises(spmd.errors.ConcreteValueError):
        spmd.jit(lambda x: spmd.fori_loop(0, 3, body, x.sum()), fallback=False)(np.ones(3))
    assert math.sqrt is getattr(math, "sqrt") and math.sqrt(4.0) == 2.0      # math is math's outside tracing
    assert not hasattr(math.sqrt, "spmd_original")


def test_pow_and_atan2_on_every_pair_of_edge_values():
    f = spmd.jit(lambda xs: (math.pow(xs[0], xs[1]), math.atan2(xs[0], xs[1])))
    for a in EDGES:
        for b in EDGES:
            want = [_math("pow", (a, b)), _math("atan2", (a, b))]
            if isinstance(want[0], type):
                with pytest.raises(want[0]):
                    f(np.array([a, b]))
                continue
            got = f(np.array([a, b]))
            np.testing.assert_allclose(got, want, rtol=1e-13, equal_nan=True, err_msg=f"{a}, {b}")


def test_a_lowered_program_called_directly_raises_maths_error_and_gives_its_results():
    # f.lower(x) is a program of its own: called, it raises what jit would, and gives the
    # results only (not the conditions it computes for the errors)
    f = spmd.jit(lambda x: x * math.sqrt(x.sum()))
    low = f.lower(np.ones(4))
    (got,) = low(np.ones(4))
    np.testing.assert_allclose(np.asarray(got), np.ones(4) * 2.0)
    with pytest.raises(ValueError, match="math domain error"):
        low(-np.ones(4))
