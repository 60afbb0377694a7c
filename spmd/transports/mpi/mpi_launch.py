"""Launching the ranks with MPI: find mpiexec and build its command line.

The mpich wheel ships MPICH's hydra `mpiexec` next to the Python executable; any other
mpiexec / mpirun on PATH (Open MPI, Intel MPI) works too.

With hydra, `spmd run` passes -disable-auto-cleanup: by default hydra kills every rank
the moment one dies and only reports that process's PID; without the cleanup, the
surviving ranks see the loss themselves, within SPMD_COLLECTIVE_TIMEOUT, and abort with
a message naming the lost rank (transports/mpi/mpi_watchdog.py). An exception on a rank still ends
the job at once (the rank aborts the world, transports/mpi/mpi_runtime.py). Each rank runs under
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
    once with only its own error, and the ranks on that host cannot speak. A failure of
    hydra's after every rank ended with status 0 (each rank's parent says so in a
    directory of ours, launcher/rank.py) is not the job's."""
    import signal

    from ...launcher.ssh import say_lost_hosts
    adopt_orphans()
    # SIGPIPE stays ignored in mpiexec, as when `spmd run` on one host execs it (Python
    # ignores it, and exec keeps an ignored signal ignored). subprocess would put back its
    # default action, and hydra neither handles nor ignores it: a write of its to a pipe
    # or socket whose other end had closed (an ssh or proxy connection, as a job ends)
    # killed it outright, status -13, which sys.exit made exit status 243 without a word;
    # ignored, the write fails with EPIPE, which hydra handles
    import tempfile
    finished = tempfile.mkdtemp(prefix="spmd-finished-")
    env = dict(os.environ if env is None else env, SPMD_RANKS_FINISHED=finished)
    p = subprocess.Popen(cmd, env=env, restore_signals=False)
    signal.signal(signal.SIGTERM, lambda *_: p.send_signal(signal.SIGTERM))
    while True:
        try:
            code = p.wait()
            break
        except KeyboardInterrupt:
            p.send_signal(signal.SIGINT)
    end_orphans()
    if code < 0:                 # the status of a process a signal ended, as a shell gives it
        sys.stderr.write(f"spmd run: mpiexec was killed by {how_killed(-code)}\n")
        code = 128 - code
    n = sum(len(ranks) for _, ranks in placement)
    done = len(os.listdir(finished))
    import shutil
    shutil.rmtree(finished, ignore_errors=True)
    if code != 0 and done == n:
        sys.stderr.write(f"spmd run: every one of the {n} ranks ended with status 0; mpiexec failed after "
                         f"that (hydra signals every proxy as each rank ends, and one had already left): "
                         f"the job succeeded\n")
        return 0
    if code != 0:
        say_lost_hosts(placement)
    return code


def how_killed(sig) -> str:
    import signal
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


def adopt_orphans():
    """Make this process the one that inherits its descendants when their parent exits
    (Linux's child subreaper), so end_orphans can find what mpiexec leaves behind."""
    import ctypes
    try:
        ctypes.CDLL(None, use_errno=True).prctl(36, 1)          # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        pass


def end_orphans():
    """SIGKILL the processes mpiexec left to this one: hydra exits without ending its ssh
    client to a host whose link is cut, which would wait for TCP to give up (minutes)."""
    import signal
    me = str(os.getpid())
    for pid in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                ppid = f.read().rsplit(")", 1)[1].split()[1]
        except OSError:
            continue
        if ppid == me:
            try:
                os.kill(int(pid), signal.SIGKILL)
                os.waitpid(int(pid), 0)
            except (ProcessLookupError, ChildProcessError):
                pass
