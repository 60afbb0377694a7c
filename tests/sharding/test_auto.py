"""spmd.AUTO (sharding/auto/): spmd chooses the shardings jit was told to choose. What
must hold: numpy's values; every sharding the user gave and every spmd.shard kept; the
same plan on every run and in every process; never slower than the baseline plan by the
model; a training step's new parameters laid out as the old; the printed plan, pasted
back, the same program; a memory_limit kept or refused."""
import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import spmd
from paths import TESTS
from spmd.sharding.auto import baseline
from spmd.sharding.auto.problem import build, free_values
from spmd.sharding.auto.strategies import layouts, op_strategies
from spmd.sharding.cost_model import Machine, Network

pytestmark = pytest.mark.filterwarnings("ignore::spmd.ReshardWarning")

MESH = spmd.Mesh((2, 2), ("data", "model"))
MESHES = [spmd.Mesh((2,), ("x",)), spmd.Mesh((4,), ("x",)), MESH]


def _chain(depth, act, reduce_axis):
    def f(x, *ws):
        h = x
        for w in ws[:depth]:
            h = h @ w
            h = np.tanh(h) if act else h * 0.5 + 1.0
        return h.sum(axis=reduce_axis) if reduce_axis is not None else h
    return f


@settings(max_examples=12, deadline=None)
@given(mesh=st.sampled_from(MESHES), depth=st.integers(1, 3), act=st.booleans(),
       reduce_axis=st.sampled_from([None, 0, 1]), rows=st.sampled_from([4, 8, 12]),
       dims=st.lists(st.sampled_from([4, 6, 8]), min_size=4, max_size=4), seed=st.integers(0, 9))
def test_auto_gives_numpys_values(mesh, depth, act, reduce_axis, rows, dims, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, dims[0])).astype(np.float32)
    ws = [rng.standard_normal((dims[i], dims[i + 1])).astype(np.float32) for i in range(depth)]
    f = _chain(depth, act, reduce_axis)
    jf = spmd.jit(f, mesh=mesh, in_shardings=spmd.AUTO)
    got = np.asarray(jf(x, *ws))
    np.testing.assert_allclose(got, f(x, *ws), rtol=2e-5, atol=2e-5)
    low = jf.lower(x, *ws)
    # the kept plan is, by the model, no slower than the baseline nor than replicating
    s = low.auto.seconds
    assert s[low.auto.chosen] <= s["baseline"] + 1e-12 and s[low.auto.chosen] <= s["replicated"] + 1e-12


def mlp_step(p, x, y):
    def loss(p):
        h = np.maximum(x @ p["w1"], 0)
        return np.mean((h @ p["w2"] - y) ** 2)
    lv, g = spmd.value_and_grad(loss)(p)
    return lv, {k: p[k] - 0.1 * g[k] for k in p}


def mlp_args(batch=64, d=32, h=128):
    rng = np.random.default_rng(0)
    p = {"w1": rng.standard_normal((d, h)).astype(np.float32) * 0.1,
         "w2": rng.standard_normal((h, d)).astype(np.float32) * 0.1}
    return p, rng.standard_normal((batch, d)).astype(np.float32), rng.standard_normal((batch, d)).astype(np.float32)


def test_given_shardings_and_shard_inside_are_kept():
    p, x, y = mlp_args()
    given_x = MESH.sharding("data", None)

    def f(p, x, y):
        x = spmd.shard(x, MESH.sharding(None, "model"))
        return mlp_step(p, x, y)
    low = spmd.jit(f, mesh=MESH, in_shardings=(spmd.AUTO, given_x, spmd.AUTO)).lower(p, x, y)
    assert low.in_shardings[2] == given_x            # leaves: w1, w2, x, y
    pinned = [op for op in low.stages["propagated"].ops if op.name == "sharding_constraint"]
    assert any(op.result.sharding == MESH.sharding(None, "model") for op in pinned)


def test_new_parameters_are_laid_out_as_the_old():
    p, x, y = mlp_args()
    low = spmd.jit(mlp_step, mesh=MESH, in_shardings=spmd.AUTO).lower(p, x, y)
    sh = low.shardings()
    assert sh.out_shardings[1] == sh.in_shardings[0]


def test_auto_megatron_mlp_moves_no_more_than_the_hand_plan():
    p, x, y = mlp_args(batch=256, d=128, h=512)
    auto = spmd.jit(mlp_step, mesh=MESH, in_shardings=spmd.AUTO).lower(p, x, y)
    hand = spmd.jit(mlp_step, in_shardings=({"w1": MESH.sharding(None, "model"), "w2": MESH.sharding("model", None)},
                                             MESH.sharding("data", None), MESH.sharding("data", None))).lower(p, x, y)
    assert auto.report()["comm_bytes"] <= hand.report()["comm_bytes"]
    lv, _ = spmd.jit(mlp_step, mesh=MESH, in_shardings=spmd.AUTO)(p, x, y)
    np.testing.assert_allclose(float(lv), float(mlp_step.__wrapped__(p, x, y)[0]) if hasattr(mlp_step, "__wrapped__")
                               else float(spmd.jit(mlp_step)(p, x, y)[0]), rtol=1e-5)


def test_pasted_plan_is_the_same_program():
    p, x, y = mlp_args()
    low = spmd.jit(mlp_step, mesh=MESH, in_shardings=spmd.AUTO).lower(p, x, y)
    code = low.shardings().code()
    kw = eval(f"dict({code})", {"mesh": MESH})
    again = spmd.jit(mlp_step, **kw).lower(p, x, y)
    assert again.in_shardings == low.in_shardings
    assert again.out_shardings == low.out_shardings
    assert again.as_text("partitioned") == low.as_text("partitioned")


def test_plan_is_the_same_in_another_process():
    p, x, y = mlp_args()
    here = spmd.jit(mlp_step, mesh=MESH, in_shardings=spmd.AUTO).lower(p, x, y).shardings().code()
    script = (f"import sys; sys.path.insert(0, {TESTS!r}); from sharding.test_auto import mlp_step, mlp_args, MESH; "
              "import spmd; p, x, y = mlp_args(); "
              "print(spmd.jit(mlp_step, mesh=MESH, in_shardings=spmd.AUTO).lower(p, x, y).shardings().code())")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONHASHSEED": "123"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == here


def test_auto_needs_a_mesh():
    with pytest.raises(spmd.ShardingError, match="spmd.AUTO chooses shardings on a mesh"):
        spmd.jit(lambda x: x * 2, in_shardings=spmd.AUTO).lower(np.ones(4, np.float32))


def test_memory_limit_is_kept_or_refused():
    p, x, y = mlp_args(batch=64, d=64, h=256)
    whole = sum(v.nbytes for v in p.values()) + x.nbytes + y.nbytes
    limit = int(whole * 1.5)            # replicated, the arguments alone would take 2/3 of it
    low = spmd.jit(mlp_step, mesh=MESH, in_shardings=spmd.AUTO, memory_limit=limit).lower(p, x, y)
    # the arguments a device holds fit the share of the limit the search gives them
    held = sum(v.nbytes / np.prod([MESH.axis_size(a) for d in range(len(s.spec)) for a in s.dim_axes(d)])
               for s, v in zip(low.in_shardings, [p["w1"], p["w2"], x, y]))
    assert held <= 0.6 * limit + 1
    assert low.memory()["peak_bytes"] <= limit
    with pytest.raises(spmd.MemoryLimitError):
        spmd.jit(mlp_step, mesh=MESH, in_shardings=spmd.AUTO, memory_limit=1024).lower(p, x, y)


def test_explain_says_why():
    p, x, y = mlp_args()
    low = spmd.jit(mlp_step, mesh=MESH, in_shardings=spmd.AUTO).lower(p, x, y)
    text = low.explain(file=open(os.devnull, "w"))
    assert "spmd.AUTO: kept the" in text
    assert "p['w1']:" in text and "runner-up" in text and "decided by" in text


# -- the parts ----------------------------------------------------------------------------
def test_dot_strategies_hold_the_megatron_splits():
    def f(x, w):
        return x @ w
    g = spmd.jit(f, mesh=MESH).lower(np.ones((8, 4), np.float32), np.ones((4, 6), np.float32)).stages["dce"]
    dot = next(op for op in g.ops if op.name == "dot_general")
    sts = op_strategies(dot, MESH)
    pairs = {(s.operands[0].spec, s.operands[1].spec, s.results[0].partial) for s in sts}
    assert ((None, None), (None, "model"), ()) in {(a, b, c) for a, b, c in pairs} or \
        (MESH.sharding(None, None).spec, MESH.sharding(None, "model").spec, ()) in pairs
    # splitting the contracted dim leaves the result a pending sum over that axis
    assert any(s.results[0].partial == ("model",) and s.operands[1].spec[0] == "model" for s in sts)
    # 6 columns do not split 4 ways: no strategy splits them over both axes
    assert not any(s.operands[1].spec[1] == ("data", "model") for s in sts)
    assert sts[0].split == 1


def test_layouts_are_even_and_replicated_first():
    ls = layouts((8, 6), MESH)
    assert ls[0] == MESH.sharding(None, None)
    assert MESH.sharding(("data", "model"), None) in ls
    assert MESH.sharding(None, ("data", "model")) not in ls          # 6 % 4
    assert len(ls) == len(set(ls))


def test_elementwise_ops_follow_their_operand():
    def f(x, w):
        return np.tanh(x @ w) * 2.0 + 1.0
    g = spmd.jit(f, mesh=MESH).lower(np.ones((8, 4), np.float32), np.ones((4, 8), np.float32)).stages["scalar_reads"]
    pb = build(g, MESH, [None, None], [None], Machine(), Network())
    op_nodes = [n for n in pb.nodes if n.what == "op"]
    assert len(op_nodes) == 1 and len(op_nodes[0].ops) >= 3
    assert not free_values(g) & set(g.inputs)


def test_baseline_splits_the_largest_dim_over_the_largest_axis():
    m = spmd.Mesh((2, 4), ("a", "b"))
    assert baseline((8, 64), m) == m.sharding(None, "b")
    assert baseline((6, 3), m) == m.sharding("a", None)
    assert baseline((3,), m) == m.sharding(None)


def test_a_training_step_has_the_plain_data_parallel_plan_judged(tmp_path, monkeypatch):
    """A step whose parameters come back as results has the data-parallel plan among
    those judged whole (the parameters whole, the batch split on its leading dim over
    the mesh): where collectives cost a lot a round (MPI processes on a loaded host),
    the search's one-node-at-a-time refinement does not reach it, and the kept plan
    is then never slower by the model. Default rates (no stored ones)."""
    from spmd.sharding.auto.choose import batch_split, data_parallel
    monkeypatch.setenv("SPMD_CACHE_DIR", str(tmp_path))
    rng = np.random.default_rng(0)
    p = {"w1": rng.standard_normal((32, 64)).astype(np.float32), "w2": rng.standard_normal((64, 32)).astype(np.float32)}
    x, y = rng.standard_normal((256, 32)).astype(np.float32), rng.standard_normal((256, 32)).astype(np.float32)
    slow = Network(within=spmd.Link(latency=5e-4, bandwidth=1e8))
    f = spmd.jit(mlp_step, mesh=MESH, in_shardings=spmd.AUTO, network=slow)
    low = f.lower(p, x, y)
    secs = low.auto.seconds
    assert "data parallel" in secs and "data parallel" not in low.auto.estimated
    assert min(v for k, v in secs.items() if k not in low.auto.estimated) <= secs["data parallel"]
    assert secs[low.auto.chosen] == min(v for k, v in secs.items() if k not in low.auto.estimated)
    lv, new = f(p, x, y)
    want_l, want = mlp_step(p, x, y)
    assert np.allclose(np.asarray(lv.numpy()), want_l, rtol=1e-4)
    assert all(np.allclose(new[k].numpy(), want[k], rtol=1e-4, atol=1e-6) for k in p)
    # the plan itself: the leading dim over every axis that divides it, else fewer
    assert batch_split((256, 32), MESH).spec == (("data", "model"), None)
    assert batch_split((6, 3), MESH).spec == ("data", None)
    assert batch_split((3,), MESH).spec == (None,)
    g = low.stages["traced"]
    # (leaves: w1, w2, x, y; results: the loss, then the new w1 and w2)
    ins = data_parallel(g, MESH, [0, 1, 2, 3], [None] * 4, {1: 0, 2: 1})
    assert [s.spec for s in ins] == [(None, None), (None, None), (("data", "model"), None), (("data", "model"), None)]
    assert data_parallel(g, MESH, [0, 1, 2, 3], [None] * 4, {}) is None      # no state: no such plan


def test_no_reported_figure_beats_the_plan_kept(tmp_path, monkeypatch):
    """Plans the search's model prices (not made: `estimated`) are figures of another
    model than the whole program's, which adds a program's fixed cost per call: one
    below the best plan made is made and judged, so the kept plan is the fastest of the
    figures reported. Stored rates with a large fixed cost per call made the search's
    figures of 'exact' and 'replicated' ~2000x below every made plan's."""
    import json
    (tmp_path / "machine.json").write_text(json.dumps({
        "machine": {"flops": 1e11, "bandwidth": 7e9, "step": 2.7e-5, "step_devices": 4.6e-4},
        "devices": 4, "transport": "local", "measured": "2026-11-28 22:29:09",
        "network": {"within": {"latency": 3e-5, "bandwidth": 6e8}}}))
    monkeypatch.setenv("SPMD_CACHE_DIR", str(tmp_path))
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((12, 4)).astype(np.float32), rng.standard_normal((4, 8)).astype(np.float32)
    f = _chain(1, False, 0)
    jf = spmd.jit(f, mesh=spmd.Mesh((4,), ("x",)), in_shardings=spmd.AUTO)
    low = jf.lower(x, w)
    s = low.auto.seconds
    assert all(s[low.auto.chosen] <= v + 1e-12 for v in s.values()), s
    np.testing.assert_allclose(np.asarray(jf(x, w)), f(x, w), rtol=2e-5, atol=2e-5)


def test_the_search_prices_a_products_elements_on_each_options_shards():
    """AUTO's op costs are the cost model's: a product's option pays product_element for
    each element of its operands' and result's shards under that option."""
    from spmd.sharding.auto.problem import local_elements
    x, w = np.ones((64, 32), np.float32), np.ones((32, 16), np.float32)
    # (the global program the search plans: not a stage after partitioning, whose shapes
    # are the chosen plan's shards)
    g = spmd.jit(lambda x, w: x @ w, mesh=MESH, in_shardings=spmd.AUTO).lower(x, w).stages["scalar_reads"]
    costs = {}
    for e in (0.0, 1e-6):
        pb = build(g, MESH, [spmd.AUTO, spmd.AUTO], [spmd.AUTO], Machine(flops=1e9, bandwidth=1e15, product_element=e),
                   Network())
        node = next(n for n in pb.nodes if n.what == "op")
        costs[e] = node
    node = costs[1e-6]
    (vx, sx), (vw, sw) = node.reads
    r = g.ops[node.index].results[0]
    seen = set()
    for j in range(node.n):
        elements = local_elements(vx.shape, sx[j]) + local_elements(vw.shape, sw[j]) + \
            local_elements(r.shape, node.makes[j][r])
        assert node.cost[j] - costs[0.0].cost[j] == pytest.approx(elements * 1e-6)
        seen.add(elements)
    assert len(seen) > 1           # (options of other shards pay other elements)


def test_at_equal_cost_a_split_of_a_major_dim_is_kept(tmp_path, monkeypatch):
    """A Jacobi sweep moves the same halo bytes split by rows or by columns, and the model
    prices both alike; the rows are kept: each shard is contiguous and each halo whole
    rows (a column's halo is an element of every row: a cache line and, on a wide grid, a
    page each)."""
    def jacobi(u):
        for _ in range(2):
            u[1:-1, 1:-1] = 0.25 * (u[2:, 1:-1] + u[:-2, 1:-1] + u[1:-1, 2:] + u[1:-1, :-2])
        return u
    monkeypatch.setenv("SPMD_CACHE_DIR", str(tmp_path))      # (the default rates, none stored)
    u = np.random.default_rng(0).random((512, 512))
    net = Network(within=spmd.Link(latency=2e-6, bandwidth=1e9))
    f = spmd.jit(jacobi, mesh=MESH, in_shardings=spmd.AUTO, network=net)
    low = f.lower(u.copy())
    spec = low.in_shardings[0].spec
    assert spec[0] is not None and spec[1] is None, spec
    np.testing.assert_array_equal(np.asarray(f(u.copy())), jacobi(u.copy()))
