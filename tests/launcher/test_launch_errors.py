"""Errors every rank raises alike are said once, by rank 0, with what is wrong and the
fix first and the user's lines after (not every rank's traceback through spmd)."""
import os
import subprocess
import sys
import time

import pytest

from paths import ROOT, SCRIPTS
from spmd.transports.mpi.mpi_launch import find_mpiexec

MPIEXEC = find_mpiexec()
pytestmark = [pytest.mark.mpi, pytest.mark.skipif(MPIEXEC is None, reason="no mpiexec"), pytest.mark.timeout(90)]


def mpirun(n, script):
    env = dict(os.environ, PYTHONPATH=ROOT)
    for k in ("SPMD_BACKEND", "SPMD_NUM_DEVICES"):
        env.pop(k, None)
    t0 = time.monotonic()
    p = subprocess.run([MPIEXEC, "-n", str(n), sys.executable, os.path.join(SCRIPTS, script)], capture_output=True,
                       text=True, timeout=80, env=env)
    return p, [ln for ln in (p.stdout + p.stderr).splitlines() if not ln.startswith("Abort(")], \
        time.monotonic() - t0


def test_two_ranks_for_a_four_device_mesh_is_said_once():
    p, lines, took = mpirun(2, "wrong_mesh.py")
    assert p.returncode != 0 and took < 30
    assert lines[0] == "spmd: every rank (said once, by rank 0) failed:", lines
    assert lines[1] == ("spmd.errors.ShardingError: the mesh Mesh((4,), ('x',)) has 4 devices but MPI started 2 "
                        "ranks: launch with mpiexec -n 4 (one rank per device), or build the mesh from "
                        "spmd.device_count()")
    # then where, in the user's script only, and nothing from rank 1
    assert lines[2] == "raised from:" and "wrong_mesh.py\", line 7" in lines[3]
    assert len(lines) == 5 and not any("[rank 1]" in ln for ln in lines), lines


def test_unseeded_per_rank_weights_say_what_is_wrong_then_to_seed_alike():
    p, lines, took = mpirun(2, "unseeded.py")
    assert p.returncode != 0 and took < 30
    text = "\n".join(lines)
    assert "UNREACHABLE" not in text and text.count("SpmdError") == 1, text
    (msg,) = [ln for ln in lines if ln.startswith("spmd.errors.SpmdError")]
    wrong = msg.index("has different values on different ranks")
    seed = msg.index("Seed every rank alike")
    parts = msg.index("make_array_from_process_local_data")
    assert msg.index("argument args[1] of step") < wrong < seed < parts, msg
