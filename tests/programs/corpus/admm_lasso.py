"""ADMM for the lasso: x-update by a solve with the cached Cholesky factor, soft-thresholded
z-update, scaled dual update; objective history."""
import numpy as np


def soft_threshold(v, k):
    return np.maximum(0, v - k) - np.maximum(0, -v - k)


def step(A, b, lam, rho, iters):
    m, n = A.shape
    Atb = A.T @ b
    L = np.linalg.cholesky(A.T @ A + rho * np.eye(n))
    x = np.zeros(n)
    z = np.zeros(n)
    u = np.zeros(n)
    hist = []
    for k in range(iters):
        q = Atb + rho * (z - u)
        x = np.linalg.solve(L.T, np.linalg.solve(L, q))
        z_old = z
        z = soft_threshold(x + u, lam / rho)
        u = u + x - z
        hist.append(0.5 * np.sum((A @ x - b) ** 2) + lam * np.linalg.norm(z, 1))
    return z, np.array(hist), np.linalg.norm(rho * (z - z_old))


def make(rng):
    m, n = 200, 20
    A = rng.standard_normal((m, n))
    x0 = np.where(rng.random(n) < 0.3, rng.standard_normal(n), 0.0)
    b = A @ x0 + 0.01 * rng.standard_normal(m)
    return (A, b, 0.5, 1.0, 10), (("d", None), ("d",), None, None, None)


STATIC = (4,)
RTOL = 1e-8
