"""Ops that are one op per numpy result (svd's u, s, vh; eigh's and eig's w, v; qr's q, r)
run numpy's decomposition once per program and operand, not once per part taken, on
both backends, with numpy's values (NaN where numpy.linalg refuses a matrix)."""
import numpy as np
import pytest

import spmd

A = np.random.default_rng(0).standard_normal((6, 6))
SPD = A @ A.T + 6 * np.eye(6)

CASES = {
    "svd": (lambda a: np.linalg.svd(a), "svd"),
    "svd_reduced": (lambda a: np.linalg.svd(a[:, :4], full_matrices=False), "svd"),
    "pinv": (lambda a: np.linalg.pinv(a), "svd"),
    "eigh": (lambda a: np.linalg.eigh(a + a.T), "eigh"),
    "qr": (lambda a: np.linalg.qr(a), "qr"),
    "svd_thrice": (lambda a: (np.linalg.svd(a, full_matrices=False)[0], np.linalg.svd(a, full_matrices=False)[2],
                              np.linalg.svd(a, compute_uv=False)), "svd"),
}


def counting(monkeypatch, name):
    calls = []
    real = getattr(np.linalg, name)

    def counted(*args, **kwargs):
        calls.append(kwargs)
        return real(*args, **kwargs)
    monkeypatch.setattr(np.linalg, name, counted)
    return calls


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("backend", ["numpy", "llvm"])
def test_one_decomposition_per_program(case, backend, monkeypatch):
    fn, name = CASES[case]
    want = fn(A)
    f = spmd.jit(fn, backend=backend)
    f(A)                                        # traced and compiled
    calls = counting(monkeypatch, name)
    got = f(A)
    assert len(calls) == 1, calls
    for g, w in zip(got if isinstance(got, tuple) else [got], want if isinstance(want, tuple) else [want]):
        np.testing.assert_allclose(np.asarray(g), w, rtol=1e-10, atol=1e-12)


def test_one_part_alone_takes_numpys_cheaper_call(monkeypatch):
    f = spmd.jit(lambda a: np.linalg.svd(a, compute_uv=False))
    f(A)
    want = np.linalg.svd(A, compute_uv=False)
    calls = counting(monkeypatch, "svd")
    np.testing.assert_allclose(f(A), want, rtol=1e-12)
    assert [c.get("compute_uv") for c in calls] == [False]


@pytest.mark.parametrize("backend", ["numpy", "llvm"])
def test_parts_of_a_matrix_numpy_refuses_are_nan(backend):
    """a batch of matrices, one not positive definite for eigh's LAPACK path: NaN there only,
    in every part, the others numpy's."""
    bad = np.stack([SPD, np.full((6, 6), np.nan), SPD * 2])
    w, v = spmd.jit(lambda a: np.linalg.eigh(a), backend=backend)(bad)
    w, v = np.asarray(w), np.asarray(v)
    assert np.isnan(w[1]).all() and np.isnan(v[1]).all()
    for k in (0, 2):
        ww, vv = np.linalg.eigh(bad[k])
        np.testing.assert_allclose(w[k], ww, rtol=1e-10)
        np.testing.assert_allclose(np.abs(v[k]), np.abs(vv), rtol=1e-8, atol=1e-10)
