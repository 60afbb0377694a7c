"""What `spmd run` starts as each MPI rank: the user's script as a child, so that a rank
that dies without a word (SIGKILL, the OOM killer, a segfault in native code) is named.

    python -I spmd/launcher/rank.py script.py args...

(a file run in isolated mode, so this parent imports only the standard library; it
imports nothing from spmd)
mpiexec only says that "a process" was killed; this parent, on the rank's own host,
sees how its child ended and says which rank, on which host, before it passes the
exit status on. Everything else goes straight through: the child inherits stdin,
stdout, stderr and the launcher's descriptors (MPICH's PMI_FD), signals sent to this
process (mpiexec's SIGUSR1 notice of a dead peer, SIGTERM, SIGINT) are passed on, and
the child is killed if this process dies first.
"""
from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import sys

# rank variables of the launchers spmd runs under, first found wins
RANK_ENV = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID")
FORWARDED = ("SIGUSR1", "SIGUSR2", "SIGTERM", "SIGINT", "SIGHUP")


def rank_of(env=None) -> str:
    env = os.environ if env is None else env
    return next((env[v] for v in RANK_ENV if env.get(v)), "?")


def how_it_ended(code: int) -> str | None:
    """None for a clean exit; otherwise how the process ended, in words."""
    if code == 0:
        return None
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"was killed by {name}"
    return f"exited with status {code}"


def _die_with_parent():
    """In the child: SIGKILL when this wrapper dies (Linux's PR_SET_PDEATHSIG)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        raise SystemExit("usage: python -I spmd/launcher/rank.py script.py [args...]")
    child = subprocess.Popen([sys.executable, *argv], close_fds=False,
                             preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None)
    for name in FORWARDED:
        sig = getattr(signal, name, None)
        if sig is not None:
            signal.signal(sig, lambda s, _f: child.send_signal(s))
    while True:
        try:
            code = child.wait()
            break
        except InterruptedError:
            continue
    # mpiexec signals ranks that are still finishing as the first ones leave; at exit
    # Python puts back the default action (terminate) on the signals it handled, while
    # an ignored signal stays ignored
    for name in FORWARDED:
        sig = getattr(signal, name, None)
        if sig is not None:
            signal.signal(sig, signal.SIG_IGN)
    what = how_it_ended(code)
    # an exception on the rank says everything itself (transports/mpi/mpi_runtime.py); a signal or a
    # silent exit does not
    if what and code < 0:
        sys.stderr.write(f"spmd run: rank {rank_of()} (pid {child.pid} on {socket.gethostname()}) {what}\n")
        sys.stderr.flush()
    if code == 0:
        _say_finished()
    sys.exit(128 - code if code < 0 else code)


def _say_finished():
    """Tell `spmd run` this rank's script ended cleanly (SPMD_RANKS_FINISHED: a directory
    of the launcher's, when this host can see it). Hydra may fail after every rank has
    ended: a rank's end is signalled to every proxy, and a proxy whose ranks have all left
    may be gone (\"unable to send SIGUSR1 downstream\"); the launcher then knows the job
    itself succeeded."""
    where = os.environ.get("SPMD_RANKS_FINISHED")
    if where and os.path.isdir(where):
        try:
            with open(os.path.join(where, f"rank-{rank_of()}"), "w"):
                pass
        except OSError:
            pass


if __name__ == "__main__":
    main()
