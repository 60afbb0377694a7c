"""The same bits on every run: a float32 training loop's final weights are identical run
after run, in a fresh process and in the same one, on the local runtime and under
mpiexec (and on Ray: tests/transports/test_ray.py); reductions run in group order and the
BLAS thread count is the runtime's for the whole run."""
import os
import re
import subprocess
import sys
import threading

import numpy as np
import pytest

import spmd
from spmd.backends.llvm import native
from spmd.transports.mpi.mpi_launch import find_mpiexec
from spmd.runtime import blas
from paths import ROOT, SCRIPTS

MPIEXEC = find_mpiexec()


def _bits(out):
    """{backend: [digest of every run and rank]} from train_bits.py's output."""
    got = {}
    for backend, _, d in re.findall(r"BITS (\w+) (\d+) (\w+)", out):
        got.setdefault(backend, []).append(d)
    return got


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.skipif(MPIEXEC is None, reason="no mpiexec")
def test_training_loop_has_the_same_bits_on_every_run_locally_and_under_mpiexec():
    """5 runs on 4 local devices (a fresh process: the ranks' first calls race to set
    things up) and 3 under mpiexec -n 4, each traced and compiled again: one digest per
    compiler backend, on every run and rank, the same under MPI as on the threads."""
    script = os.path.join(SCRIPTS, "train_bits.py")
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("SPMD_BACKEND", None)
    local = subprocess.run([sys.executable, script, "5"], capture_output=True, text=True, timeout=200, env=env)
    assert local.returncode == 0, local.stderr
    mpi = subprocess.run([MPIEXEC, "-n", "4", sys.executable, script, "3"], capture_output=True, text=True,
                         timeout=200, env=env)
    assert mpi.returncode == 0, mpi.stdout + mpi.stderr
    here, there = _bits(local.stdout), _bits(mpi.stdout)
    for backend in ("llvm", "numpy"):
        assert len(here[backend]) == 5 and len(there[backend]) == 3 * 4, (local.stdout, mpi.stdout)
        assert set(here[backend]) == set(there[backend]) and len(set(here[backend])) == 1, \
            (backend, here[backend], there[backend])


def test_ranks_sharing_the_process_leave_the_blas_thread_count_as_the_run_set_it(monkeypatch):
    """Ranks of the local runtime are threads sharing one BLAS thread setting: a rank
    switching it for its product would change the bits of another rank's product that
    runs at that moment. So during a run it stays the runtime's (blas.start_run), even
    where a rank alone would switch it per product (every product here wants more
    threads than the run's count)."""
    from threadpoolctl import threadpool_info
    per_rank = blas.threads_per_rank(2)
    monkeypatch.setenv("SPMD_THREADS", str(per_rank + 1))
    monkeypatch.setattr(native, "SMALL_DOT", 0)
    mesh = spmd.Mesh((2,), ("x",))
    x = np.arange(64 * 32, dtype=np.float32).reshape(64, 32) / 100
    for backend in ("llvm", "numpy"):
        f = spmd.jit(lambda a, b: np.tanh(a @ b) @ b.T, in_shardings=(mesh.sharding("x", None), None),
                     backend=backend)
        got = f(x, x.T.copy())
        np.testing.assert_allclose(got.numpy(), np.tanh(x @ x.T) @ x, rtol=1e-5)
        # numpy's BLAS: scipy (loaded by spmd.AUTO's solver) brings a second one, untouched
        threads = [i["num_threads"] for i in threadpool_info()
                   if i["user_api"] == "blas" and "/numpy" in i["filepath"]]
        assert threads == [per_rank] and native.blas_threads_cell[0] == per_rank, (backend, threads)


def test_the_ranks_first_calls_find_one_blas(monkeypatch):
    """The local runtime's ranks build their native schedules at the same time: every
    one must see the whole BLAS table (one that saw a half-made one ran its products
    through numpy's matmul, with other bits)."""
    found = native.blas()
    if not found:
        pytest.skip("no OpenBLAS found")
    started = threading.Event()

    def slow():
        started.set()
        threading.Event().wait(0.2)       # the others arrive while the table is made
        return found

    monkeypatch.setattr(native, "_blas", None)
    monkeypatch.setattr(native, "_find_blas", slow)
    seen = []
    threads = [threading.Thread(target=lambda: seen.append(native.blas())) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert started.is_set() and len(seen) == 6 and all(s is found for s in seen)
