"""Ending a rank after a Ctrl-C: rank 0 tells the user's traceback once, every rank exits
130 (as Python does after a KeyboardInterrupt), without MPI_Abort."""
from __future__ import annotations

import os
import signal
import sys
import threading
import time

from ...tracebacks import user_traceback

# the exit status of a program a Ctrl-C ended, as a shell reports it (128 + SIGINT)
INTERRUPTED = 130
_ENDING = threading.Lock()


def end_interrupted(rank, report):
    """End this rank after a Ctrl-C. The terminal (or mpiexec, passing it on) interrupted
    every rank at once, so each has the same story: rank 0 tells it once (report: the
    user's traceback, as a local run prints it), the others leave quietly, at once. The
    status is 130, as Python's after a KeyboardInterrupt, without MPI_Abort (whose report
    and status 1 would be all the user saw); hydra's mpiexec exits 130 when every rank
    did (hold_launcher_link). Leaving before MPI_Finalize leaves no file behind: MPICH's
    files were unlinked at start (transports/mpi/mpi_files.py)."""
    _ENDING.acquire()           # the main thread and the watchdog may both come here: one tells
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)    # a second Ctrl-C must not cut this short
    try:
        if rank == 0 or rank is None:
            sys.stderr.write(report)
        sys.stderr.flush()
        sys.stdout.flush()
    finally:
        hold_launcher_link()
        os._exit(INTERRUPTED)


# seconds a rank's link to its launcher outlives the rank after a Ctrl-C
LINK_HOLD = 1.0


def hold_launcher_link():
    """Keep this rank's PMI connection open for a moment after it exits. Hydra's proxy
    takes a rank whose PMI connection closes before MPI_Finalize for a failure and
    SIGKILLs every other rank at once; after a Ctrl-C every rank is leaving on its own,
    but not in the same millisecond, and a rank killed that way makes mpiexec exit 9,
    not 130. A forked child holding the connection (and nothing else) lets the others
    finish leaving first."""
    try:
        fd = int(os.environ.get("PMI_FD", ""))
    except ValueError:
        return
    try:
        if os.fork() != 0:
            return
    except OSError:
        return
    try:
        os.closerange(0, fd)
        os.closerange(fd + 1, 1 << 16)
        time.sleep(LINK_HOLD)
    finally:
        os._exit(0)


def keyboard_interrupt(tp, value, tb, rank):
    """The excepthook's part for a KeyboardInterrupt raised on this rank."""
    end_interrupted(rank, user_traceback(tp, value, tb))
