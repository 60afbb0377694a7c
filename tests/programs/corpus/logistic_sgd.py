"""Binary logistic regression by minibatch SGD over a fixed permutation, with a clipped
log-loss, L2 weight decay, and the loss recorded per epoch."""
import numpy as np


def step(w, b, X, y, perm, lr, epochs, batch):
    n = X.shape[0]
    hist = np.zeros(epochs)
    for e in range(epochs):
        for s in range(0, n, batch):
            idx = perm[s:s + batch]
            xb, yb = X[idx], y[idx]
            p = 1 / (1 + np.exp(-(xb @ w + b)))
            g = p - yb
            w -= lr * (xb.T @ g / len(idx) + 1e-4 * w)
            b -= lr * g.mean()
        p = np.clip(1 / (1 + np.exp(-(X @ w + b))), 1e-12, 1 - 1e-12)
        hist[e] = -np.mean(y * np.log(p) + (1 - y) * np.log(1 - p))
    return hist


def make(rng):
    n, d = 512, 8
    X = rng.standard_normal((n, d))
    y = (X @ rng.standard_normal(d) > 0).astype(float)
    return ((np.zeros(d), np.zeros(1), X, y, rng.permutation(n), 0.5, 2, 128),
            (None, None, ("d", None), ("d",), None, None, None, None))


STATIC = (6, 7)
