"""Failures under MPI end every rank promptly, with a message naming the rank; nothing
hangs (the Ray backend's failure tests are in test_ray.py, which owns the Ray cluster).

"Promptly" is well inside the timeout a test sets (SPMD_COLLECTIVE_TIMEOUT), which is
long, so that a run slowed by a loaded machine (the tests run on two workers) cannot be
taken for one that waited out the timeout; the failures end in a few seconds on a quiet one."""
import os
import subprocess
import sys
import time

import pytest

from spmd.transports.mpi.mpi_launch import find_mpiexec
from paths import ROOT, SCRIPTS

pytestmark = [pytest.mark.mpi, pytest.mark.skipif(find_mpiexec() is None, reason="no mpiexec"),
              pytest.mark.timeout(400)]


def launch(cmd, env=None, timeout=150):
    e = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), **(env or {}))
    for k in ("SPMD_BACKEND", "SPMD_NUM_DEVICES"):
        e.pop(k, None)
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=e)
    return p, p.stdout + p.stderr, time.monotonic() - t0


def mpiexec(n, script, env=None):
    return launch([find_mpiexec(), "-n", str(n), sys.executable, os.path.join(SCRIPTS, script)], env)


def spmd_run(n, script, env=None):
    return launch(["spmd", "run", "-n", str(n), "--backend", "mpi", os.path.join(SCRIPTS, script)], env)


@pytest.mark.parametrize("launcher", [mpiexec, spmd_run])
def test_exception_on_rank_2_ends_every_rank_with_its_traceback(launcher):
    p, out, took = launcher(4, "fail_raise.py", env={"SPMD_COLLECTIVE_TIMEOUT": "120"})
    assert p.returncode != 0
    assert took < 60, took                 # not the collective timeout: rank 2 aborts the world
    assert "rank 2 failed" in out and "RuntimeError: boom on purpose" in out
    assert 'fail_raise.py", line 13' in out                  # rank 2's own traceback
    assert "[rank 2] Traceback" in out                       # prefixed with its rank


def test_killed_rank_under_plain_mpiexec_ends_the_job():
    """Hydra's default: it kills every rank the moment one dies and names its PID."""
    p, out, took = mpiexec(4, "fail_kill.py", env={"SPMD_COLLECTIVE_TIMEOUT": "120"})
    assert p.returncode != 0 and took < 60, took
    assert "signal 9" in out or "Killed" in out


def test_killed_rank_under_spmd_run_is_named_by_the_others():
    """spmd run keeps the survivors alive (-disable-auto-cleanup); hydra tells them a rank
    died (SIGUSR1) and they abort at once naming it. Hydra itself sometimes tears the job
    down first (a race inside hydra, also seen with plain mpi4py), so: every run ends
    promptly, and a run that lets the survivors speak names rank 1."""
    named = 0
    for attempt in range(6):
        p, out, took = spmd_run(4, "fail_kill.py", env={"SPMD_COLLECTIVE_TIMEOUT": "120"})
        assert p.returncode != 0
        assert took < 60, took                   # not the 120 s timeout: told by mpiexec
        errors = [ln for ln in out.splitlines() if "CollectiveError" in ln]
        # told by mpiexec, or seen in the process table first
        assert all("rank(s) [1] of the 4 died" in ln or "rank(s) [1] of this group are gone" in ln
                   for ln in errors), errors
        named += bool(errors)
        if named:
            break
    assert named, out


def test_a_rank_that_leaves_early_is_named():
    """Rank 1 exits without an error, skipping an all_reduce: the others name it (told by
    mpiexec, or at the latest when their all_reduce times out)."""
    p, out, took = spmd_run(4, "exit_early.py", env={"SPMD_COLLECTIVE_TIMEOUT": "3"})
    assert p.returncode != 0
    assert took < 60, took
    assert "CollectiveError" not in out or "rank(s) [1]" in out
    assert "rank(s) [1]" in out or "EXIT STRING" in out or "exit code" in out.lower(), out


def _read_line():
    """file:line of the read in read_alone.py, the user line rank 0 waits at."""
    src = open(os.path.join(SCRIPTS, "read_alone.py")).read()
    return f"read_alone.py:{next(i for i, ln in enumerate(src.splitlines(), 1) if 'doubled.numpy()' in ln)}"


def test_reading_an_array_on_one_rank_fails_instead_of_hanging():
    """No stopwatch: rank 1 finished the program, so rank 0's read can never complete."""
    p, out, took = spmd_run(2, "read_alone.py")
    assert p.returncode != 0 and took < 60, took
    assert "rank(s) [1] finished the program without joining this collective" in out, out
    assert _read_line() in out, out                        # the user line rank 0 waits at


def test_a_stopwatch_when_asked_for():
    p, out, took = spmd_run(2, "read_alone.py", env={"SPMD_COLLECTIVE_TIMEOUT": "1"})
    assert p.returncode != 0 and took < 60, took
    assert "timed out after 1 s" in out and _read_line() in out, out
