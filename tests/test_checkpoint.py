"""spmd.save / spmd.load: resharding onto any mesh, atomicity, hostile input."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import spmd
from spmd.errors import CheckpointError, ShardingError, SpmdError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MESH = spmd.Mesh((2, 2), ("data", "model"))


def tree():
    rng = np.random.default_rng(0)
    return {"w": rng.standard_normal((7, 10)).astype(np.float32),       # uneven on 2x2
            "b": rng.standard_normal(6),
            "i": np.arange(12, dtype=np.int32).reshape(3, 4),
            "step": np.int64(42), "flags": [np.array([True, False, True])]}


def saved(tmp_path):
    t = tree()
    placed = {"w": spmd.device_put(t["w"], MESH.sharding("data", "model")),
              "b": spmd.device_put(t["b"], MESH.sharding(("data", "model"))),
              "i": spmd.device_put(t["i"], MESH.sharding(None, "model")),
              "step": t["step"], "flags": t["flags"]}
    path = str(tmp_path / "ckpt")
    spmd.save(path, placed)
    return path, t


def equal_trees(a, b):
    la, lb = spmd.tree_flatten(a)[0], spmd.tree_flatten(b)[0]
    assert len(la) == len(lb)
    for x, y in zip(la, lb):
        x, y = np.asarray(x), np.asarray(y)
        assert x.dtype == y.dtype and x.shape == y.shape
        np.testing.assert_array_equal(x, y)


def test_round_trip_to_numpy(tmp_path):
    path, t = saved(tmp_path)
    equal_trees(spmd.load(path), t)


@pytest.mark.parametrize("n", [1, 2, 4, 8])
def test_load_onto_other_meshes(tmp_path, n):
    path, t = saved(tmp_path)
    mesh = spmd.Mesh((n,), ("x",))
    got = spmd.load(path, {"w": mesh.sharding("x"), "b": mesh.sharding("x"), "i": mesh.sharding(None, "x"),
                           "step": None, "flags": mesh})
    assert isinstance(got["w"], spmd.Array) and got["w"].sharding == mesh.sharding("x", None)
    equal_trees(got, t)
    rep = spmd.load(path, mesh)
    equal_trees(rep, t)


def test_replicas_are_written_once(tmp_path):
    a = spmd.device_put(np.ones((4, 4)), MESH.sharding("data"))     # replicated over model
    spmd.save(str(tmp_path / "c"), {"a": a})
    files = [f for f in os.listdir(tmp_path / "c") if f.endswith(".npy")]
    assert len(files) == 2
    index = json.loads((tmp_path / "c" / "index.json").read_text())
    assert {s["device"] for s in index["leaves"][0]["shards"]} == {0, 2}


def test_save_replaces_atomically_and_leaves_no_temp(tmp_path):
    path = str(tmp_path / "c")
    spmd.save(path, {"a": np.zeros(3)})
    spmd.save(path, {"a": np.ones(3)})
    np.testing.assert_array_equal(spmd.load(path)["a"], np.ones(3))
    assert sorted(os.listdir(tmp_path)) == ["c"]


def test_resume_latest_skips_unfinished(tmp_path):
    from spmd.runtime.checkpoint import latest
    spmd.save(str(tmp_path / "step_00000001"), {"a": np.zeros(1)})
    os.makedirs(tmp_path / "step_00000002.tmp")
    os.makedirs(tmp_path / "step_00000003")              # no index: an interrupted copy
    assert latest(str(tmp_path)).endswith("step_00000001")


# -- hostile input ---------------------------------------------------------------------------
def _index(path):
    return json.loads(open(os.path.join(path, "index.json")).read())


def _write_index(path, index):
    with open(os.path.join(path, "index.json"), "w") as f:
        json.dump(index, f)


def test_corrupt_shard(tmp_path):
    path, _ = saved(tmp_path)
    f = os.path.join(path, "l4_s0.npy")
    data = bytearray(open(f, "rb").read())
    data[-1] ^= 0xFF
    open(f, "wb").write(bytes(data))
    with pytest.raises(CheckpointError, match="l4_s0.npy is corrupt"):
        spmd.load(path)


def test_truncated_shard(tmp_path):
    path, _ = saved(tmp_path)
    f = os.path.join(path, "l4_s0.npy")
    open(f, "r+b").truncate(20)
    with pytest.raises(CheckpointError, match="l4_s0.npy"):
        spmd.load(path)
    os.environ["SPMD_CHECKPOINT_VERIFY"] = "0"
    try:
        with pytest.raises(CheckpointError, match="not a readable .npy"):
            spmd.load(path)
    finally:
        del os.environ["SPMD_CHECKPOINT_VERIFY"]


def test_index_disagreeing_with_files(tmp_path):
    path, _ = saved(tmp_path)
    index = _index(path)
    index["leaves"][4]["shards"][0]["box"] = [[0, 10], [0, 10]]
    index["leaves"][4]["shape"] = [10, 10]
    _write_index(path, index)
    with pytest.raises(CheckpointError, match="index says"):
        spmd.load(path)


@pytest.mark.parametrize("name", ["../outside.npy", "/etc/passwd", "sub/../../x.npy", "..", ".hidden.npy", ""])
def test_paths_outside_the_checkpoint(tmp_path, name):
    path, _ = saved(tmp_path)
    index = _index(path)
    index["leaves"][0]["shards"][0]["file"] = name
    _write_index(path, index)
    with pytest.raises(CheckpointError, match="unsafe file"):
        spmd.load(path)


def test_symlink_escaping_the_directory(tmp_path):
    path, _ = saved(tmp_path)
    secret = tmp_path / "secret.npy"
    np.save(secret, np.zeros(3))
    os.remove(os.path.join(path, "l0_s0.npy"))
    os.symlink(secret, os.path.join(path, "l0_s0.npy"))
    with pytest.raises(CheckpointError, match="outside the checkpoint directory"):
        spmd.load(path)


def test_missing_file_and_bad_json(tmp_path):
    path, _ = saved(tmp_path)
    os.remove(os.path.join(path, "l1_s0.npy"))
    with pytest.raises(CheckpointError, match="missing"):
        spmd.load(path)
    open(os.path.join(path, "index.json"), "w").write("{not json")
    with pytest.raises(CheckpointError, match="not valid JSON"):
        spmd.load(path)
    with pytest.raises(CheckpointError, match="no checkpoint"):
        spmd.load(str(tmp_path / "nowhere"))


def test_shardings_naming_unknown_axes(tmp_path):
    path, _ = saved(tmp_path)
    with pytest.raises(ShardingError, match="unknown mesh axis"):
        spmd.load(path, {"w": MESH.sharding("nope"), "b": None, "i": None, "step": None, "flags": None})


@st.composite
def mutation(draw):
    kind = draw(st.sampled_from(["value", "delete", "type"]))
    leaf = draw(st.integers(0, 4))
    key = draw(st.sampled_from(["shape", "dtype", "shards", "box", "file", "sha256", "tree", "format", "leaves"]))
    val = draw(st.one_of(st.none(), st.integers(-5, 50), st.text(max_size=8), st.lists(st.integers(-2, 12), max_size=3),
                         st.booleans(), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2)))
    return kind, leaf, key, val


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mutation())
def test_fuzzed_index_is_a_clear_error_or_right(tmp_path_factory, m):
    base = tmp_path_factory.mktemp("fz")
    path, t = saved(base)
    index = _index(path)
    kind, leaf, key, val = m
    if key in ("tree", "format", "leaves"):
        target = index
    elif key in ("box", "file", "sha256"):
        target = index["leaves"][leaf]["shards"][0]
    else:
        target = index["leaves"][leaf]
    if kind == "delete":
        target.pop(key, None)
    else:
        target[key] = val if kind == "value" else str(val)
    _write_index(path, index)
    try:
        got = spmd.load(path)
    except SpmdError:
        return
    equal_trees(got, t)          # a mutation the loader accepts must not change any value


# -- faults ----------------------------------------------------------------------------------
KILLER = """
import sys, numpy as np, spmd
spmd.save(sys.argv[1], {"big": np.full((64, 1 << 20), 7.0, np.float32), "small": np.ones(3)})
"""


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_kill_during_save_leaves_previous_checkpoint(tmp_path):
    path = str(tmp_path / "c")
    spmd.save(path, {"big": np.zeros(4), "small": np.zeros(3)})
    p = subprocess.Popen([sys.executable, "-c", KILLER, path], env=dict(os.environ, PYTHONPATH=ROOT))
    deadline = time.monotonic() + 60
    while not os.path.exists(path + ".tmp") and time.monotonic() < deadline and p.poll() is None:
        time.sleep(0.01)
    time.sleep(0.05)
    p.send_signal(signal.SIGKILL)
    p.wait()
    got = spmd.load(path)
    np.testing.assert_array_equal(got["big"], np.zeros(4))
    shutil.rmtree(path + ".tmp", ignore_errors=True)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_train_gpt_resume_gives_identical_losses(tmp_path):
    import importlib.util
    spec = importlib.util.spec_from_file_location("gpt", os.path.join(ROOT, "examples", "train_gpt.py"))
    gpt = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpt)
    base = ["--batch", "4", "--seq", "16", "--d-model", "16", "--layers", "1", "--heads", "2",
            "--corpus-bytes", "100000", "--plot", "", "--quiet"]
    full = gpt.main(base + ["--steps", "6"])
    d = str(tmp_path / "ck")
    first = gpt.main(base + ["--steps", "3", "--checkpoint-dir", d, "--save-every", "3"])
    rest = gpt.main(base + ["--steps", "6", "--checkpoint-dir", d, "--save-every", "3"])
    assert len(first) == 3 and len(rest) == 3
    np.testing.assert_allclose(first + rest, full, rtol=1e-6)


@pytest.mark.timeout(120)
def test_saved_under_mpi_loads_locally(tmp_path):
    from spmd.launcher.cli import find_mpiexec
    path = str(tmp_path / "mpi_ckpt")
    p = subprocess.run([find_mpiexec(), "-n", "4", sys.executable, os.path.join(ROOT, "tests", "mpi_scripts",
                                                                                 "save_ckpt.py"), path],
                       capture_output=True, text=True, timeout=100, env=dict(os.environ, PYTHONPATH=ROOT))
    assert p.returncode == 0, p.stderr
    got = spmd.load(path)
    np.testing.assert_array_equal(got["a"], np.arange(42, dtype=np.float32).reshape(7, 6))
    np.testing.assert_array_equal(got["b"], np.arange(5.0))
    assert int(got["step"]) == 11
    on8 = spmd.load(path, {"a": spmd.Mesh((8,), ("x",)).sharding("x"), "b": None, "step": None})
    np.testing.assert_array_equal(np.asarray(on8["a"]), np.arange(42, dtype=np.float32).reshape(7, 6))
