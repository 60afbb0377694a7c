"""Launching the ranks with MPI: find mpiexec and build its command line.

The mpich wheel ships MPICH's hydra `mpiexec` next to the Python executable; any other
mpiexec / mpirun on PATH (Open MPI, Intel MPI) works too.

With hydra, `spmd run` passes -disable-auto-cleanup: by default hydra kills every rank
the moment one dies and only reports that process's PID; without the cleanup, the
surviving ranks see the loss themselves, within SPMD_COLLECTIVE_TIMEOUT, and abort with
a message naming the lost rank (collectives/mpi.py). An exception on a rank still ends
the job at once (the rank aborts the world, runtime/mpi.py). Each rank runs under
launcher/rank.py, which names a rank that died by a signal (mpiexec does not).

Across hosts (`spmd run --hosts` / `--hostfile`) hydra starts its proxies over ssh and
passes the whole environment to every rank (-genvall: PYTHONPATH, SPMD_*, UCX_*, ...);
the ranks get the hosts in blocks of `host:slots` (launcher/hosts.py). Open MPI's
mpirun is given the same hosts and the variables spmd needs with -x.
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


# passed to every rank by Open MPI's mpirun (hydra passes the whole environment)
PASSED_ENV = ("PYTHONPATH", "PATH", "SPMD_", "UCX_", "OMP_", "OPENBLAS_", "MPIR_CVAR_")


def mpiexec_command(n, argv, placement=None, environ=None) -> list:
    """The command that runs argv (a program and its arguments) as n MPI ranks, on the
    hosts of `placement` ([(host, [ranks])], launcher/hosts.py) if given."""
    mpiexec = find_mpiexec()
    if mpiexec is None:
        raise SystemExit("spmd run: mpiexec not found (pip install mpich, or put an MPI's mpiexec on PATH)")
    hosts = ",".join(f"{h}:{len(rs)}" for h, rs in placement or () if rs)
    if is_hydra(mpiexec):
        where = ["-genvall", "-hosts", hosts] if hosts else []
        return [mpiexec, "-disable-auto-cleanup", *where, "-n", str(n), *argv]
    env = os.environ if environ is None else environ
    passed = [a for k in sorted(env) if k.startswith(PASSED_ENV) for a in ("-x", k)]
    return [mpiexec, *(["--host", hosts] if hosts else []), *passed, "-n", str(n), *argv]


def run_on_hosts(cmd, env, placement) -> int:
    """Run mpiexec across hosts and wait. If the job fails, say which hosts stopped
    answering: when a whole host is lost (crashed, its link cut), hydra ends the job at
    once with only its own error, and the ranks on that host cannot speak."""
    import signal

    from .ssh import unreachable
    from .hosts import ranks_text
    p = subprocess.Popen(cmd, env=env)
    while True:
        try:
            code = p.wait()
            break
        except KeyboardInterrupt:
            p.send_signal(signal.SIGINT)
    if code != 0:
        ranks = dict(placement)
        for host, why in unreachable([h for h, rs in placement if rs], timeout=POST_MORTEM_TIMEOUT):
            sys.stderr.write(f"spmd run: host {host} ({ranks_text(ranks[host])}) was lost: it no longer "
                             f"answers ssh ({why})\n")
        sys.stderr.flush()
    return code


# seconds a host has to answer ssh after a failed job (a reachable one answers in well under 1)
POST_MORTEM_TIMEOUT = 3
