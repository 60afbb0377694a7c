"""Jacobi iteration for a diagonally dominant system, two preallocated buffers swapped each
sweep and written with ufuncs' out= (np.dot, np.subtract, np.divide), residual history."""
import numpy as np


def step(A, b, sweeps):
    n = len(b)
    D = np.diag(A)
    R = A - np.diagflat(D)
    x = np.zeros(n)
    x_new = np.empty(n)
    tmp = np.empty(n)
    res = np.zeros(sweeps)
    for k in range(sweeps):
        np.dot(R, x, out=tmp)
        np.subtract(b, tmp, out=tmp)
        np.divide(tmp, D, out=x_new)
        x, x_new = x_new, x
        res[k] = np.linalg.norm(A @ x - b)
    return x, res


def make(rng):
    n = 96
    A = rng.standard_normal((n, n)) + np.diag(np.full(n, 3.0 * np.sqrt(n)))
    return (A, rng.standard_normal(n), 8), (("d", None), ("d",), None)


STATIC = (2,)
RTOL = 1e-8
