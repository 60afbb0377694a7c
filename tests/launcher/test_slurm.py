"""SLURM: spmd reads the rank, size and hosts of an srun task from SLURM's variables,
and a two-node SLURM cluster on the test bed (slurmctld on h1, a slurmd on h1 and h2;
spmd/testing/slurm.py) runs train_gpt with `srun -N 2 -n 4` and `sbatch`.

The mpich wheel's MPI starts under srun through SLURM's PMI-2 (`srun --mpi=pmi2`);
SLURM's PMIx plugin needs a PMIx library the wheel does not bring. Without PMI, srun's
tasks would each be an MPI world of one running the whole job; spmd stops them with
an error saying what to give srun."""
import json
import os
import re
import sys

import numpy as np
import pytest

from spmd.errors import SpmdError
from spmd.transports.mpi.mpi_launch import find_mpiexec
from spmd.runtime.detect import detect_backend, expand_nodelist, launcher_world
from gpt_programs import local_gpt_losses
from paths import ROOT, SCRIPTS

TASK = {"SLURM_PROCID": "3", "SLURM_STEP_NUM_TASKS": "4", "SLURM_STEP_NODELIST": "n[07-08]", "SLURM_LOCALID": "1",
        "SLURM_NTASKS": "4", "SLURM_JOB_ID": "12"}
GPT = ["--mesh", "2x2", "--batch", "4", "--seq", "8", "--d-model", "8", "--layers", "1", "--heads", "2",
       "--corpus-bytes", "20000", "--plot", "", "--quiet", "--steps", "5"]


def test_an_srun_task_is_read_from_slurms_variables():
    w = launcher_world(TASK)
    assert (w.launcher, w.rank, w.size, w.local_rank) == ("srun", 3, 4, 1)
    assert w.hosts == ("n07", "n08") and w.coordinator == "n07"         # rank 0's host, as in jax
    assert detect_backend(TASK) == "mpi"
    assert launcher_world({"SLURM_NTASKS": "4", "SLURM_PROCID": "0"}) is None   # a batch script
    assert launcher_world({"PMI_RANK": "1", "PMI_SIZE": "2"}).launcher == "mpiexec (hydra)"


@pytest.mark.parametrize("missing", ["SLURM_PROCID", "SLURM_STEP_NODELIST", "SLURM_LOCALID"])
def test_a_partial_slurm_environment_names_the_missing_variable(missing):
    env = {k: v for k, v in TASK.items() if k != missing}
    with pytest.raises(SpmdError, match=f"SLURM environment is partial: .* but {missing} is not .*srun"):
        detect_backend(env)


def test_slurm_host_lists_expand():
    assert expand_nodelist("h[1-3,7],gpu-[01-02]x,solo") == ["h1", "h2", "h3", "h7", "gpu-01x", "gpu-02x", "solo"]
    assert expand_nodelist("r[1-2]n[8-9]") == ["r1n8", "r1n9", "r2n8", "r2n9"]
    with pytest.raises(SpmdError, match="not a range of numbers"):
        expand_nodelist("h[a-b]")


# -- a SLURM cluster on the test bed -----------------------------------------------------------
@pytest.fixture(scope="module")
def slurm(testbed):
    from spmd.testing.slurm import Slurm, unavailable
    why = unavailable()
    if why:
        if os.environ.get("CI"):
            pytest.fail(f"SLURM on the test bed must run under CI: {why}")
        pytest.skip(why)
    if find_mpiexec() is None:
        pytest.skip("no MPI")
    with Slurm(testbed) as s:
        yield s


def run(slurm, cmd, timeout=150):
    env = slurm.env({"PYTHONPATH": ROOT, "SPMD_MPI_INIT_TIMEOUT": INIT_TIMEOUT})
    for k in ("SPMD_BACKEND", "SPMD_NUM_DEVICES"):
        env.pop(k, None)
    return slurm.run("h1", cmd, timeout=timeout, env=env)


# a job whose ranks cannot all start ends within this, saying so (transports/mpi/mpi_init.py)
INIT_TIMEOUT = "40"


@pytest.mark.mpi
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_srun_and_sbatch_run_train_gpt_on_two_nodes_with_the_single_host_losses(slurm, tmp_path):
    want = local_gpt_losses(GPT)
    # srun, as a person types it: the example itself, which prints its first and last loss
    p = run(slurm, ["srun", "-N", "2", "-n", "4", "--mpi=pmi2", sys.executable,
                    os.path.join(ROOT, "examples", "train_gpt.py"), *GPT])
    assert p.returncode == 0, p.stdout + p.stderr
    first, last = map(float, re.search(r"loss: first ([\d.]+)\s+last ([\d.]+)", p.stdout).groups())
    assert abs(first - want[0]) < 1e-4 and abs(last - want[-1]) < 1e-4, (p.stdout, want)
    assert p.stdout.count("loss: first") == 1                   # rank 0 alone prints it
    # sbatch: a batch script whose srun step runs it; every loss, at full precision
    script = tmp_path / "job.sh"
    script.write_text(f"#!/bin/sh\nsrun --mpi=pmi2 {sys.executable} {os.path.join(SCRIPTS, 'train_killed.py')} "
                      f"{' '.join(a or repr(a) for a in GPT)}\n")
    out = tmp_path / "job.out"
    try:
        p = run(slurm, ["sbatch", "--wait", "-N", "2", "-n", "4", "-o", str(out), str(script)])
    finally:
        text = out.read_text() if out.exists() else ""
        print("the batch job's output:\n" + text)
    assert p.returncode == 0, p.stdout + p.stderr + text
    got = json.loads(re.search(r"^LOSSES (.*)$", text, re.M).group(1))
    np.testing.assert_allclose(got, want, rtol=1e-5)


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_srun_without_pmi_is_an_error_saying_what_to_give_srun(slurm):
    p = run(slurm, ["srun", "-N", "2", "-n", "4", "--mpi=none", sys.executable,
                    os.path.join(SCRIPTS, "hello.py")], timeout=100)
    assert p.returncode != 0 and "sum 28.0" not in p.stdout, p.stdout
    assert len(re.findall(r"srun started this process as rank \d of 4, but MPI's world has 1 process\(es\) .*"
                          r"run srun --mpi=pmi2", p.stdout + p.stderr)) == 4, p.stdout + p.stderr
