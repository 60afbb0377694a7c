"""Gradient descent with Armijo backtracking line search on a logistic loss: the inner while
loop halves the step until the loss decreases enough."""
import numpy as np


def loss_grad(w, X, y):
    z = X @ w
    loss = np.mean(np.logaddexp(0, -y * z))
    g = -X.T @ (y / (1 + np.exp(y * z))) / len(y)
    return loss, g


def step(w, X, y, iters):
    losses = []
    for _ in range(iters):
        f, g = loss_grad(w, X, y)
        t = 4.0
        while loss_grad(w - t * g, X, y)[0] > f - 0.5 * t * (g @ g):
            t *= 0.5
        w = w - t * g
        losses.append(f)
    return w, losses


def make(rng):
    n, d = 256, 6
    X = rng.standard_normal((n, d))
    y = np.sign(X @ rng.standard_normal(d) + 0.5 * rng.standard_normal(n))
    return (np.zeros(d), X, y, 3), (None, ("d", None), ("d",), None)


STATIC = (3,)
