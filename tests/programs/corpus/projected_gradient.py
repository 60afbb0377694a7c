"""Projected gradient descent onto the probability simplex (the sort-based projection, its
threshold index found with np.nonzero) for a least-squares fit of mixture weights."""
import numpy as np


def project_simplex(v):
    u = np.sort(v)[::-1]
    css = np.cumsum(u)
    rho = np.nonzero(u * np.arange(1, len(v) + 1) > (css - 1))[0][-1]
    theta = (css[rho] - 1) / (rho + 1.0)
    return np.maximum(v - theta, 0)


def step(A, b, iters):
    n = A.shape[1]
    x = np.ones(n) / n
    L = np.linalg.norm(A, 2) ** 2
    for _ in range(iters):
        grad = A.T @ (A @ x - b)
        x = project_simplex(x - grad / L)
    return x, 0.5 * np.sum((A @ x - b) ** 2)


def make(rng):
    m, n = 300, 12
    A = rng.random((m, n))
    w = rng.dirichlet(np.ones(n))
    b = A @ w + 0.01 * rng.standard_normal(m)
    return (A, b, 5), (("d", None), ("d",), None)


STATIC = (2,)
