"""median, percentile, quantile and their nan-variants along a split axis: a distributed
selection (partition_rules/select.py), never a gather of the array, with numpy's bits.

Property tests against numpy over shapes, splits (rows over 2 and 4 devices, 2x2 meshes,
rows and columns split at once), q values, methods, dtypes, NaN, inf and ties; the
selection's rounds that cannot fail are driven by forcing the guess to miss."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import spmd
from spmd.sharding.partition_rules import select as select_rule
from spmd.sharding.reshard import ReshardWarning

MESH2 = spmd.Mesh((2,), ("x",))
MESH4 = spmd.Mesh((4,), ("x",))
MESH22 = spmd.Mesh((2, 2), ("a", "b"))
LAYOUTS = [(MESH2, ("x", None)), (MESH4, ("x", None)), (MESH22, ("a", None)), (MESH22, (("a", "b"), None)),
           (MESH22, ("a", "b")), (MESH22, ("b", "a"))]

FUNCS = {
    "median": lambda x, q, m: np.median(x, axis=0),
    "median_keep": lambda x, q, m: np.median(x, axis=0, keepdims=True),
    "median_all": lambda x, q, m: np.median(x),
    "percentile": lambda x, q, m: np.percentile(x, 100 * q, axis=0, method=m),
    "quantile": lambda x, q, m: np.quantile(x, q, axis=0, method=m),
    "quantile_tuple": lambda x, q, m: np.quantile(x, q, axis=(0, 1), method=m, keepdims=True),
    "nanmedian": lambda x, q, m: np.nanmedian(x, axis=0),
    "nanpercentile": lambda x, q, m: np.nanpercentile(x, 100 * q, axis=0, method=m),
    "nanquantile": lambda x, q, m: np.nanquantile(x, q, axis=0, method=m),
}
NAN_OK = ("linear", "lower", "higher", "midpoint")
METHODS = ("linear", "lower", "higher", "nearest", "midpoint", "hazen", "inverted_cdf", "median_unbiased")


def data(rng, n, c, dtype, nan, ties):
    x = rng.standard_normal((n, c))
    if ties:
        x = np.round(x, 1)
    if dtype.startswith("int"):
        return (x * 10).astype(dtype)
    x = x.astype(dtype)
    if nan and x.size > 2:
        x.flat[rng.integers(x.size, size=max(1, x.size // 7))] = np.nan
        x.flat[rng.integers(x.size)] = np.inf
        x.flat[rng.integers(x.size)] = -np.inf
    return x


def check(x, fn, q, method, layout):
    mesh, spec = layout
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)      # numpy's All-NaN slice warnings
        want = np.asarray(fn(x, q, method))
    f = spmd.jit(lambda a: fn(a, q, method), in_shardings=(mesh.sharding(*spec),), backend="numpy")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        got = f(x).numpy()
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, want.dtype, got.shape, want.shape)
    assert np.array_equal(got, want, equal_nan=True), (got, want)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(1, 400), c=st.integers(1, 3), layout=st.sampled_from(LAYOUTS),
       name=st.sampled_from(sorted(FUNCS)), method=st.sampled_from(METHODS),
       q=st.sampled_from([0.0, 0.5, 1.0, 0.1, 0.37, 0.999]), dtype=st.sampled_from(["float64", "float32", "int64"]),
       nan=st.booleans(), ties=st.booleans(), seed=st.integers(0, 2 ** 16))
def test_selection_along_a_split_axis_is_numpys(n, c, layout, name, method, q, dtype, nan, ties, seed):
    if name.startswith("nan") and method not in NAN_OK:
        method = "linear"
    if dtype.startswith("int") and method in ("lower", "higher", "nearest", "inverted_cdf"):
        method = "linear"       # (a split int dim with a picking method is gathered: tested below)
    x = data(np.random.default_rng(seed), n, c, dtype, nan, ties)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ReshardWarning)
        if name == "median_all" or name == "quantile_tuple":
            warnings.simplefilter("ignore", ReshardWarning)    # (raveling a 2-d split may reshard)
        check(x, FUNCS[name], q, method, layout)


@pytest.mark.parametrize("layout", LAYOUTS[:4], ids=["2", "4", "2x2a", "2x2ab"])
def test_the_guess_missing_still_finds_numpys_elements(layout, monkeypatch):
    """A guess from a one-element sample with no margin misses nearly always, and a kept
    bracket of one element overflows: the rounds that cannot fail find the elements."""
    monkeypatch.setenv("SPMD_PROGRAM_CACHE", "0")
    monkeypatch.setattr(select_rule, "SAMPLE", 1)
    monkeypatch.setattr(select_rule, "SPREAD", 0)
    monkeypatch.setattr(select_rule, "keep_cap", lambda m, group, dtype: 1)
    monkeypatch.setattr(select_rule, "QUANTILES", 3)
    monkeypatch.setattr(select_rule, "CAP", 2)
    rng = np.random.default_rng(1)
    for n in (7, 64, 333):
        x = data(rng, n, 2, "float64", nan=n == 64, ties=n == 333)
        for name in ("median", "percentile", "nanquantile", "nanmedian"):
            check(x, FUNCS[name], 0.37, "linear", layout)


def test_rounds_leave_at_most_cap():
    """After the rounds, a device holds at most `cap` elements of a bracket; simulated with
    the worst spacing of offers (each device's gaps as large as they can be)."""
    for m in (1, 2, 17, 256, 257, 10_000, 500_000, 3_000_000):
        rounds, cap = select_rule.rounds_and_cap(m)
        c = m
        for _ in range(rounds):
            t = select_rule.QUANTILES - 1
            places = (np.arange(t + 1) * (c - 1)) // t
            c = int(np.max(np.diff(places)) - 1) if c > 1 else 0
        assert max(c, 0) <= cap, (m, rounds, cap, c)


def test_the_array_is_never_gathered():
    """On a 4-device split of 400000 x 3 float64, the median and percentile programs move
    a few hundred kB at most (a sample, offers, counts), not the 9.6 MB array."""
    x = spmd.ShapeDtype((400_000, 3), "float64")
    for fn in (lambda a: np.median(a, axis=0), lambda a: np.nanpercentile(a, [5, 90], axis=0)):
        low = spmd.jit(fn, in_shardings=(MESH4.sharding("x", None),), backend="numpy").lower(x)
        rep = low.report()
        biggest = max(c["bytes"] for c in rep["collectives"])
        assert biggest < 400_000 * 3 * 8 / 20, rep["collectives"]
        assert sum(c["bytes"] for c in rep["collectives"]) < 400_000 * 3 * 8 / 4


def test_out_and_overwrite_input_are_accepted():
    x = np.random.default_rng(2).standard_normal((50, 4))
    x[3, 1] = np.nan

    def f(a):
        o1, o2, o3 = np.empty(4), np.empty((2, 4)), np.empty(4)
        np.median(a, axis=0, out=o1, overwrite_input=True)
        np.nanpercentile(a, [10, 90], axis=0, out=o2, overwrite_input=True)
        np.nanmedian(a, axis=0, out=o3)
        return o1, o2, o3
    got = spmd.jit(f, in_shardings=(MESH4.sharding("x", None),), backend="numpy")(x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        want = (np.median(x, axis=0), np.nanpercentile(x, [10, 90], axis=0), np.nanmedian(x, axis=0))
    for g, w in zip(got, want):
        assert np.array_equal(np.asarray(g.numpy() if hasattr(g, "numpy") else g), w, equal_nan=True)


def test_eager_median_of_a_split_array_is_numpys_and_silent():
    x = np.random.default_rng(3).standard_normal((1001, 3))
    a = spmd.device_put(x, MESH22.sharding(("a", "b"), None))
    with warnings.catch_warnings():
        warnings.simplefilter("error", ReshardWarning)
        got = np.median(a, axis=0)
        assert isinstance(got, spmd.Array)
        assert np.array_equal(got.numpy(), np.median(x, axis=0))
        assert np.array_equal(np.nanquantile(a, 0.9, axis=0).numpy(), np.nanquantile(x, 0.9, axis=0))


def test_an_unsupported_method_names_the_parameter():
    x = np.arange(10.)
    with pytest.raises(NotImplementedError, match="nanquantile method='weibull'"):
        spmd.jit(lambda a: np.nanquantile(a, 0.5, method="weibull"), backend="numpy")(x)


ALL_METHODS = ["inverted_cdf", "averaged_inverted_cdf", "closest_observation", "interpolated_inverted_cdf", "hazen",
               "weibull", "median_unbiased", "normal_unbiased", "linear", "lower", "higher", "nearest", "midpoint"]


@pytest.mark.parametrize("dtype", ["float64", "float32", "int64"])
def test_every_numpy_method_is_numpys(dtype):
    """numpy's 13 methods, q as an array and as a Python number (numpy then weighs in the
    picks' dtype), on one device and split over 4, lengths around the boundaries."""
    rng = np.random.default_rng(5)
    qs = np.array([0, 0.01, 0.1, 0.25, 0.5, 0.5001, 0.9, 0.99, 1.0])
    for n in (1, 2, 3, 10, 37):
        x = (rng.standard_normal((n, 2)) * 5).astype(dtype)
        if dtype != "int64" and n > 3:
            x[1, 0] = np.inf
        for m in ALL_METHODS:
            for q in (qs, 30):
                fn = (lambda a, q=q, m=m: np.percentile(a, q, axis=0, method=m)) if isinstance(q, int) else \
                    (lambda a, q=q, m=m: np.quantile(a, q, axis=0, method=m))
                with np.errstate(all="ignore"):
                    want = fn(x)
                for sh in (None, (MESH4.sharding("x", None),)):
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore", ReshardWarning)      # (a split int picked as is)
                        got = np.asarray(spmd.jit(fn, in_shardings=sh, backend="numpy")(x))
                    assert got.dtype == want.dtype and np.array_equal(got, want, equal_nan=True), (m, n, q, got, want)
