"""lowered.report() is a dict (every key, indexable, equal to a plain
dict) and prints as a table: a line per collective, short lines."""
import pickle

import numpy as np

import spmd

MESH = spmd.Mesh((2, 2), ("data", "model"))
KEYS = {"collectives", "comm_bytes", "launched", "launched_bytes", "bytes_per_run", "flops", "out_shardings"}


def step(params, x, y):
    def loss(p):
        h = np.maximum(x @ p["w1"], 0)
        return np.mean((h @ p["w2"] - y) ** 2)
    l, g = spmd.value_and_grad(loss)(params)
    return l, {k: params[k] - 0.1 * g[k] for k in params}


def lowered():
    f32 = lambda *s: spmd.ShapeDtype(s, "float32")  # noqa: E731
    row = MESH.sharding("data", None)
    f = spmd.jit(step, in_shardings=({"w1": MESH.sharding(None, "model"), "w2": MESH.sharding("model", None)},
                                     row, row))
    return f.lower({"w1": f32(16, 32), "w2": f32(32, 4)}, f32(8, 16), f32(8, 4))


def test_the_report_is_still_the_dict():
    rep = lowered().report()
    assert isinstance(rep, dict) and set(rep) == KEYS
    plain = dict(rep)
    assert rep == plain and type(plain) is dict
    assert rep["comm_bytes"] == sum(c["bytes"] for c in rep["collectives"]) == 1348
    assert [c["op"] for c in rep["collectives"]] == ["all_reduce"] * 4
    assert pickle.loads(pickle.dumps(rep)) == rep


def test_the_report_prints_as_a_table():
    rep = lowered().report()
    text = str(rep)
    assert repr(rep) == text
    lines = text.splitlines()
    assert lines[0] == "collectives: 4, 1348 bytes per device (the partitioner's reshards)"
    rows = [ln for ln in lines if ln.startswith("  all_reduce")]
    # 4 reshards, then 2 launched (the gradients' all_reduces combined into one bucket)
    assert len(rows) == len(rep["collectives"]) + len(rep["launched"]) == 6
    for row, c in zip(rows, rep["collectives"]):
        assert row.split()[1] == ",".join(c["axes"]) and row.split()[-2] == str(c["bytes"]) and c["loc"] in row
    assert any(ln.startswith("launched: 2, 1348 bytes per device") for ln in lines)
    assert f"flops: {rep['flops']} per device" in lines
    assert lines[-1] == "out_shardings: {}, {_, model}, {model, _}"
    assert max(map(len, lines)) < 100


def test_nothing_combined_says_so_once():
    f = spmd.jit(lambda x: x.sum(), in_shardings=MESH.sharding("data", None))
    rep = f.lower(spmd.ShapeDtype((8, 4), "float32")).report()
    text = str(rep)
    assert "launched: 1, 4 bytes per device (what the compiled program runs): the same" in text
    assert sum(ln.startswith("  all_reduce") for ln in text.splitlines()) == 1


def test_bytes_per_run_count_a_loop_bodys_collectives_as_often_as_they_run():
    """A halo exchange inside a scan of n steps is listed once, with runs=n;
    bytes_per_run counts it n times; a while loop's trip count is the data's, so there
    bytes_per_run is None rather than a guess."""
    mesh = spmd.Mesh((4,), ("x",))
    sh = mesh.sharding("x")

    def sweeps(u, n):
        def body(c, _):
            return 0.5 * (c[:-2] + c[2:]).sum() + c * 0.25 + np.pad(c[1:] - c[:-1], (0, 1)), None
        return spmd.scan(body, u, None, length=n)[0]

    x = np.arange(32.0)
    reps = {n: spmd.jit(sweeps, in_shardings=(sh,), static_argnums=(1,)).lower(x, n).report() for n in (3, 7)}
    for n, rep in reps.items():
        inner = [c for c in rep["launched"] if c.get("inside")]
        assert inner and all(c["runs"] == n for c in inner), inner
        assert rep["bytes_per_run"] == sum(c["bytes"] * c["runs"] for c in rep["launched"])
        assert f"{n} times a run" in str(rep)
    assert reps[3]["launched_bytes"] == reps[7]["launched_bytes"]
    assert reps[7]["bytes_per_run"] - reps[3]["bytes_per_run"] == 4 * sum(
        c["bytes"] for c in reps[3]["launched"] if c.get("inside"))

    def until(u):
        return spmd.while_loop(lambda c: c.sum() < 1e6, lambda c: c + np.pad(c[1:], (0, 1)), u)

    rep = spmd.jit(until, in_shardings=(sh,)).lower(x).report()
    assert any(c["runs"] is None for c in rep["launched"]) and rep["bytes_per_run"] is None
    assert "decided by the data" in str(rep)
