"""Top principal components by power iteration with deflation; Rayleigh quotients returned."""
import numpy as np


def step(X, ncomp, iters):
    Xc = X - X.mean(axis=0)
    cov = Xc.T @ Xc / (X.shape[0] - 1)
    comps = np.zeros((ncomp, X.shape[1]))
    vals = np.zeros(ncomp)
    for c in range(ncomp):
        v = np.ones(X.shape[1]) / np.sqrt(X.shape[1])
        for _ in range(iters):
            v = cov @ v
            v /= np.linalg.norm(v)
        lam = v @ cov @ v
        comps[c] = v
        vals[c] = lam
        cov = cov - lam * np.outer(v, v)
    return comps, vals, Xc @ comps.T


def make(rng):
    n, d = 400, 8
    A = rng.standard_normal((d, d))
    X = rng.standard_normal((n, d)) @ A
    return (X, 3, 30), (("d", None), None, None)


STATIC = (1, 2)
RTOL = 1e-7
