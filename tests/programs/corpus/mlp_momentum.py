"""Two-layer MLP regression, tanh, SGD with momentum over minibatches cut by slicing."""
import numpy as np


def step(W1, b1, W2, b2, vel, X, y, lr, mu, batch):
    n = X.shape[0]
    params = [W1, b1, W2, b2]
    total = 0.0
    for s in range(0, n, batch):
        xb, yb = X[s:s + batch], y[s:s + batch]
        h = np.tanh(xb @ W1 + b1)
        pred = h @ W2 + b2
        err = pred - yb
        total += np.sum(err ** 2)
        d_pred = 2 * err / len(xb)
        gW2 = h.T @ d_pred
        gb2 = d_pred.sum(axis=0)
        dh = d_pred @ W2.T * (1 - h * h)
        gW1 = xb.T @ dh
        gb1 = dh.sum(axis=0)
        for p, g, vv in zip(params, [gW1, gb1, gW2, gb2], vel):
            vv *= mu
            vv -= lr * g
            p += vv
    return total / n


def make(rng):
    n, d, hdim = 256, 8, 32
    X = rng.standard_normal((n, d))
    y = np.sin(X[:, :1]) + X[:, 1:2] ** 2
    W1 = 0.3 * rng.standard_normal((d, hdim))
    b1 = np.zeros(hdim)
    W2 = 0.3 * rng.standard_normal((hdim, 1))
    b2 = np.zeros(1)
    vel = [np.zeros_like(p) for p in (W1, b1, W2, b2)]
    return (W1, b1, W2, b2, vel, X, y, 0.05, 0.9, 64), (None,) * 5 + (("d", None), ("d", None), None, None, None)


STATIC = (9,)
