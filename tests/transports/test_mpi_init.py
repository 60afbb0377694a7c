"""A rank stuck in MPI_Init ends itself, saying why, instead of hanging the job.

MPI_Init waits for the whole job; when a rank fails to start or the launcher's process
manager stops answering, the others would wait in it for good (srun, which waits for
every task, then never ends the job). The process manager here is a real socket that
takes MPICH's PMI connection and never answers: a real MPI_Init, really stuck."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from paths import ROOT

pytest.importorskip("mpi4py")


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_a_rank_stuck_in_mpi_init_ends_itself_naming_the_cause():
    with socket.socket() as pm:
        pm.bind(("127.0.0.1", 0))
        pm.listen(4)
        env = dict(os.environ, PMI_PORT=f"127.0.0.1:{pm.getsockname()[1]}", PMI_RANK="1", PMI_SIZE="2",
                   PMI_ID="1", SPMD_MPI_INIT_TIMEOUT="3", PYTHONPATH=ROOT)
        env.pop("SPMD_BACKEND", None)
        t0 = time.monotonic()
        p = subprocess.run([sys.executable, "-c", "import spmd; spmd.init(backend='mpi'); print('started')"],
                           env=env, capture_output=True, text=True, timeout=90)
        took = time.monotonic() - t0
    assert took < 30, took
    assert p.returncode == -signal.SIGTERM, (p.returncode, p.stdout, p.stderr)
    assert "started" not in p.stdout
    assert "rank 1 on" in p.stderr and "MPI_Init did not finish in 3 s" in p.stderr, p.stderr
    assert "SPMD_MPI_INIT_TIMEOUT" in p.stderr
