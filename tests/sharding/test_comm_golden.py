"""Golden communication tests: for programs whose parallelisation is textbook, spmd.jit
inserts exactly the collectives the textbook (and XLA's GSPMD) does, with their sizes;
a 2-layer MLP trained on a 2x2 (data, model) mesh matches the single-device run; and
lowering does not grow with the device count.

GSPMD reference (jax 0.10.2, jit with the same shardings, 4 host devices) for the 2x2
data x model training step below (batch 256, w1 64x256 split on model by columns, w2
256x8 by rows, x and y split on data by rows):

    all-reduce f32[128,8]                            over model  (h @ w2, forward)
    all-reduce (f32[], f32[128,64], f32[8,128])      over data   (loss, d w1, d w2)

i.e. four all-reduced arrays, 4096 + 4 + 32768 + 4096 = 40964 bytes per device.
"""
import os
import subprocess
import sys
import time

import numpy as np
import pytest

import spmd

LR = 0.1


def mlp_loss(p, x, y):
    h = np.maximum(x @ p["w1"], 0)
    return np.mean((h @ p["w2"] - y) ** 2)


def mlp_step(p, x, y):
    loss, g = spmd.value_and_grad(mlp_loss)(p)
    return loss, {k: p[k] - LR * g[k] for k in p}


def mlp_step_xy(p, x, y):
    loss, g = spmd.value_and_grad(lambda q: mlp_loss(q, x, y))(p)
    return loss, {k: p[k] - LR * g[k] for k in p}


def collectives(low):
    return [(c["op"], tuple(c["axes"]), int(np.prod(c["in_shape"])), c["dtype"]) for c in low.report()["collectives"]]


def params(rng, d_in=64, hidden=256, d_out=8, dtype=np.float32):
    return {"w1": (rng.standard_normal((d_in, hidden)) / 8).astype(dtype),
            "w2": (rng.standard_normal((hidden, d_out)) / 16).astype(dtype)}


def test_data_parallel_step_is_one_all_reduce_per_gradient():
    mesh = spmd.Mesh((4,), ("data",))
    rep, row = mesh.sharding(None, None), mesh.sharding("data", None)
    rng = np.random.default_rng(0)
    p = params(rng)
    x = rng.standard_normal((256, 64)).astype(np.float32)
    y = rng.standard_normal((256, 8)).astype(np.float32)
    f = spmd.jit(mlp_step_xy, in_shardings=({"w1": rep, "w2": rep}, row, row),
                 out_shardings=(mesh.sharding(), {"w1": rep, "w2": rep}))
    low = f.lower(p, x, y)
    got = sorted(collectives(low), key=lambda c: c[2])
    # the loss (a scalar) and each gradient, whole, over the data axis; nothing else
    assert got == [("all_reduce", ("data",), 1, "float32"), ("all_reduce", ("data",), 8 * 256, "float32"),
                   ("all_reduce", ("data",), 64 * 256, "float32")]
    rep_ = low.report()
    assert rep_["comm_bytes"] == 4 * (1 + 8 * 256 + 64 * 256)
    loss, newp = f(p, x, y)
    want_loss, want_p = _numpy_step(p, x, y)
    np.testing.assert_allclose(float(loss), want_loss, rtol=1e-5)
    for k in p:
        np.testing.assert_allclose(newp[k].numpy(), want_p[k], rtol=1e-5, atol=1e-6)


def test_megatron_forward_is_one_all_reduce_of_the_output():
    mesh = spmd.Mesh((4,), ("model",))
    rng = np.random.default_rng(1)
    p = params(rng)
    x = rng.standard_normal((32, 64)).astype(np.float32)

    def fwd(p, x):
        return np.maximum(x @ p["w1"], 0) @ p["w2"]

    f = spmd.jit(fwd, in_shardings=({"w1": mesh.sharding(None, "model"), "w2": mesh.sharding("model", None)},
                                    mesh.sharding(None, None)),
                 out_shardings=mesh.sharding(None, None))
    low = f.lower(p, x)
    assert collectives(low) == [("all_reduce", ("model",), 32 * 8, "float32")]
    np.testing.assert_allclose(f(p, x).numpy(), fwd(p, x), rtol=1e-5, atol=1e-6)


def _mesh22():
    return spmd.Mesh((2, 2), ("data", "model"))


def _mlp_2x2(mesh):
    row = mesh.sharding("data", None)
    ps = {"w1": mesh.sharding(None, "model"), "w2": mesh.sharding("model", None)}
    return spmd.jit(mlp_step_xy, in_shardings=(ps, row, row), out_shardings=(mesh.sharding(), ps))


GSPMD_2x2 = sorted([(("model",), 128 * 8), (("data",), 1), (("data",), 128 * 64), (("data",), 8 * 128)])


def test_2x2_training_step_matches_gspmd():
    mesh = _mesh22()
    rng = np.random.default_rng(2)
    p = params(rng)
    x = rng.standard_normal((256, 64)).astype(np.float32)
    y = np.tanh(x[:, :8])
    low = _mlp_2x2(mesh).lower(p, x, y)
    got = collectives(low)
    assert all(op == "all_reduce" for op, *_ in got), got
    assert sorted((axes, n) for _, axes, n, _ in got) == GSPMD_2x2
    assert low.report()["comm_bytes"] <= 4 * sum(n for _, n in GSPMD_2x2)


def test_moving_a_split_between_dims_is_one_all_to_all():
    mesh = spmd.Mesh((4,), ("x",))
    f = spmd.jit(lambda a: a * 2, in_shardings=mesh.sharding("x", None), out_shardings=mesh.sharding(None, "x"))
    a = np.arange(8 * 12, dtype=np.float32).reshape(8, 12)
    low = f.lower(a)
    assert collectives(low) == [("all_to_all", ("x",), 2 * 12, "float32")]
    (c,) = low.report()["collectives"]
    assert c["in_shape"] == (2, 12) and c["out_shape"] == (8, 3) and c["group_size"] == 4 and c["bytes"] == 96
    np.testing.assert_array_equal(f(a).numpy(), a * 2)


def _numpy_step(p, x, y):
    """The MLP step with hand-written gradients (float64 accumulation off: plain numpy)."""
    z = x @ p["w1"]
    h = np.maximum(z, 0)
    err = h @ p["w2"] - y
    loss = np.mean(err ** 2)
    d_out = ((2 / err.size) * err).astype(err.dtype)
    g = {"w2": h.T @ d_out, "w1": x.T @ ((d_out @ p["w2"].T) * (z > 0))}
    return loss, {k: p[k] - LR * g[k] for k in p}


@pytest.mark.slow
def test_mlp_training_on_2x2_matches_single_device_over_20_steps():
    mesh = _mesh22()
    rng = np.random.default_rng(3)
    p = params(rng)
    x = rng.standard_normal((256, 64)).astype(np.float32)
    y = np.tanh(x[:, :8])
    f = _mlp_2x2(mesh)
    one = spmd.jit(mlp_step_xy)
    ps, p1 = p, p
    for step in range(20):
        ls, ps = f(ps, x, y)
        l1, p1 = one(p1, x, y)
        np.testing.assert_allclose(float(ls), float(l1), rtol=1e-5, err_msg=f"loss at step {step}")
        for k in p:
            a, b = np.asarray(ps[k].numpy(), np.float64), np.asarray(p1[k], np.float64)
            assert np.linalg.norm(a - b) <= 1e-5 * np.linalg.norm(b), (step, k)
    assert float(ls) < float(mlp_loss(p, x, y))


def test_report_and_partitioned_text():
    mesh = _mesh22()
    rng = np.random.default_rng(4)
    p = params(rng)
    x = rng.standard_normal((256, 64)).astype(np.float32)
    low = _mlp_2x2(mesh).lower(p, x, np.tanh(x[:, :8]))
    rep = low.report()
    assert set(rep) >= {"collectives", "comm_bytes", "flops", "out_shardings"}
    for c in rep["collectives"]:
        assert set(c) >= {"op", "axes", "group_size", "in_shape", "out_shape", "dtype", "bytes"}
        assert c["bytes"] == 4 * max(np.prod(c["in_shape"]), np.prod(c["out_shape"]))
    assert rep["comm_bytes"] == sum(c["bytes"] for c in rep["collectives"])
    # per device, a quarter of: x @ w1 forward and for d w1; h @ w2 forward, for d w2 and d h
    a, b = 2 * 256 * 64 * 256, 2 * 256 * 256 * 8
    assert (2 * a + 3 * b) / 4 <= rep["flops"] <= 1.1 * (2 * a + 3 * b) / 4
    assert [s.spec for s in rep["out_shardings"][1:]] == [(None, "model"), ("model", None)]
    text = low.as_text("partitioned")
    assert "all_reduce" in text and "mesh<data=2, model=2>" in text
    assert "f32[128,128]" in text     # x's local piece @ w1's local piece


def test_lowering_does_not_grow_with_the_device_count():
    """One program for all devices: a (64, 64) mesh lowers about as fast as a (2, 4) mesh,
    plans the same collectives, and nothing is allocated per device."""
    def lower(shape):
        mesh = spmd.Mesh(shape, ("data", "model"))
        row = mesh.sharding("data", None)
        ps = {"w1": mesh.sharding(None, "model"), "w2": mesh.sharding("model", None)}
        f = spmd.jit(mlp_step_xy, in_shardings=(ps, row, row), out_shardings=(mesh.sharding(), ps))
        sd = spmd.ShapeDtype
        t = time.perf_counter()
        low = f.lower({"w1": sd((1024, 4096)), "w2": sd((4096, 1024))}, sd((8192, 1024)), sd((8192, 1024)))
        return time.perf_counter() - t, [(c["op"], c["axes"]) for c in low.report()["collectives"]]

    lower((2, 4))   # warm caches
    (ts, cs), (tb, cb) = lower((2, 4)), lower((64, 64))
    assert cs == cb
    assert tb < 3 * ts + 0.05, (ts, tb)


@pytest.mark.skipif(os.environ.get("SPMD_CHECK_GSPMD") != "1", reason="needs jax; set SPMD_CHECK_GSPMD=1")
def test_gspmd_reference_numbers():
    """Re-derive GSPMD_2x2 from XLA itself (jax on 4 host devices)."""
    pytest.importorskip("jax")
    code = r'''
import os
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
import jax, jax.numpy as jnp, numpy as np, re
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
mesh = Mesh(np.array(jax.devices()).reshape(2, 2), ("data", "model"))
def step(p, x, y):
    def loss(p):
        return jnp.mean((jnp.maximum(x @ p["w1"], 0) @ p["w2"] - y) ** 2)
    l, g = jax.value_and_grad(loss)(p)
    return l, {k: p[k] - 0.1 * g[k] for k in p}
S = lambda *s: NamedSharding(mesh, P(*s))
ps = {"w1": S(None, "model"), "w2": S("model", None)}
f = jax.jit(step, in_shardings=(ps, S("data", None), S("data", None)), out_shardings=(S(), ps))
z = jnp.zeros
txt = f.lower({"w1": z((64, 256)), "w2": z((256, 8))}, z((256, 64)), z((256, 8))).compile().as_text()
for line in txt.splitlines():
    if " all-reduce(" in line:
        print(re.findall(r"f32\[([\d,]*)\]", line.split("=", 1)[1].split("all-reduce(")[0]))
'''
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    sizes = sorted(int(np.prod([int(d) for d in s.split(",") if d] or [1]))
                   for line in out.splitlines() for s in eval(line))  # noqa: S307 - our own output
    assert sizes == sorted(n for _, n in GSPMD_2x2)
