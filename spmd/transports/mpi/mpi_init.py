"""A rank stuck in MPI_Init ends itself, saying why.

MPI_Init waits for every rank of the job. When one fails to start (its MPI_Init
aborted, its host is gone) or the launcher's process manager stops answering, the
others wait in it for good, and a launcher that waits for every task (srun without
--kill-on-bad-exit) never ends the job. MPI_Init holds the interpreter's lock while it
waits, so no thread of this process can act: a forked watcher (forked before MPI
exists in the process, and doing nothing but wait on a pipe) ends the rank past
SPMD_MPI_INIT_TIMEOUT seconds (default 120) with a message naming the rank, its host
and the cause. The watcher leaves as soon as MPI_Init returns, or when the rank dies
(its end of the pipe closes).
"""
from __future__ import annotations

import contextlib
import os
import select
import signal
import socket

# the launchers' names for this process's rank, before MPI can say it
RANK_VARS = ("PMI_RANK", "PMIX_RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK")

# after SIGTERM, seconds before SIGKILL (a program's own SIGTERM handler cannot run
# while MPI_Init holds the interpreter)
KILL_AFTER = 2.0


def init_timeout() -> float:
    """Seconds a rank waits in MPI_Init (SPMD_MPI_INIT_TIMEOUT, default 120)."""
    return float(os.environ.get("SPMD_MPI_INIT_TIMEOUT", "120"))


def stuck_message(timeout: float, pid: int) -> str:
    rank = next((os.environ[v] for v in RANK_VARS if v in os.environ), "?")
    return (f"spmd: rank {rank} on {socket.gethostname()} (pid {pid}): MPI_Init did not finish in {timeout:g} s: "
            f"another rank of the job failed to start (its error comes first) or the launcher's process manager "
            f"does not answer; ending this rank (SPMD_MPI_INIT_TIMEOUT sets the wait)\n")


@contextlib.contextmanager
def watching_init():
    """Around the first import of mpi4py.MPI (which runs MPI_Init)."""
    timeout = init_timeout()
    if timeout <= 0:
        yield
        return
    rank_pid = os.getpid()
    message = stuck_message(timeout, rank_pid).encode()
    r, w = os.pipe()
    child = os.fork()
    if child == 0:
        _watch(r, w, timeout, rank_pid, message)
    os.close(r)
    try:
        yield
    finally:
        os.close(w)
        os.waitpid(child, 0)


def _watch(r, w, timeout, rank_pid, message):
    """The forked watcher: only system calls, then _exit (it must not run the rank's
    Python: atexit handlers, buffered output, its threads' locks)."""
    try:
        os.close(w)
        ready, _, _ = select.select([r], [], [], timeout)
        if not ready:
            os.write(2, message)
            os.kill(rank_pid, signal.SIGTERM)
            ready, _, _ = select.select([r], [], [], KILL_AFTER)
            if not ready:
                os.kill(rank_pid, signal.SIGKILL)
    except BaseException:       # noqa: BLE001 (an interrupt or a rank already gone: nothing left to do)
        pass
    finally:
        os._exit(0)
