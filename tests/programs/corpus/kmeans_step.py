"""Lloyd iterations of k-means: argmin of squared distances, new centroids by np.add.at sums
and counts; an empty cluster keeps its centroid."""
import numpy as np


def step(X, C, iters):
    k = C.shape[0]
    for _ in range(iters):
        d2 = ((X[:, None, :] - C[None, :, :]) ** 2).sum(axis=2)
        labels = np.argmin(d2, axis=1)
        sums = np.zeros_like(C)
        counts = np.zeros(k)
        np.add.at(sums, labels, X)
        np.add.at(counts, labels, 1)
        nonempty = counts > 0
        C = np.where(nonempty[:, None], sums / np.maximum(counts, 1)[:, None], C)
    inertia = np.sum(np.min(d2, axis=1))
    return C, labels, inertia


def make(rng):
    centers = np.array([[0, 0], [4, 4], [0, 5], [5, 0]], dtype=float)
    X = np.concatenate([c + rng.standard_normal((100, 2)) for c in centers])
    C = X[rng.choice(len(X), 4, replace=False)]
    return (X, C, 4), (("d", None), None, None)


STATIC = (2,)
