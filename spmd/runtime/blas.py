"""BLAS threads: one count per run, set by the runtime, so that a product has the same bits
on every run.

The bits of a BLAS product depend on how many threads compute it (OpenBLAS blocks the
summed dimension of a large sgemm differently when it runs threaded), and the count is
one setting for the whole process. So:

- before a run, the runtime sets the count its ranks use (`start_run`): the user's own
  setting (OPENBLAS_NUM_THREADS, ...) if there is one, else this host's cores divided
  among the ranks running on it;
- ranks that share a process (the local runtime's threads) never change it during the run:
  a rank switching it while another rank's product runs would give that product other
  bits depending on timing. Their communicators say so (`ranks_in_process`), and the
  LLVM backend then runs every product at the run's count (native.shares_blas);
- a process running one rank (MPI, Ray, a mesh of one) may switch it per product (the LLVM
  backend runs small products on one thread): every run starts from the same count, so
  the switches are the same on every run.
"""
from __future__ import annotations

import os

# a user's own setting of the BLAS thread count wins
BLAS_ENV = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS")


def user_threads():
    """The user's BLAS thread count from the environment, or None. Read once per process:
    the BLAS libraries read these variables when they load, and this runs before every
    call (four environment reads were a tenth of a small step's fixed cost). An unset
    variable raises nothing (an exception raised and caught here on every call gave a
    Ctrl-C arriving while it was in flight a chance to be lost)."""
    if not _USER:
        _USER.append(_read_user_threads())
    return _USER[0]


_USER = []


def _read_user_threads():
    for v in BLAS_ENV:
        given = os.environ.get(v)
        if not given:
            continue
        first = given.split(",")[0].strip()
        if first.isdigit() and int(first) > 0:
            return int(first)
    return None


def threads_per_rank(ranks_here) -> int:
    return user_threads() or max(1, _cores() // max(1, ranks_here))


_CORES = []


def _cores() -> int:
    """The host's cores, asked once (os.cpu_count reads /sys: tens of microseconds, and
    this runs before every call)."""
    if not _CORES:
        _CORES.append(os.cpu_count() or 1)
    return _CORES[0]


def start_run(ranks_here):
    """Set the count for a run of `ranks_here` ranks on this host (cheap when unchanged)."""
    if not _NATIVE:
        # imported at the first run, not with spmd: a Ray actor or an eager-only process
        # loads no compiler until it needs one
        from ..backends.llvm import native
        _NATIVE.append(native)
    _NATIVE[0].set_blas_threads(threads_per_rank(ranks_here))


_NATIVE = []


def limit_threads(ranks_here):
    """Share this host's cores among the ranks on it, for every BLAS numpy may load (once,
    when a process joins an MPI world): numpy's BLAS starts a thread per core in every
    process, and with several ranks per host those threads spin against each other
    (train_gpt's 20 steps on 2 ranks of a 2-core host: 16.5 s with one BLAS thread per
    core per rank, 1.1 s with one per rank). The threads of a rank's own LLVM kernels are
    shared the same way (backends/llvm/executable.py, threads_for)."""
    if user_threads() is not None:
        return None
    from threadpoolctl import threadpool_limits
    return threadpool_limits(limits=threads_per_rank(ranks_here), user_api="blas")
