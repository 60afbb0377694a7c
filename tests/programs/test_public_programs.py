"""Public programs, unchanged, under spmd.jit with numpy's results: an LSTM whose step
builds its parameters with np.random.seed(0); np.random.rand(...) (compiled: the draws
are numpy's numbers, constants of the program), and k-means written with per-sample
Python loops, math.sqrt and `if distance < closest` (tracing needs values: it runs
eagerly on the sharded arrays, with one warning naming the function and the line)."""
import math
import warnings

import numpy as np
import pytest

import spmd
from spmd.errors import FallbackWarning


def sigmoid(z):
    return 1 / (1 + np.exp(-z))


def lstm(xs):
    """xs (T, B, D) -> the last hidden state (B, H)."""
    np.random.seed(0)
    T, B, D = xs.shape
    H = 16
    Wx = np.random.rand(D, 4 * H) * 0.2 - 0.1
    Wh = np.random.rand(H, 4 * H) * 0.2 - 0.1
    b = np.random.rand(4 * H) * 0.1
    h = np.zeros((B, H))
    c = np.zeros((B, H))
    for t in range(T):
        z = xs[t] @ Wx + h @ Wh + b
        i, f, o = sigmoid(z[:, :H]), sigmoid(z[:, H:2 * H]), sigmoid(z[:, 2 * H:3 * H])
        c = f * c + i * np.tanh(z[:, 3 * H:])
        h = o * np.tanh(c)
    return h


def test_lstm_with_seeded_parameters_compiles_with_numpys_results(compiler):
    xs = np.random.default_rng(1).standard_normal((5, 8, 4))
    want = lstm(xs)
    mesh = spmd.Mesh((2,), ("b",))
    f = spmd.jit(lstm, in_shardings=(mesh.sharding(None, "b", None),), backend=compiler)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)          # compiled, not run eagerly
        for _ in range(2):
            np.testing.assert_allclose(f(xs).numpy(), want, rtol=1e-12, atol=1e-15)
    assert len(f.lower(xs).graph.ops) > 0


def kmeans(points, centroids, iters):
    k = len(centroids)
    for _ in range(iters):
        assign = []
        for p in points:
            closest, best = math.inf, 0
            for j in range(k):
                distance = math.sqrt(np.sum((p - centroids[j]) ** 2))
                if distance < closest:
                    closest, best = distance, j
            assign.append(best)
        assign = np.array(assign)
        centroids = np.stack([points[assign == j].mean(axis=0) for j in range(k)])
    return centroids


@pytest.mark.slow
def test_kmeans_with_python_loops_compiles_with_numpys_results():
    """The `if distance < closest:` on the data is traced as a cond (frontend/
    loop_conversion.py), so the whole step compiles: no fallback, numpy's values."""
    rng = np.random.default_rng(0)
    pts = np.concatenate([rng.normal(c, 0.3, (10, 2)) for c in ((0, 0), (3, 3), (0, 4))])
    c0 = pts[[0, 10, 20]] + 0.5
    want = kmeans(pts, c0, 3)
    mesh = spmd.Mesh((2,), ("x",))
    f = spmd.jit(kmeans, in_shardings=(mesh.sharding("x", None), None), static_argnums=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        got = f(pts, c0, 3)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12, atol=1e-14)