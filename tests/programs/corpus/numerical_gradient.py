"""A gradient check: the analytic gradient of a softmax loss against central differences
filled one coordinate at a time into g (g[i] = ...), the relative error returned."""
import numpy as np


def loss(W, X, y):
    s = X @ W
    s = s - s.max(axis=1, keepdims=True)
    p = np.exp(s) / np.exp(s).sum(axis=1, keepdims=True)
    return -np.log(p[np.arange(len(y)), y]).mean()


def step(W, X, y, h):
    s = X @ W
    s = s - s.max(axis=1, keepdims=True)
    p = np.exp(s) / np.exp(s).sum(axis=1, keepdims=True)
    p[np.arange(len(y)), y] -= 1
    analytic = X.T @ p / len(y)
    g = np.zeros(W.size)
    w = W.ravel()
    for i in range(w.shape[0]):
        old = w[i]
        w[i] = old + h
        fp = loss(W, X, y)
        w[i] = old - h
        fm = loss(W, X, y)
        w[i] = old
        g[i] += (fp - fm) / (2 * h)
    g = g.reshape(W.shape)
    rel = np.abs(g - analytic) / np.maximum(1e-8, np.abs(g) + np.abs(analytic))
    return g, rel.max()


def make(rng):
    X = rng.standard_normal((64, 4))
    y = rng.integers(0, 3, 64)
    W = 0.1 * rng.standard_normal((4, 3))
    return (W, X, y, 1e-5), (None, ("d", None), ("d",), None)


STATIC = (3,)
RTOL = 1e-6
