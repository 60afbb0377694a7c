"""1-D heat equation by Crank-Nicolson: tridiagonal matrices built with np.diag, one
np.linalg.solve per step, Dirichlet ends."""
import numpy as np


def step(u, alpha, dt, dx, nsteps):
    n = u.shape[0]
    r = alpha * dt / dx ** 2
    main = np.full(n, 1 + r)
    off = np.full(n - 1, -r / 2)
    A = np.diag(main) + np.diag(off, 1) + np.diag(off, -1)
    B = np.diag(np.full(n, 1 - r)) + np.diag(-off, 1) + np.diag(-off, -1)
    A[0, :], A[-1, :] = 0, 0
    A[0, 0] = A[-1, -1] = 1
    B[0, :], B[-1, :] = 0, 0
    B[0, 0] = B[-1, -1] = 1
    for _ in range(nsteps):
        u = np.linalg.solve(A, B @ u)
    return u


def make(rng):
    n = 64
    x = np.linspace(0, 1, n)
    u = np.sin(np.pi * x) + 0.1 * rng.standard_normal(n)
    u[0] = u[-1] = 0
    return (u, 1.0, 1e-3, 1 / (n - 1), 5), (("d",), None, None, None, None)


STATIC = (1, 2, 3, 4)
RTOL = 1e-8
