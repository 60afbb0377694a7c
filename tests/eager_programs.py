"""Plain numpy programs with Python control flow, run eagerly on spmd.Arrays and on numpy
arrays (the same code): the conjugate-gradient solver and a per-sample k-means. Used by
tests/eager/test_eager.py and, under mpiexec, tests/mpi_scripts/eager.py."""
import numpy as np


def cg(A, b, tol=1e-8, max_iter=100):
    """Conjugate gradients for A x = b (A symmetric positive definite); returns x and the
    residual norms of the iterates."""
    x = np.zeros_like(b)
    r = b - A @ x
    p = r.copy()
    rs = r @ r
    norms = [float(np.sqrt(rs))]
    while np.sqrt(rs) > tol and len(norms) <= max_iter:
        Ap = A @ p
        alpha = rs / (p @ Ap)
        x = x + alpha * p
        r = r - alpha * Ap
        rs_new = r @ r
        p = r + (rs_new / rs) * p
        rs = rs_new
        norms.append(float(np.sqrt(rs)))
    return x, norms


def spd_problem(n, seed=0):
    rng = np.random.default_rng(seed)
    m = rng.standard_normal((n, n))
    return m @ m.T / n + np.eye(n), rng.standard_normal(n)


def kmeans(X, centers, steps=3):
    """Lloyd's k-means with a per-sample Python loop and an `if` on each distance."""
    n, k = X.shape[0], centers.shape[0]
    for _ in range(steps):
        labels = []
        for i in range(n):
            best, arg = None, 0
            for j in range(k):
                d = np.sum((X[i] - centers[j]) ** 2)
                if best is None or d < best:
                    best, arg = d, j
            labels.append(arg)
        labels = np.array(labels)
        new = []
        for j in range(k):
            members = labels == j
            cnt = int(members.sum())
            new.append(centers[j] if cnt == 0 else
                       (np.asarray(members, X.dtype) @ X) / cnt)
        centers = np.stack(new)
    return centers, labels
