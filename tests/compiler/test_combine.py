"""passes/combine.py: independent all-reduces become one, results unchanged."""
import numpy as np

import spmd
from spmd.compiler.passes import combine_collectives


def _count(graph, name):
    return sum(op.name == name for op in graph.ops)


def test_gradient_all_reduces_are_combined_and_results_unchanged():
    mesh = spmd.Mesh((2,), ("data",))
    rng = np.random.default_rng(0)
    p = {"w1": rng.standard_normal((8, 16)).astype(np.float32),
         "w2": rng.standard_normal((16, 4)).astype(np.float32)}
    x = rng.standard_normal((6, 8)).astype(np.float32)

    def step(p, x):
        x = spmd.shard(x, mesh.sharding("data", None))

        def loss(p):
            return np.mean(np.tanh(x @ p["w1"]) @ p["w2"])
        l, g = spmd.value_and_grad(loss)(p)
        return l, {k: p[k] - 0.1 * g[k] for k in p}

    f = spmd.jit(step)
    low = f.lower(p, x)
    assert _count(low.stages["partitioned"], "all_reduce") >= 3
    assert _count(low.graph, "all_reduce") == 1          # loss and both gradients: one reduction
    rep = low.report()       # the partitioner's reshards, and what runs once combined
    assert len(rep["collectives"]) == _count(low.stages["partitioned"], "all_reduce")
    assert [c["op"] for c in rep["launched"]] == ["all_reduce"]
    assert rep["launched_bytes"] == rep["comm_bytes"] == rep["launched"][0]["bytes"]
    l, new = f(p, x)
    l0, new0 = spmd.jit(step, backend="numpy")(p, x)
    ref_l = np.mean(np.tanh(x @ p["w1"]) @ p["w2"])
    assert np.allclose(np.asarray(l.numpy()), ref_l, rtol=1e-5)
    for k in p:
        assert np.allclose(new[k].numpy(), new0[k].numpy(), rtol=1e-5, atol=1e-6)


def test_dependent_all_reduces_stay_apart():
    mesh = spmd.Mesh((2,), ("m",))
    rng = np.random.default_rng(1)
    a = rng.standard_normal((4, 8)).astype(np.float32)
    w1 = rng.standard_normal((8, 8)).astype(np.float32)
    w2 = rng.standard_normal((8, 8)).astype(np.float32)

    def f(a, w1, w2):
        h = a @ w1                       # contraction over the sharded dim: one all_reduce
        return np.tanh(h) @ w2           # depends on it: a second one, which cannot join
    sh = (mesh.sharding(None, "m"), mesh.sharding("m", None), mesh.sharding("m", None))
    low = spmd.jit(f, in_shardings=sh).lower(a, w1, w2)
    g = combine_collectives(low.stages["partitioned"])
    assert _count(g, "all_reduce") == _count(low.stages["partitioned"], "all_reduce")
    got = spmd.jit(f, in_shardings=sh)(a, w1, w2).numpy()
    assert np.allclose(got, np.tanh(a @ w1) @ w2, rtol=1e-4, atol=1e-5)


def test_the_bucket_default_follows_where_the_ranks_run(monkeypatch):
    """25 MiB on one host (fewer buckets in flight, less memory), 4 MiB when the runtime
    says the ranks span hosts (overlap on a slow link); SPMD_BUCKET_BYTES wins over both."""
    from spmd.compiler.passes import combine
    monkeypatch.delenv("SPMD_BUCKET_BYTES", raising=False)
    try:
        assert combine.bucket_bytes() == 25 << 20
        combine.use_hosts_default(True)
        assert combine.bucket_bytes() == 4 << 20
        monkeypatch.setenv("SPMD_BUCKET_BYTES", "1000")
        assert combine.bucket_bytes() == 1000
    finally:
        combine.use_hosts_default(False)
