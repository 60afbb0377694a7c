"""Conjugate gradient on a symmetric positive definite system, stopping on the residual."""
import numpy as np


def step(A, b, tol, maxiter):
    x = np.zeros_like(b)
    r = b - A @ x
    p = r.copy()
    rs_old = r @ r
    its = 0
    for i in range(maxiter):
        Ap = A @ p
        alpha = rs_old / (p @ Ap)
        x += alpha * p
        r -= alpha * Ap
        rs_new = r @ r
        its += 1
        if np.sqrt(rs_new) < tol:
            break
        p = r + (rs_new / rs_old) * p
        rs_old = rs_new
    return x, its


def make(rng):
    n = 64
    Q = rng.standard_normal((n, n))
    A = Q @ Q.T / n + np.diag(np.linspace(1, 4, n))
    b = rng.standard_normal(n)
    return (A, b, 1e-8, 12), (("d", None), ("d",), None, None)


STATIC = (2, 3)
RTOL = 1e-8
