"""A 2-layer MLP training step in plain numpy, jit-compiled with value_and_grad, against
the same step computed eagerly with hand-written numpy gradients, over 20 steps."""
import numpy as np
import pytest

import spmd

LR = 0.1


def loss_fn(p, x, y):
    h = np.maximum(x @ p["w1"] + p["b1"], 0)
    return np.mean((h @ p["w2"] + p["b2"] - y) ** 2)


def step(p, x, y):
    loss, g = spmd.value_and_grad(loss_fn)(p, x, y)
    return loss, {k: p[k] - LR * g[k] for k in p}


def numpy_step(p, x, y):
    """The same step, forward and backward written out by hand."""
    z = x @ p["w1"] + p["b1"]
    h = np.maximum(z, 0)
    out = h @ p["w2"] + p["b2"]
    err = out - y
    loss = np.mean(err ** 2)
    d_out = (2 / err.size) * err
    d_out = d_out.astype(err.dtype)
    g = {"w2": h.T @ d_out, "b2": d_out.sum(0)}
    d_z = (d_out @ p["w2"].T) * (z > 0)
    g["w1"] = x.T @ d_z
    g["b1"] = d_z.sum(0)
    return loss, {k: p[k] - LR * g[k] for k in p}


def rel_err(a, b):
    return float(np.linalg.norm(np.asarray(a, np.float64) - b) / max(np.linalg.norm(np.asarray(b, np.float64)), 1e-30))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_mlp_training_matches_numpy(dtype, compiler):
    rng = np.random.default_rng(0)
    p = {"w1": rng.standard_normal((16, 32)) / 4, "b1": rng.standard_normal(32) / 10,
         "w2": rng.standard_normal((32, 4)) / 6, "b2": np.zeros(4)}
    p = {k: v.astype(dtype) for k, v in p.items()}
    x = rng.standard_normal((64, 16)).astype(dtype)
    y = np.tanh(x[:, :4] * 2).astype(dtype)

    count = []

    def counted(p, x, y):
        count.append(1)
        return step(p, x, y)
    f = spmd.jit(counted, backend=compiler)
    pj, pn = p, p
    losses = []
    for _ in range(20):
        lj, pj = f(pj, x, y)
        ln, pn = numpy_step(pn, x, y)
        assert lj.dtype == dtype and lj.shape == ()
        assert rel_err(lj, ln) < 1e-5, (lj, ln)
        for k in p:
            assert pj[k].dtype == dtype and pj[k].shape == p[k].shape
            assert rel_err(pj[k], pn[k]) < 1e-5, (k, rel_err(pj[k], pn[k]))
        losses.append(float(lj))
    assert len(count) == 1                    # traced once, run 20 times
    assert losses[-1] < 0.8 * losses[0]       # and it actually trains
