"""Adam on least squares: the optimizer state m, v and the step count t kept in place."""
import numpy as np


def step(w, m, v, t, X, y, lr, iters):
    beta1, beta2, eps = 0.9, 0.999, 1e-8
    for _ in range(iters):
        r = X @ w - y
        g = 2 * X.T @ r / len(y)
        t += 1
        m[:] = beta1 * m + (1 - beta1) * g
        v[:] = beta2 * v + (1 - beta2) * g * g
        m_hat = m / (1 - beta1 ** t[0])
        v_hat = v / (1 - beta2 ** t[0])
        w -= lr * m_hat / (np.sqrt(v_hat) + eps)
    return np.mean((X @ w - y) ** 2)


def make(rng):
    n, d = 512, 16
    X = rng.standard_normal((n, d))
    y = X @ rng.standard_normal(d) + 0.1 * rng.standard_normal(n)
    z = np.zeros(d)
    return ((z.copy(), z.copy(), z.copy(), np.zeros(1, dtype=np.int64), X, y, 0.05, 6),
            (None, None, None, None, ("d", None), ("d",), None, None))


STATIC = (7,)
