"""PageRank by power iteration on a dense adjacency matrix: columns normalised by out-degree,
dangling nodes spread uniformly, damping 0.85, a fixed number of iterations."""
import numpy as np


def step(A, d, iters):
    n = A.shape[0]
    out_deg = A.sum(axis=1)
    dangling = out_deg == 0
    M = np.zeros_like(A)
    nz = ~dangling
    M[nz] = A[nz] / out_deg[nz, None]
    M = M.T
    r = np.ones(n) / n
    for _ in range(iters):
        r = d * (M @ r + r[dangling].sum() / n) + (1 - d) / n
    order = np.argsort(-r)
    return r, order[:5]


def make(rng):
    n = 64
    A = (rng.random((n, n)) < 0.08).astype(float)
    np.fill_diagonal(A, 0)
    A[5] = 0                                   # a dangling node
    return (A, 0.85, 20), (("d", None), None, None)


STATIC = (1, 2)
