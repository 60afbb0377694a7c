"""Multinomial logistic regression by full-batch gradient descent with L2, a Python loop."""
import numpy as np


def softmax(z):
    z = z - np.max(z, axis=1, keepdims=True)
    e = np.exp(z)
    return e / np.sum(e, axis=1, keepdims=True)


def step(X, y, W, lr, reg, iters):
    n = X.shape[0]
    k = W.shape[1]
    Y = np.zeros((n, k))
    Y[np.arange(n), y] = 1
    losses = []
    for it in range(iters):
        P = softmax(X @ W)
        loss = -np.sum(Y * np.log(P)) / n + 0.5 * reg * np.sum(W * W)
        grad = X.T @ (P - Y) / n + reg * W
        W = W - lr * grad
        losses.append(loss)
    acc = np.mean(np.argmax(X @ W, axis=1) == y)
    return W, np.array(losses), acc


def make(rng):
    n, d, k = 256, 10, 4
    X = rng.standard_normal((n, d))
    y = np.argmax(X @ rng.standard_normal((d, k)), axis=1)
    return (X, y, np.zeros((d, k)), 0.5, 1e-3, 8), (("d", None), ("d",), None, None, None, None)


STATIC = (5,)
