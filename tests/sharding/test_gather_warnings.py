"""A gather the user did not write warns, once, from the user's line, naming the op and the
bytes (sharding/gathers.py), under jit and eagerly, wherever the gather lands (at the op,
or at a transpose before it that propagation made gather); gathers the user asked for
(spmd.shard to replicated, out_shardings replicated) do not warn."""
from __future__ import annotations

import inspect
import re
import warnings

import numpy as np
import pytest

import spmd
from spmd.sharding.reshard import ReshardWarning

MESH = spmd.Mesh((2, 2), ("a", "b"))
ROWS = MESH.sharding("a", None)
X = np.random.default_rng(0).standard_normal((8, 8)) + 8 * np.eye(8)


def sort_rows(x):
    return np.sort(x, axis=0)


def sort_transposed(x):
    return np.sort(x.T, axis=1)           # the transpose gathers, for the sort


def argsort_rows(x):
    return np.argsort(x, axis=0)


def inverse(x):
    return np.linalg.inv(x)


def int_lower_quantile(x):
    return np.quantile((x * 10).astype(np.int64), 0.3, axis=0, method="lower")


def svd_of_a_product(x):
    return np.linalg.svd(x @ x[:, :4], compute_uv=False)    # the product's rows gather, for the SVD


CASES = [sort_rows, sort_transposed, argsort_rows, inverse, int_lower_quantile, svd_of_a_product]


def line_of(f):
    return inspect.getsourcelines(f)[1] + 1


def reshard_warnings(calls):
    with warnings.catch_warnings(record=True) as got:
        warnings.resetwarnings()
        warnings.simplefilter("default")
        calls()
    return [w for w in got if issubclass(w.category, ReshardWarning)]


def check_one(got, f):
    assert len(got) == 1, [str(w.message) for w in got]
    w = got[0]
    assert (w.filename, w.lineno) == (__file__, line_of(f)), (w.filename, w.lineno, str(w.message))
    assert re.search(r"[1-9]\d* bytes", str(w.message)), str(w.message)
    assert f"test_gather_warnings.py:{line_of(f)}" in str(w.message), str(w.message)


@pytest.mark.parametrize("f", CASES, ids=lambda f: f.__name__)
def test_a_gather_under_jit_warns_once_with_line_and_bytes(f, monkeypatch, tmp_path):
    monkeypatch.setenv("SPMD_CACHE_DIR", str(tmp_path))
    jf = spmd.jit(f, in_shardings=(ROWS,), backend="numpy")

    def calls():
        for _ in range(3):
            out = jf(X)
        with np.errstate(all="ignore"):
            np.testing.assert_allclose(np.asarray(out.numpy()), f(X), rtol=1e-12)
    check_one(reshard_warnings(calls), f)


@pytest.mark.parametrize("f", CASES, ids=lambda f: f.__name__)
def test_a_gather_on_an_eager_array_warns_once_with_line_and_bytes(f):
    a = spmd.device_put(X, ROWS)

    def calls():
        for _ in range(3):
            out = f(a)
        np.testing.assert_allclose(np.asarray(out.numpy() if hasattr(out, "numpy") else out), f(X), rtol=1e-12)
    check_one(reshard_warnings(calls), f)


def test_the_transposes_warning_names_the_sort_and_the_array():
    got = reshard_warnings(lambda: spmd.jit(sort_transposed, in_shardings=(ROWS,), backend="numpy")(X))
    msg = str(got[0].message)
    assert "sort at" in msg and "float64[8, 8]" in msg and "256 bytes" in msg, msg


def test_the_products_warning_counts_the_bytes_of_what_gathers():
    """The split came from x through a matmul: the warning names x's split and the SVD, and
    counts the product's bytes (8 x 4 float64, half of it from the other rows' devices)."""
    got = reshard_warnings(lambda: spmd.jit(svd_of_a_product, in_shardings=(ROWS,), backend="numpy")(X))
    msg = str(got[0].message)
    assert "svd at" in msg and "float64[8, 8]" in msg and "128 bytes" in msg, msg


def test_gathers_the_user_asked_for_do_not_warn():
    rep = MESH.sharding(None, None)

    def asked(x):
        return np.sort(spmd.shard(x, rep), axis=0)

    def quantiles(x):
        return np.median(x, axis=0) + np.nanpercentile(x, 90, axis=0) + np.quantile(x, [0.2, 0.7], axis=0).sum(0)

    got = reshard_warnings(lambda: [
        spmd.jit(asked, in_shardings=(ROWS,), backend="numpy")(X),
        spmd.jit(lambda x: x * 2, in_shardings=(ROWS,), out_shardings=rep, backend="numpy")(X),
        spmd.jit(quantiles, in_shardings=(ROWS,), backend="numpy")(X),
        spmd.device_put(X, ROWS).numpy(),
        np.median(spmd.device_put(X, ROWS), axis=0),
    ])
    assert not got, [str(w.message) for w in got]
