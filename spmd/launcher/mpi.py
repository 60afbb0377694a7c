"""Launching the ranks with MPI: find mpiexec and build its command line.

The mpich wheel ships MPICH's hydra `mpiexec` next to the Python executable; any other
mpiexec / mpirun on PATH (Open MPI, Intel MPI) works too.

With hydra, `spmd run` passes -disable-auto-cleanup: by default hydra kills every rank
the moment one dies and only reports that process's PID; without the cleanup, the
surviving ranks see the loss themselves, within SPMD_COLLECTIVE_TIMEOUT, and abort with
a message naming the lost rank (collectives/mpi.py). An exception on a rank still ends
the job at once (the rank aborts the world, runtime/mpi.py).
"""
from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys


def find_mpiexec():
    exe = shutil.which("mpiexec") or shutil.which("mpirun")
    if exe is None:
        cand = os.path.join(os.path.dirname(sys.executable), "mpiexec")
        exe = cand if os.path.exists(cand) else None
    return exe


@functools.lru_cache(maxsize=None)
def is_hydra(mpiexec) -> bool:
    try:
        out = subprocess.run([mpiexec, "--version"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    return "HYDRA" in out


def mpiexec_command(n, argv) -> list:
    """The command that runs argv (a program and its arguments) as n MPI ranks."""
    mpiexec = find_mpiexec()
    if mpiexec is None:
        raise SystemExit("spmd run: mpiexec not found (pip install mpich, or put an MPI's mpiexec on PATH)")
    extra = ["-disable-auto-cleanup"] if is_hydra(mpiexec) else []
    return [mpiexec, *extra, "-n", str(n), *argv]
