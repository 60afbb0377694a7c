"""Sizes numpy takes from the data, known while tracing (frontend/value_bounds.py): np.bincount
of values the trace bounds (np.clip, %, arange, comparisons), of x[mask] counted in place,
and np.nonzero(c)[0][k] found in place, compile with no graph break (fallback=False would
raise at one) and give numpy's values; where the bounds do not settle the length, the break
stays and names the line."""
import warnings

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import spmd
from spmd.errors import FallbackWarning

MESH = spmd.Mesh((4,), ("d",))


def compiled(fn, *args):
    """fn under jit with no graph break allowed, its arguments split over MESH."""
    return spmd.jit(fn, in_shardings=tuple(MESH.sharding("d") for _ in args), fallback=False)(*args)


def same(got, want):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, want.shape, got.dtype, want.dtype)
    np.testing.assert_allclose(got, want, rtol=1e-12)


floats = st.lists(st.floats(-6, 6), min_size=8, max_size=40).map(np.array)


@settings(max_examples=15, deadline=None)
@given(floats, st.integers(1, 9))
def test_bincount_of_clipped_bins_compiles_whole(x, n):
    def f(x):
        i = np.clip((x * 2).astype(int), 0, n - 1)
        return np.bincount(i, minlength=n), np.bincount(i, weights=x, minlength=n)
    got, want = compiled(f, x), f(x)
    same(got[0], want[0])
    same(got[1], want[1])


@settings(max_examples=15, deadline=None)
@given(st.lists(st.integers(-20, 20), min_size=8, max_size=40).map(np.array), st.integers(1, 7))
def test_bincount_of_a_remainder_and_of_a_selection_compiles_whole(k, n):
    def f(k):
        i = np.abs(k) % n
        keep = k > 0
        return np.bincount(i[keep], minlength=n), np.bincount(k % -n + n - 1, minlength=n), \
            np.bincount(keep, minlength=2)
    for g, want in zip(compiled(f, k), f(k)):
        same(g, want)


@settings(max_examples=10, deadline=None)
@given(st.lists(st.integers(-20, 20), min_size=8, max_size=40).map(np.array), st.integers(1, 7))
def test_weighted_bincount_of_a_selection_takes_numpys_dtype_when_none_is_selected(k, n):
    def f(k, w):
        keep = k > 0
        return np.bincount((np.abs(k) % n)[keep], weights=w[keep], minlength=n + 2)
    w = np.linspace(-1, 1, len(k))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)     # whether any is selected: a graph break
        got = spmd.jit(f, in_shardings=(MESH.sharding("d"), MESH.sharding("d")))(k, w)
    same(got, f(k, w))


@settings(max_examples=15, deadline=None)
@given(st.lists(st.booleans(), min_size=8, max_size=40).map(np.array), st.integers(-3, 2))
def test_the_kth_nonzero_position_compiles_whole(c, k):
    if c.sum() < (k + 1 if k >= 0 else -k):
        c[:4] = True          # numpy raises IndexError without a k-th; a traced index cannot
    x = np.arange(len(c)) * 1.5

    def f(c, x):
        j = np.nonzero(c)[0][k]
        return j, x[j], np.nonzero(c > 0)[0].max(), (x[c] * 2)[k], np.flatnonzero(c)[k]
    for g, want in zip(compiled(f, c, x), f(c, x)):
        same(g, want)


def test_the_simplex_projection_threshold_compiles_whole():
    def project(v):
        u = np.sort(v)[::-1]
        css = np.cumsum(u)
        rho = np.nonzero(u * np.arange(1, len(v) + 1) > (css - 1))[0][-1]
        return np.maximum(v - (css[rho] - 1) / (rho + 1.0), 0)
    v = np.random.default_rng(1).standard_normal(16)
    same(compiled(project, v), project(v))


def test_a_length_the_bounds_do_not_settle_still_breaks_naming_the_line():
    def f(x):
        i = np.clip(x.astype(int), 0, 10)
        return np.bincount(i, minlength=4)        # the length is max(i) + 1 when it is over 4
    x = np.array([0.0, 7.5, 2, 3, 1, 1, 2, 9])
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        got = spmd.jit(f, in_shardings=(MESH.sharding("d"),))(x)
    same(got, f(x))
    msgs = [str(w.message) for w in rec if issubclass(w.category, FallbackWarning)]
    assert msgs and all("graph break" in m and "test_value_bounds.py:" in m for m in msgs), msgs
    with pytest.raises(Exception, match=r"test_value_bounds\.py:\d+"):
        spmd.jit(f, in_shardings=(MESH.sharding("d"),), fallback=False)(x)


@settings(max_examples=10, deadline=None)
@given(st.lists(st.integers(0, 9), min_size=8, max_size=40).map(np.array))
def test_bincount_of_uniques_inverse_takes_no_value_beyond_the_group_count(keys):
    def f(keys, v):
        groups, inverse = np.unique(keys, return_inverse=True)
        return groups, np.bincount(inverse), np.bincount(inverse, weights=v), np.bincount(np.arange(5) * 2 // 2)
    v = np.linspace(0, 1, len(keys))
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        got = spmd.jit(f, in_shardings=(MESH.sharding("d"), MESH.sharding("d")))(keys, v)
    for g, want in zip(got, f(keys, v)):
        same(g, want)
    lines = {str(w.message).split(" at ")[1].split(" ")[0] for w in rec if issubclass(w.category, FallbackWarning)}
    assert len(lines) == 1 and "test_value_bounds.py" in lines.pop()      # np.unique's group count alone


@pytest.mark.parametrize("fn,want", [
    (lambda k: np.clip(k, 0, 9), (0, 9)),
    (lambda k: (k > 0).astype(np.int64), (0, 1)),
    (lambda k: np.clip(k, 0, 9) * 3 - 1, (-1, 26)),
    (lambda k: np.maximum(k, 2), (2, None)),
    (lambda k: np.minimum(np.abs(np.clip(k, -7, 3)), 5), (0, 5)),
    (lambda k: np.concatenate([np.clip(k, 1, 2), np.arange(4)]), (0, 3)),
    (lambda k: np.clip(k, 0, 2 ** 62) * 4, (None, None)),              # may overflow: anywhere
    (lambda k: np.clip(k, 0, 2 ** 40).astype(np.int32), (None, None)),   # 2**40 wraps around
    (lambda k: k + 1, (None, None)),
])
def test_int_range_bounds_what_the_ops_allow_and_nothing_that_may_wrap(fn, want):
    from spmd.ir.ops.value_ranges import int_range
    from spmd.jit.tracing import trace_function
    g, _, _ = trace_function(fn, (np.arange(6),))
    assert int_range(g.outputs[0]) == want
