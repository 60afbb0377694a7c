"""A float32 training loop for the determinism tests: a one-hidden-layer classifier,
30 steps of gradient descent, data-parallel on a (4,) mesh. Its final weights must have
the same bits on every run, on every runtime (local threads, MPI, Ray)."""
import numpy as np

import spmd


def data(n=2048, d=64, hidden=512):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, d)).astype(np.float32)
    y = (x[:, 0] * x[:, 1] > 0).astype(np.float32)
    params = {"w1": (rng.standard_normal((d, hidden)) / 8).astype(np.float32),
              "w2": (rng.standard_normal(hidden) / 16).astype(np.float32)}
    return params, x, y


def step(p, x, y):
    def loss(p):
        z = np.tanh(x @ p["w1"]) @ p["w2"]
        return np.mean(np.logaddexp(0, z) - y * z)        # the logistic loss
    g = spmd.grad(loss)(p)
    return {k: p[k] - np.float32(0.5) * g[k] for k in p}


def train(steps=30, backend=None):
    """The final weights, flat (a fresh jit: traced and compiled again each time)."""
    mesh = spmd.Mesh((4,), ("data",))
    p, x, y = data()
    f = spmd.jit(step, backend=backend, in_shardings=(
        {"w1": mesh.sharding(None, None), "w2": mesh.sharding(None)},
        mesh.sharding("data", None), mesh.sharding("data")))
    for _ in range(steps):
        p = f(p, x, y)
    return np.concatenate([np.asarray(p[k].numpy()).ravel() for k in sorted(p)])


def digest(w):
    import hashlib
    return hashlib.sha256(np.ascontiguousarray(w).tobytes()).hexdigest()[:16]
