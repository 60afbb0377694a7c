"""The disk cache of lowered programs (compiler/program_cache.py): a second process loads
every stage instead of propagating and partitioning again, gets the same program and the
same answers, and never gets another program's stages or loses a warning."""
import os
import pickle
import subprocess
import sys
import textwrap

import pytest

import spmd

SCRIPT = textwrap.dedent("""
    import sys, warnings
    import numpy as np, spmd
    warnings.simplefilter("always")
    mesh = spmd.Mesh((2, 2), ("data", "model"))
    scale = float(sys.argv[1])
    def step(w, x):
        h = np.tanh(x @ w) * scale
        return np.mean(h ** 2), w - 0.1 * (x.T @ h)
    rng = np.random.default_rng(0)
    w = rng.standard_normal((6, 4)).astype(np.float32)
    x = rng.standard_normal((8, 6)).astype(np.float32)
    f = spmd.jit(step, in_shardings=(mesh.sharding(None, "model"), mesh.sharding("data", None)))
    low = f.lower(w, x)
    loss, w2 = f(w, x)
    print("TIMINGS", sorted(low.timings))
    import io, hashlib
    text = low.as_text("partitioned") + low.as_text("optimized") + low.as_text("propagated")
    buf = io.StringIO(); low.explain(buf)
    print("TEXT", hashlib.sha1((text + buf.getvalue()).encode()).hexdigest())
    print("RESULT", repr(float(loss)), repr(np.asarray(w2).tobytes().hex()))
""")

WARNS = textwrap.dedent("""
    import warnings
    import numpy as np, spmd
    from spmd.sharding.reshard import ReshardWarning
    mesh = spmd.Mesh((4,), ("x",))
    f = spmd.jit(lambda a: np.linalg.inv(a), in_shardings=(mesh.sharding("x", None),))
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        f(np.eye(8) * 2.0)
    print("WARNINGS", sum(issubclass(x.category, ReshardWarning) for x in w))
""")


def _run(tmp_path, script, *args):
    env = dict(os.environ, SPMD_CACHE_DIR=str(tmp_path), SPMD_PROGRAM_CACHE="1", PYTHONHASHSEED="random")
    r = subprocess.run([sys.executable, "-c", script, *args], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    return {line.split(" ", 1)[0]: line.split(" ", 1)[1] for line in r.stdout.splitlines() if " " in line}


def _programs(tmp_path):
    return sorted((tmp_path / "programs").glob("*.pkl"))


@pytest.mark.slow
def test_second_process_loads_the_same_program(tmp_path):
    first = _run(tmp_path, SCRIPT, "1.5")
    assert "propagated" in first["TIMINGS"] and len(_programs(tmp_path)) == 1
    second = _run(tmp_path, SCRIPT, "1.5")
    assert second["TIMINGS"] == "['cache']"
    # the same stages (PYTHONHASHSEED differs: hashes inside must be rebuilt, not copied)
    # and the same explanation: where each sharding came from travels with the stages
    assert second["TEXT"] == first["TEXT"] and second["RESULT"] == first["RESULT"]
    # a different constant in the program is another key: lowered afresh, right answer
    other = _run(tmp_path, SCRIPT, "2.5")
    assert "propagated" in other["TIMINGS"] and len(_programs(tmp_path)) == 2
    assert other["RESULT"] != first["RESULT"]


@pytest.mark.slow
def test_a_corrupt_entry_is_lowered_again(tmp_path):
    first = _run(tmp_path, SCRIPT, "1.5")
    (path,) = _programs(tmp_path)
    path.write_bytes(path.read_bytes()[:100])
    again = _run(tmp_path, SCRIPT, "1.5")
    assert "propagated" in again["TIMINGS"] and again["RESULT"] == first["RESULT"]
    assert _run(tmp_path, SCRIPT, "1.5")["TIMINGS"] == "['cache']"     # rewritten whole


@pytest.mark.slow
def test_a_lowering_that_warned_warns_in_every_process(tmp_path):
    assert _run(tmp_path, WARNS)["WARNINGS"] != "0"
    assert _programs(tmp_path) == []
    assert _run(tmp_path, WARNS)["WARNINGS"] != "0"


def test_meshes_and_shardings_pickle_by_value():
    """Their cached hashes are of strings, which another process hashes differently: a
    pickled one must be rebuilt (and equal, with the same hash, here)."""
    mesh = spmd.Mesh((2, 2), ("a", "b"), devices=[[3, 2], [1, 0]])
    s = mesh.sharding("a", None, partial="b")
    blob = pickle.dumps(s)
    assert b"_hash" not in blob and b"_checked" not in blob
    t = pickle.loads(blob)
    assert t == s and hash(t) == hash(s) and t.mesh == mesh and hash(t.mesh) == hash(mesh)
    assert t.mesh.devices.tolist() == [[3, 2], [1, 0]]


def test_sharding_memo_keeps_the_checks():
    mesh = spmd.Mesh((2,), ("x",))
    assert mesh.sharding("x", None) == mesh.sharding(("x",), None)
    for bad in [("y",), ("x", "x")]:
        for _ in range(2):             # the second time must not pass on a memo
            with pytest.raises(spmd.ShardingError):
                mesh.sharding(*bad)
    s = spmd.Sharding(mesh, [["x"], None])      # an unhashable spec is checked, not memoised
    assert s.spec == ("x", None)


@pytest.mark.slow
@pytest.mark.mpi
def test_mpi_ranks_share_the_cache(tmp_path):
    """Four ranks of one host lower at once (each writes the entry whole, atomically);
    the next job's ranks all load it and compute the same as the first."""
    from spmd.transports.mpi.mpi_launch import find_mpiexec
    mpiexec = find_mpiexec()
    if mpiexec is None:
        pytest.skip("no mpiexec")
    script = tmp_path / "step.py"
    script.write_text(SCRIPT.replace('print("TIMINGS"', 'print(spmd.process_index(), "TIMINGS"')
                      .replace('print("RESULT"', 'print(spmd.process_index(), "RESULT"')
                      .replace('print("TEXT"', 'print(spmd.process_index(), "TEXT"'))
    env = dict(os.environ, SPMD_CACHE_DIR=str(tmp_path / "cache"), SPMD_PROGRAM_CACHE="1")
    env.pop("SPMD_BACKEND", None)
    outs = []
    for _ in range(2):
        r = subprocess.run([mpiexec, "-n", "4", sys.executable, str(script), "1.5"], env=env,
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
        outs.append(r.stdout)
    assert len(list((tmp_path / "cache" / "programs").glob("*.pkl"))) == 1
    assert outs[1].count("TIMINGS ['cache']") == 4
    results = [sorted(line for line in o.splitlines() if " RESULT " in line) for o in outs]
    assert len(results[0]) == 4 and results[0] == results[1]
