"""Graph breaks: where tracing needs a value of the data (float(), `if`, .item(), sizes
that depend on the data), spmd.jit compiles the part before, runs it, takes the value and
traces the rest with it; the program runs compiled, with numpy's values, and each break's
line is warned about once. Programs are kept per value (a tree per signature), bounded."""
import warnings

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import spmd
from spmd.jit import graph_breaks
from spmd.errors import ConcreteValueError, FallbackWarning

MESH = spmd.Mesh((4,), ("d",))
ROWS = MESH.sharding("d", None)


def jitted(fn, **kw):
    kw.setdefault("in_shardings", (MESH.sharding("d"),))
    return spmd.jit(fn, **kw)


def same(got, want):
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, w.shape, g.dtype, w.dtype)
        np.testing.assert_array_equal(g, w)


def test_a_branch_on_data_runs_compiled_and_traces_once_per_value():
    traced = []

    def f(x):
        traced.append(1)
        s = x.sum()
        if s > 0:                      # (returning from the branch: a break, not a cond)
            return x * 2 + float(s > 10)
        return x - 1 + float(s > 10)

    g = jitted(f)
    xs = [np.arange(8.0), -np.arange(8.0), np.arange(8.0) + 1, np.arange(8.0)]
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        for x in xs:
            same(g(x), f(x))
    # tree: s > 0 (True, False); then float(s > 10) on each side: True for both positive inputs
    assert len(traced) == 4 + 2, len(traced)     # 4 numpy calls above, 2 traces
    lines = {w.lineno for w in rec if issubclass(w.category, FallbackWarning)}
    assert len(lines) == 3 and all("graph break" in str(w.message) for w in rec
                                   if issubclass(w.category, FallbackWarning))


def test_item_float_int_and_an_index_from_the_data():
    def f(x):
        k = int(np.argmax(x))
        scale = x[0].item()
        return x[k] * scale, x[: k + 1].sum(), np.roll(x, k)

    g = jitted(f)
    for x in (np.array([1.0, 5.0, 2.0, 0.5, 3.0, 1.0, 0.0, 2.0]), np.array([9.0, 5.0, 2.0, 0.5, 3.0, 1.0, 0.0, 2.0])):
        same(g(x), f(x))


def test_fallback_false_keeps_the_error():
    with pytest.raises(ConcreteValueError, match="float"):
        spmd.jit(lambda x: x * float(x.sum()), fallback=False)(np.ones(4))


def test_a_break_reuses_its_programs_for_known_values():
    calls = []

    def f(x):
        calls.append(1)
        return x / float(np.abs(x).max())

    g = jitted(f)
    x = np.arange(1.0, 9.0)
    for _ in range(3):
        same(g(x), f(x))
    assert len(calls) == 3 + 1


def test_too_many_values_at_one_break_runs_eagerly_with_the_reason():
    g = jitted(lambda x: x * float(x.sum()))
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        for i in range(graph_breaks.MAX_VALUES + 2):
            x = np.arange(8.0) + i
            np.testing.assert_allclose(np.asarray(g(x)), x * x.sum())
    msgs = [str(w.message) for w in rec if issubclass(w.category, FallbackWarning)]
    assert any("runs eagerly" in m and f"{graph_breaks.MAX_VALUES} different values" in m for m in msgs), msgs


def test_a_python_loop_on_data_past_the_limit_runs_eagerly():
    def f(x):
        while True:                   # one break per iteration (a break in a while loop's body
            x = x + 0.25              # is not converted: frontend/loop_conversion.py)
            if x.sum() >= 100:
                break
        return x
    g = jitted(f)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        same(np.asarray(g(np.zeros(8))), f(np.zeros(8)))
    assert any(f"more than {graph_breaks.MAX_BREAKS}" in str(w.message) for w in rec)


def test_explain_lists_the_breaks(capsys):
    def f(x):
        return x * float(x.max())
    x = np.arange(8.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        text = spmd.explain(jitted(f), x)
    assert "graph breaks (1)" in text and "float() -> 7.0" in text


def test_debug_print_in_the_part_before_prints_once(capfd):
    def f(x):
        spmd.debug.print("sum {}", x.sum())
        return x * float(x.max())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        jitted(f)(np.arange(8.0))
    out = capfd.readouterr().out
    assert out.count("sum 28.0") == 1, out


# -- sizes that depend on the data ---------------------------------------------------------
SIZED = {
    "nonzero": lambda x: np.nonzero(x > 2),
    "nonzero_method": lambda x: (x > 2).nonzero()[0] * 2,
    "flatnonzero": lambda x: np.flatnonzero(x % 3 == 0),
    "argwhere": lambda x: np.argwhere(x > 4),
    "argwhere_0d": lambda x: np.argwhere(x.sum() > 36),      # numpy: (1, 0) or (0, 0)
    "where1": lambda x: np.where(x < 3)[0] + 1,
    "unique": lambda x: np.unique(x),
    "unique_all": lambda x: np.unique(x, return_index=True, return_inverse=True, return_counts=True),
    "bincount": lambda x: np.bincount(x),
    "bincount_weights": lambda x: np.bincount(x, weights=x * 0.5, minlength=12),
    "mask_read": lambda x: x[x > 3] * 2,
    "mask_sorted": lambda x: np.sort(x[x % 2 == 0])[::-1],
}


@settings(max_examples=12, deadline=None)
@given(st.lists(st.integers(0, 9), min_size=8, max_size=8))
@pytest.mark.parametrize("name", sorted(SIZED))
def test_sizes_from_the_data_match_numpy(name, values):
    f = SIZED[name]
    x = np.array(values, dtype=np.int64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        got = jitted(f)(x)
    same(got, f(x))


def test_unique_with_nans_and_2d_inverse():
    x = np.array([[np.nan, 1.0, 2.0, np.nan], [2.0, 0.5, 1.0, np.nan]])
    f = lambda x: np.unique(x, return_inverse=True, return_counts=True)   # noqa: E731
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        got = jitted(f, in_shardings=(ROWS,))(x)
    for g, w in zip(got, f(x)):
        np.testing.assert_array_equal(np.asarray(g), w)


def test_bincount_refuses_what_numpy_refuses():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        with pytest.raises(ValueError, match="negative"):
            jitted(np.bincount)(np.array([0, 1, -1, 2, 0, 0, 0, 0]))


def test_a_buffer_indexed_by_a_masked_selection_is_a_masked_scatter():
    """Y[labels[known]] = 1 into a buffer made by np.zeros: x[mask] as the index, and as
    the values written under the same mask, is a scatter that writes nothing where the mask
    is false (numpy's order of repeated indices kept): no length from the data, so no
    graph break and no eager fallback."""
    def f(labels):
        known = labels >= 0
        Y = np.zeros((8, 2))
        Y[np.arange(8)[known], labels[known]] = 1
        Z = np.zeros(8)
        Z[labels[known]] += 1.0
        W = np.full(8, -1)
        W[labels[known] + 2] = labels[known] * 3           # a selection written as values too
        return Y, Z, W

    labels = np.array([0, -1, 1, -1, -1, 0, -1, 1])
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        got = jitted(f)(labels)
    same(tuple(g.numpy() for g in got), f(labels))
    msgs = [str(w.message) for w in rec if issubclass(w.category, FallbackWarning)]
    assert not msgs, msgs
