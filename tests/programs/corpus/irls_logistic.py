"""Logistic regression by iteratively reweighted least squares (Newton), np.linalg.solve."""
import numpy as np


def step(X, y, iters):
    n, d = X.shape
    w = np.zeros(d)
    for _ in range(iters):
        eta = X @ w
        p = 1 / (1 + np.exp(-eta))
        W = p * (1 - p)
        z = eta + (y - p) / W
        XtW = X.T * W
        w = np.linalg.solve(XtW @ X + 1e-8 * np.eye(d), XtW @ z)
    ll = np.sum(y * np.log(p) + (1 - y) * np.log(1 - p))
    return w, ll


def make(rng):
    n, d = 400, 5
    X = np.hstack([np.ones((n, 1)), rng.standard_normal((n, d - 1))])
    y = (rng.random(n) < 1 / (1 + np.exp(-X @ np.array([0.5, 1.0, -2.0, 0.3, 0.0])))).astype(float)
    return (X, y, 6), (("d", None), ("d",), None)


STATIC = (2,)
RTOL = 1e-8
