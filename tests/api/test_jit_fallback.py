"""spmd.jit falls back instead of failing: when tracing needs the value of a traced array
(float(), `if` on data, math.sqrt, .item()), the function runs eagerly
on the sharded arrays with numpy's results and a FallbackWarning that names the function
and the line, once; spmd.jit(..., fallback=False) keeps the error."""
import inspect
import math
import warnings

import numpy as np
import pytest

import spmd
from spmd.jit import graph_breaks
from spmd.errors import ConcreteValueError, FallbackWarning

MESH = spmd.Mesh((2,), ("x",))


def with_float(x):
    s = float(np.sum(x))                                    # NEEDS
    return x * s


def with_if(x):
    if np.sum(x) > 0:                                       # NEEDS
        return x - 1
    return x + 1


def with_floor(x):
    return x / math.floor(np.sum(x * x))                    # NEEDS (math.floor gives a Python int)


def with_item(x):
    return x + x[1, 2].item()                               # NEEDS


CASES = [with_float, with_if, with_floor, with_item]


def test_np_array_of_a_traced_value_needs_no_value():
    def with_np_array(x):
        return np.array(x)[::-1] * 2
    x = np.arange(12.0).reshape(4, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        got = spmd.jit(with_np_array, in_shardings=(MESH.sharding("x", None),))(x)
    np.testing.assert_array_equal(np.asarray(got), with_np_array(x))


def needs_line(fn):
    src, first = inspect.getsourcelines(fn)
    return first + next(i for i, ln in enumerate(src) if "# NEEDS" in ln)


def fallbacks(record):
    return [w for w in record if issubclass(w.category, FallbackWarning)]


@pytest.mark.parametrize("mesh", [None, MESH])
@pytest.mark.parametrize("fn", CASES)
def test_a_function_that_needs_a_value_runs_eagerly_with_one_warning(fn, mesh):
    x = np.arange(12.0).reshape(4, 3)
    f = spmd.jit(fn, in_shardings=(mesh.sharding("x", None),) if mesh else None)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("default")
        got = [f(x), f(x + 1), f(x)]
    for g, a in zip(got, (x, x + 1, x)):
        assert isinstance(g, spmd.Array) == (mesh is not None)
        np.testing.assert_allclose(np.asarray(g), fn(a), rtol=1e-14)
    ws = fallbacks(rec)
    assert len(ws) == 1, [str(w.message) for w in ws]
    w = ws[0]
    assert (w.filename, w.lineno) == (__file__, needs_line(fn))
    assert f"tracing {fn.__name__} needed the value" in str(w.message) and "fallback=False" in str(w.message)


@pytest.mark.parametrize("fn", CASES)
def test_fallback_false_keeps_the_error(fn):
    f = spmd.jit(fn, fallback=False)
    with pytest.raises(ConcreteValueError, match=f"test_jit_fallback.py:{needs_line(fn)}"):
        f(np.arange(12.0).reshape(4, 3))


def test_the_eager_run_places_the_arguments_as_jit_would_and_keeps_numpys_writes():
    """An argument split by in_shardings arrives as an spmd.Array split that way; a numpy
    argument the function writes sees the write (as under jit and in numpy); static
    arguments and scalars pass as they are."""
    seen = {}

    def f(x, y, k, scale):
        seen["x"] = x.sharding if isinstance(x, spmd.Array) else None
        x[0] = -1.0                                         # numpy writes the caller's array
        for _ in range(graph_breaks.MAX_BREAKS + 1):        # more breaks than pay: it runs eagerly
            big = float(np.max(y)) > k
        if big:
            y = y * scale
        return x.sum() + y.sum()

    x, y = np.arange(8.0).reshape(4, 2), np.ones(4)
    want_x = x.copy()
    want = f(want_x, y, 0, 2.0)
    f_jit = spmd.jit(f, in_shardings=(MESH.sharding("x", None), None, None), static_argnums=2)
    with pytest.warns(FallbackWarning):
        got = f_jit(x, y, 0, 2.0)
    assert seen["x"] == MESH.sharding("x", None)
    np.testing.assert_array_equal(x, want_x)
    assert float(got) == want


def test_lower_still_raises_and_grad_never_falls_back():
    f = spmd.jit(with_if)
    with pytest.raises(ConcreteValueError):
        f.lower(spmd.ShapeDtype((3,), "float64"))       # no data to take the value from
    with pytest.raises(ConcreteValueError):
        spmd.grad(lambda x: np.sum(x) if float(np.sum(x)) > 0 else -np.sum(x))(np.ones(3))
