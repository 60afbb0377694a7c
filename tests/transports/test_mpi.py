"""The MPI backend, for real: scripts under the mpiexec the mpich wheel ships."""
import json
import os
import re
import subprocess
import sys
import time

import numpy as np
import pytest

import collective_checks
import spmd
from spmd.transports.mpi.mpi_launch import find_mpiexec
from paths import ROOT, SCRIPTS, TESTS

MPIEXEC = find_mpiexec()
pytestmark = [pytest.mark.mpi, pytest.mark.skipif(MPIEXEC is None, reason="no mpiexec")]


def mpirun(n, script, *args, timeout=120, env=None):
    e = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), **(env or {}))
    e.pop("SPMD_BACKEND", None)
    t0 = time.monotonic()
    p = subprocess.run([MPIEXEC, "-n", str(n), sys.executable, script, *args], capture_output=True, text=True,
                       timeout=timeout, env=e)
    return p, time.monotonic() - t0


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", [2, 4])
def test_every_collective_matches_numpy(n):
    """tests/collective_checks.py on meshes (n,), and for 4: (2, 2) and a (2, 2) with
    devices out of row-major order, over every axis and ordered axis pair."""
    p, _ = mpirun(n, os.path.join(SCRIPTS, "collectives.py"))
    assert p.returncode == 0, p.stdout + p.stderr
    oks = re.findall(r"OK (\d+)", p.stdout)
    assert len(oks) == n and len(set(oks)) == 1 and int(oks[0]) > 40
    rejected = re.findall(r"REJECTED (\d+)", p.stdout)
    meshes = 3 if n == 4 else 1
    want = sum(len(collective_checks.rejections(m)) + 2 for m in
               [spmd.Mesh((n,), ("x",))] + [spmd.Mesh((2, 2), ("a", "b"))] * (meshes - 1))
    assert rejected == [str(want)] * n, p.stdout


def losses(out):
    return [float(v) for v in re.findall(r"^step +\d+ +loss ([\d.]+)$", out, re.M)]


def _example(name):
    return os.path.join(ROOT, "examples", name)


@pytest.mark.timeout(240)
@pytest.mark.slow
def test_mlp_same_losses_under_mpiexec_as_locally():
    p, _ = mpirun(4, _example("mlp.py"), "--steps", "6")
    assert p.returncode == 0, p.stderr
    got = losses(p.stdout)
    local = subprocess.run([sys.executable, _example("mlp.py"), "--steps", "6"], capture_output=True, text=True,
                           timeout=120, env=dict(os.environ, PYTHONPATH=ROOT))
    want = losses(local.stdout)
    assert len(got) == len(want) == 6
    assert got == want            # (as printed: 6 digits)
    # only rank 0 prints plainly; every other rank's lines carry its rank
    assert all(ln.startswith("[rank ") for ln in p.stdout.splitlines() if "loss" in ln and not ln.startswith("step"))


@pytest.mark.timeout(120)
def test_spmd_run_launches_local_and_mpi():
    for backend in ("local", "mpi"):
        p = subprocess.run(["spmd", "run", "-n", "4", "--backend", backend, _example("mlp.py"), "--steps", "2"],
                           capture_output=True, text=True, timeout=100, env=dict(os.environ, PYTHONPATH=ROOT))
        assert p.returncode == 0, (backend, p.stderr)
        assert len(losses(p.stdout)) == 2, (backend, p.stdout)


def test_mesh_size_must_match_ranks():
    script = os.path.join(SCRIPTS, "wrong_mesh.py")
    p, took = mpirun(2, script)
    assert p.returncode != 0
    assert "mesh" in p.stderr and "4 devices" in p.stderr and "2" in p.stderr


@pytest.mark.timeout(120)
def test_timeline_merges_every_rank(tmp_path):
    import json
    out = tmp_path / "trace.json"
    p, _ = mpirun(4, os.path.join(SCRIPTS, "timeline.py"), env={"SPMD_TRACE": str(out)})
    assert p.returncode == 0, p.stderr
    events = json.loads(out.read_text())["traceEvents"]
    spans = [e for e in events if e["ph"] == "X"]
    assert {e["tid"] for e in spans} == {0, 1, 2, 3}
    for r in range(4):
        names = [n for e in spans if e["tid"] == r for n in e["name"].split("+")]   # fused: "tanh+reduce"
        assert "tanh" in names and "all_reduce" in names
    assert all(e["cat"] == "collective" for e in spans if e["name"] == "all_reduce")


@pytest.mark.timeout(120)
def test_validation_programs_identical_to_local(tmp_path):
    """The partitioner's validation programs give the local runtime's results."""
    import validation_programs as vp
    from spmd.transports.local.local_runtime import LocalRuntime
    path = tmp_path / "out.npz"
    p, _ = mpirun(4, os.path.join(SCRIPTS, "validation.py"), str(path))
    assert p.returncode == 0, p.stdout + p.stderr
    rt = LocalRuntime()
    want = vp.flat(vp.run_all(lambda exe, mesh, per_dev: rt.run(exe, mesh, per_dev)))
    vp.assert_same(dict(np.load(path)), want, "mpiexec -n 4 vs local")


@pytest.mark.timeout(60)
def test_messages_over_the_count_limit_are_chunked():
    """MAX_COUNT lowered to 7 elements: every collective and Array read goes through
    its chunked path and still matches numpy."""
    p, _ = mpirun(4, os.path.join(SCRIPTS, "chunked.py"))
    assert p.returncode == 0, p.stdout + p.stderr
    assert len(re.findall(r"OK \d+", p.stdout)) == 4


def test_mpich_is_told_to_yield_only_on_an_oversubscribed_host():
    from spmd.transports.mpi.mpi_library import OVERSUBSCRIBED, yield_when_oversubscribed
    cores = os.cpu_count() or 1
    env = {"MPI_LOCALNRANKS": str(2 * cores + 1)}
    yield_when_oversubscribed(env)
    assert all(env[k] == v for k, v in OVERSUBSCRIBED.items())
    env = {"OMPI_COMM_WORLD_LOCAL_SIZE": str(2 * cores + 2), "MPIR_CVAR_POLLS_BEFORE_YIELD": "500"}
    yield_when_oversubscribed(env)
    assert env["MPIR_CVAR_POLLS_BEFORE_YIELD"] == "500"             # the user's own setting wins
    for env in ({"MPI_LOCALNRANKS": str(2 * cores)}, {}, {"MPI_LOCALNRANKS": "x"}):
        before = dict(env)
        yield_when_oversubscribed(env)
        assert env == before


@pytest.mark.timeout(120)
def test_ranks_share_the_hosts_cores_for_blas():
    """Every rank's BLAS gets cores // (ranks on the host) threads, so ranks do not spin
    against each other's BLAS threads; a user's OPENBLAS_NUM_THREADS is kept."""
    script = os.path.join(SCRIPTS, "blas_threads.py")
    env = {k: "" for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    p, _ = mpirun(2, script, env=env)
    assert p.returncode == 0, p.stderr
    want = max(1, (os.cpu_count() or 1) // 2)
    assert sorted(re.findall(r"BLAS (\d) (\d+)", p.stdout)) == [("0", str(want)), ("1", str(want))], p.stdout
    p, _ = mpirun(1, script, env=env)                         # one rank: every core
    assert re.findall(r"BLAS (\d) (\d+)", p.stdout) == [("0", str(os.cpu_count() or 1))], p.stdout
    p, _ = mpirun(1, script, env=dict(env, OPENBLAS_NUM_THREADS="1"))
    assert re.findall(r"BLAS (\d) (\d+)", p.stdout) == [("0", "1")], p.stdout


@pytest.mark.timeout(240)
@pytest.mark.slow
def test_overlapped_gradient_reductions_under_mpiexec_equal_one_process(tmp_path):
    """The MLP and GPT steps of tests/async_programs.py with small buckets (start/done
    pairs: the exchange started, compute, the wait) under mpiexec -n 4 give the
    single-process (local runtime) results, bit for bit: every backend reduces in group
    order and every rank's BLAS has the same thread count."""
    import spmd
    sys.path.insert(0, TESTS)
    try:
        from async_programs import flat, gpt_case, mlp_case, pairs
    finally:
        sys.path.pop(0)
    out = str(tmp_path / "mpi.npz")
    env = {"SPMD_BUCKET_BYTES": "16384"}
    p, _ = mpirun(4, os.path.join(SCRIPTS, "async_step.py"), "step", out, timeout=200,
                  env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.count("OK step") == 4
    mesh = spmd.Mesh((2, 2), ("data", "model"))
    want, counts = [], {}
    old = os.environ.get("SPMD_BUCKET_BYTES")
    os.environ["SPMD_BUCKET_BYTES"] = env["SPMD_BUCKET_BYTES"]
    try:
        for make in (mlp_case, gpt_case):
            step, args, sh = make(mesh)
            f = spmd.jit(step, in_shardings=sh, backend="llvm")
            counts[make.__name__] = len(pairs(f.lower(*args).graph))
            want += flat(f(*args))
    finally:
        if old is None:
            del os.environ["SPMD_BUCKET_BYTES"]
        else:
            os.environ["SPMD_BUCKET_BYTES"] = old
    # every rank ran the same overlapped program as this process
    for name, n in counts.items():
        assert p.stdout.count(f"PAIRS {name} {n}") == 4, p.stdout
    assert counts["gpt_case"] >= 2
    got = np.load(out)
    assert len(got.files) == len(want)
    for k, w in enumerate(want):
        np.testing.assert_array_equal(got[f"arr_{k}"], w, err_msg=f"output {k}")


@pytest.mark.timeout(120)
def test_all_reduce_over_two_ranks_has_the_group_order_bits_on_both_paths():
    """Between two ranks an all_reduce of floats is one Allgather up to PAIR_GATHER_BYTES
    and Alltoall + Allgather beyond: both give the group-order sum's bits, blocking and
    started."""
    p, _ = mpirun(2, os.path.join(SCRIPTS, "pair_all_reduce.py"))
    assert p.returncode == 0, p.stdout + p.stderr
    assert re.findall(r"OK (\d+)", p.stdout) == ["24", "24"], p.stdout


@pytest.mark.timeout(120)
def test_calibration_runs_the_same_rounds_on_every_rank():
    """calibrate's timing loop decides together whether to run another round: a process
    deciding alone, on its own clock, left the others waiting in a collective nobody
    else entered (`mpiexec -n 4 spmd doctor --calibrate` then failed after the
    collective timeout, now and then)."""
    p, _ = mpirun(2, os.path.join(SCRIPTS, "calibrate_rounds.py"), env={"SPMD_COLLECTIVE_TIMEOUT": "20"})
    assert p.returncode == 0, p.stdout + p.stderr
    got = dict(re.findall(r"ROUNDS (\d) (\d+)", p.stdout))
    assert len(got) == 2 and got["0"] == got["1"] and int(got["0"]) > 4, p.stdout


@pytest.mark.timeout(180)
def test_the_crowding_of_mpis_processes_is_one_figure_on_every_rank(tmp_path):
    """calibrate.measure_crowding: chains of kernels and all_reduces, run by every
    process at once, part the rendezvous a collective costs between kernels from how
    much slower the processes' work runs than the stored machine's rates
    (Link.rendezvous, Link.slowdown); every process gets the same figures, within
    their bounds."""
    (tmp_path / "machine.json").write_text(json.dumps({"machine": {
        "flops": 5e10, "bandwidth": 1e10, "step": 5e-5, "call": 1e-6, "element": 2e-11}}))
    p, _ = mpirun(2, os.path.join(SCRIPTS, "calibrate_crowding.py"), env={"SPMD_CACHE_DIR": str(tmp_path)})
    assert p.returncode == 0, p.stdout + p.stderr
    got = dict(re.findall(r"CROWDING (\d) (.*)", p.stdout))
    assert len(got) == 2 and got["0"] == got["1"], p.stdout
    figures = json.loads(got["0"])
    assert sorted(figures) == ["rendezvous", "slowdown"], figures
    assert figures["rendezvous"] >= 0.0 and 0.5 <= figures["slowdown"] <= 8.0, figures


@pytest.mark.timeout(120)
def test_a_written_numpy_arguments_gather_back_is_in_the_prediction():
    """Under MPI every process holds the caller's array, so writing a numpy argument back
    gathers the other processes' shards into each: lowered.cost() prices it (an
    all_gather over the processes on their link, at its bandwidth for whole arrays where
    it was measured, and the small check), besides what a single process pays, and the
    array holds numpy's values."""
    p, _ = mpirun(2, os.path.join(SCRIPTS, "cost_write_back.py"))
    assert p.returncode == 0, p.stdout + p.stderr
    rows = re.findall(r"COST (\d) (\S+) (\S+) (\S+) (\w+) (\S+) (\S+)", p.stdout)
    assert len(rows) == 2, p.stdout
    for _, got, expect, local, same, got_fast, expect_fast in rows:
        assert float(got) == pytest.approx(float(expect)) and float(got) > float(local) and same == "True", rows
        assert float(got_fast) == pytest.approx(float(expect_fast)) and float(local) < float(got_fast) < float(got), rows
