"""A 2-layer MLP trained with spmd.jit + value_and_grad (the short example)."""
import numpy as np

import spmd


def init(rng, d_in=64, d_hidden=256, d_out=8):
    return {"w1": rng.standard_normal((d_in, d_hidden)).astype(np.float32) / np.sqrt(d_in),
            "w2": rng.standard_normal((d_hidden, d_out)).astype(np.float32) / np.sqrt(d_hidden)}


def step(params, x, y):
    def loss(p):
        h = np.maximum(x @ p["w1"], 0)
        return np.mean((h @ p["w2"] - y) ** 2)
    l, g = spmd.value_and_grad(loss)(params)
    return l, {k: params[k] - 0.1 * g[k] for k in params}


def main(steps=20):
    rng = np.random.default_rng(0)
    params = init(rng)
    x = rng.standard_normal((256, 64)).astype(np.float32)
    y = np.tanh(x[:, :8])
    f = spmd.jit(step)
    losses = []
    for i in range(steps):
        loss, params = f(params, x, y)
        losses.append(float(loss))
        print(f"step {i:3d}  loss {losses[-1]:.5f}")
    return losses


if __name__ == "__main__":
    main()
