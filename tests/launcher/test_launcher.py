"""`spmd run` and backend detection: the same script under every backend."""
import os
import re
import subprocess

import pytest

from spmd.transports.mpi.mpi_launch import find_mpiexec
from spmd.runtime.detect import detect_backend
from paths import ROOT, SCRIPTS

HELLO = os.path.join(SCRIPTS, "hello.py")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def spmd_run(*args, timeout=150, env=None):
    e = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), **(env or {}))
    for k in ("SPMD_BACKEND", "SPMD_NUM_DEVICES", "RAY_ADDRESS"):
        e.pop(k, None)
    p = subprocess.run(["spmd", "run", *args], capture_output=True, text=True, timeout=timeout, env=e)
    return p, ANSI.sub("", p.stdout), ANSI.sub("", p.stderr)


SRUN_TASK = {"SLURM_STEP_NUM_TASKS": "4", "SLURM_PROCID": "1", "SLURM_STEP_NODELIST": "h[1-2]",
             "SLURM_LOCALID": "1"}


@pytest.mark.parametrize("env, want", [
    ({}, "local"),
    ({"SPMD_BACKEND": "ray"}, "ray"),
    ({"PMI_RANK": "0", "PMI_SIZE": "4"}, "mpi"),                 # mpiexec (MPICH hydra)
    ({"OMPI_COMM_WORLD_SIZE": "4"}, "mpi"),                      # Open MPI's mpirun
    ({"PMIX_RANK": "1"}, "mpi"),                                  # a PMIx launcher
    (dict(SRUN_TASK, SLURM_NTASKS="4"), "mpi"),                  # srun -n 4
    ({"SLURM_NTASKS": "4", "SLURM_PROCID": "0"}, "local"),       # inside sbatch, not srun
    (dict(SRUN_TASK, SLURM_STEP_NUM_TASKS="1"), "local"),        # srun -n 1
    ({"SPMD_BACKEND": "local", "PMI_RANK": "0"}, "local"),       # the explicit choice wins
])
def test_detect_backend(env, want):
    assert detect_backend(env) == want


def test_detect_is_used_by_init(monkeypatch):
    import spmd.runtime.current_runtime as ctx
    monkeypatch.setenv("SPMD_BACKEND", "nope")
    monkeypatch.setattr(ctx, "_runtime", None)
    with pytest.raises(spmd_error(), match="unknown backend 'nope'"):
        ctx.init()


def spmd_error():
    from spmd.errors import SpmdError
    return SpmdError


def test_spmd_run_rejects_bad_arguments():
    for args in (["-n", "0", HELLO], ["-n", "2", "--backend", "nope", HELLO], [HELLO]):
        p, _, err = spmd_run(*args, timeout=30)
        assert p.returncode == 2 and "usage: spmd run" in err, (args, err)


@pytest.mark.timeout(60)
def test_spmd_run_local():
    p, out, err = spmd_run("-n", "2", "--backend", "local", HELLO)
    assert p.returncode == 0, err
    lines = out.splitlines()
    assert "backend local process 0 of 1 devices 2" in lines
    assert "hello from device 0" in lines and "hello from device 1" in lines
    assert "sum 28.0" in lines


@pytest.mark.timeout(60)
@pytest.mark.skipif(find_mpiexec() is None, reason="no mpiexec")
def test_spmd_run_mpi_prefixes_other_ranks():
    p, out, err = spmd_run("-n", "2", "--backend", "mpi", HELLO)
    assert p.returncode == 0, err
    lines = out.splitlines()
    assert "backend mpi process 0 of 2 devices 2" in lines            # rank 0: plain
    assert "[rank 1] backend mpi process 1 of 2 devices 2" in lines   # rank 1: prefixed, whole line
    assert "hello from device 0" in lines and "[rank 1] hello from device 1" in lines
    assert lines.count("sum 28.0") == 1


@pytest.mark.timeout(120)
@pytest.mark.slow
def test_spmd_run_ray_starts_a_private_ray_on_loopback(tmp_path):
    trace = tmp_path / "trace.json"
    p, out, err = spmd_run("-n", "2", "--backend", "ray", HELLO,
                           env={"SPMD_RAY_OBJECT_STORE_MB": "100", "SPMD_TRACE": str(trace)})
    assert p.returncode == 0, err
    lines = out.splitlines()
    assert "backend ray process 0 of 1 devices 2" in lines            # the driver's own output
    assert "sum 28.0" in lines
    both = out + err              # Ray forwards the actors' output, prefixed with the actor's repr
    # rank 0 runs in the driver (a private Ray): plain, as MPI's rank 0; rank 1 an actor
    assert "hello from device 0" in lines, both
    assert re.search(r"\(rank 1 pid=\d+.*\) hello from device 1", both), both
    assert "ray nodes ['127.0.0.2']" in lines                         # Ray listens on loopback only
    # SPMD_TRACE: the driver wrote one file at exit with both actors' tracks
    import json
    spans = [e for e in json.loads(trace.read_text())["traceEvents"] if e["ph"] == "X"]
    assert {e["tid"] for e in spans} == {0, 1}
    assert all(any(e["tid"] == r and e["name"] == "all_reduce" for e in spans) for r in (0, 1))
