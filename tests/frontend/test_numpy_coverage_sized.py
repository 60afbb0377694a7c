"""numpy functions whose result's size depends on the data (numpy_lib/set_funcs.py): under
spmd.jit each makes a graph break (a FallbackWarning) and gives numpy's values, shapes and
dtypes on meshes of 2 and 4 with inputs replicated and split, and eagerly; under
fallback=False each raises an error naming the function and the user's line."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import spmd
from numpy_coverage_util import check, check_refuses_without_break

SETTINGS = settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
seeds = st.integers(0, 2 ** 32 - 1)
sizes = st.integers(0, 9)


def values(rng, n, kind):
    if kind == "int":
        return rng.integers(-4, 4, n)
    x = rng.integers(-4, 4, n).astype(float)
    if n:
        x[rng.random(n) < 0.2] = np.nan
        x[rng.random(n) < 0.2] = -0.0
    return x


@SETTINGS
@given(seed=seeds, n1=sizes, n2=sizes, kind=st.sampled_from(["int", "float"]), assume_unique=st.booleans(),
       return_indices=st.booleans())
def test_intersect1d(seed, n1, n2, kind, assume_unique, return_indices):
    rng = np.random.default_rng(seed)
    a, b = values(rng, n1, kind), values(rng, n2, kind).astype(np.int32 if kind == "int" else float)
    if assume_unique:
        a, b = np.unique(a), rng.permutation(np.unique(b))
    empty = (a.size == 0 or b.size == 0) if not assume_unique else (a.size + b.size <= 1)
    check(lambda a, b: np.intersect1d(a, b, assume_unique=assume_unique, return_indices=return_indices), a, b,
          breaks=not empty)       # with an empty input the result is empty: no size to take


@SETTINGS
@given(seed=seeds, n1=sizes, n2=sizes, kind=st.sampled_from(["int", "float"]), assume_unique=st.booleans())
def test_union_setdiff_setxor(seed, n1, n2, kind, assume_unique):
    rng = np.random.default_rng(seed)
    a, b = values(rng, n1, kind), values(rng, n2, kind)
    if assume_unique:
        a, b = rng.permutation(np.unique(a)), rng.permutation(np.unique(b))
    check(lambda a, b: (np.union1d(a, b.reshape(-1, 1)), np.setdiff1d(a, b, assume_unique=assume_unique),
                        np.setxor1d(a, b, assume_unique=assume_unique)), a, b, breaks=True)


@SETTINGS
@given(seed=seeds, shape=st.lists(st.integers(0, 4), min_size=1, max_size=3).map(tuple), short=st.booleans())
def test_extract_and_compress_with_a_traced_condition(seed, shape, short):
    rng = np.random.default_rng(seed)
    x = rng.integers(-5, 5, shape)
    n = x.size
    cond = rng.integers(-1, 2, max(n - 2, 0) if short else n)
    check(lambda c, x: np.extract(c, x), cond, x, breaks=cond.size > 0)
    axis = int(rng.integers(0, len(shape)))
    c1 = rng.random(max(shape[axis] - 1, 0) if short else shape[axis]) < 0.5
    check(lambda c, x: (np.compress(c, x, axis=axis), x.compress(c, axis=axis)), c1, x, breaks=c1.size > 0)
    if c1.size <= x.size:
        check(lambda c, x: np.compress(c, x.ravel()[:c.size]), c1, x, breaks=c1.size > 0)


@SETTINGS
@given(seed=seeds, shape=st.lists(st.integers(1, 6), min_size=1, max_size=2).map(tuple),
       trim=st.sampled_from(["fb", "f", "b", "BF"]), axis=st.sampled_from([None, 0, -1]), zeros=st.booleans())
def test_trim_zeros(seed, shape, trim, axis, zeros):
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 2, shape) * rng.integers(-3, 3, shape)
    if zeros:
        x[...] = 0
    check(lambda x: np.trim_zeros(x, trim, axis=axis), x, breaks=True)


@SETTINGS
@given(seed=seeds, shape=st.lists(st.integers(0, 5), min_size=2, max_size=3).map(tuple), data=st.data(),
       kind=st.sampled_from(["int", "float", "bool"]))
def test_unique_along_an_axis(seed, shape, data, kind):
    rng = np.random.default_rng(seed)
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    if any(s == 0 for k, s in enumerate(shape) if k != axis % len(shape)):
        shape = tuple(1 if (s == 0 and k != axis % len(shape)) else s for k, s in enumerate(shape))
    x = rng.integers(0, 2, shape)
    if kind == "float":
        x = x.astype(float)
        x[rng.random(shape) < 0.15] = np.nan
        x[rng.random(shape) < 0.2] = -0.0
    elif kind == "bool":
        x = x > 0
    flags = [data.draw(st.booleans()) for _ in range(3)]
    check(lambda x: np.unique(x, *flags, axis=axis), x, breaks=True)


def test_unique_rows_as_numpy_compares_rows_with_nan_and_signed_zero():
    x = np.array([[np.nan, 1], [np.nan, 1], [np.nan, 0], [-0.0, 2], [0.0, 2], [1, np.nan]])
    check(lambda x: np.unique(x, return_index=True, return_inverse=True, return_counts=True, axis=0), x,
          breaks=True)


def test_data_sized_functions_name_their_line_without_a_graph_break():
    a, b = np.arange(6.0), np.arange(3.0, 9.0)
    check_refuses_without_break(lambda a, b: np.intersect1d(a, b), a, b, name="intersect1d")
    check_refuses_without_break(lambda a, b: np.union1d(a, b), a, b, name="unique")
    check_refuses_without_break(lambda a, b: np.setdiff1d(a, b), a, b, name="setdiff1d")
    check_refuses_without_break(lambda a, b: np.setxor1d(a, b, assume_unique=True), a, b, name="setxor1d")
    check_refuses_without_break(lambda a: np.extract(a > 2, a), a, name="extract")
    check_refuses_without_break(lambda a: np.compress(a > 2, a), a, name="compress")
    check_refuses_without_break(lambda a: np.trim_zeros(a), a, name="trim_zeros")
    check_refuses_without_break(lambda a: np.unique(a.reshape(3, 2), axis=0), a, name="unique")


def test_a_condition_longer_than_the_array_is_refused_clearly():
    with pytest.raises(NotImplementedError, match=r"np\.extract at .*test_numpy_coverage_sized\.py:\d+.*cut"):
        spmd.jit(lambda c, x: np.extract(c, x), backend="numpy")(np.ones(5, bool), np.arange(3))


def test_a_condition_known_when_tracing_needs_no_break():
    x = np.arange(12).reshape(3, 4)
    check(lambda x: (np.extract([1, 0, 0, 2, 0, 1], x), np.compress([True, False, True], x, axis=0)), x)
