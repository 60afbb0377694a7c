"""spmd's MPI collectives against raw mpi4py calls on the same buffers, in the same run.

    python benchmarks/collectives.py            # runs itself under mpiexec -n 2 and -n 4

Prints, per op, size and rank count, the median time of each and the ratio spmd/raw
(target <= 1.05 at >= 1 MB). Medians of several runs: this machine is shared and noisy.
"""
import os
import subprocess
import sys
import time

import numpy as np

SIZES_MB = (1, 8, 64)
REPEATS = int(os.environ.get("BENCH_REPEATS", "15"))


def bench_rank():
    from mpi4py import MPI

    import spmd
    from spmd.collectives.mpi import MPICommunicator

    spmd.init()
    world = MPI.COMM_WORLD
    n = world.Get_size()
    mesh = spmd.Mesh((n,), ("x",))
    comm = MPICommunicator(mesh)
    rows = []
    for mb in SIZES_MB:
        count = (mb << 20) // 4
        count -= count % (n * n)
        x = np.random.default_rng(world.Get_rank()).standard_normal(count).astype(np.float32)
        out_same = np.empty_like(x)
        out_gather = np.empty(count * n, np.float32)
        out_scatter = np.empty(count // n, np.float32)
        cases = {
            "all_reduce": (lambda: comm.all_reduce(x, "x"), lambda: world.Allreduce(x, out_same)),
            "all_gather": (lambda: comm.all_gather(x, "x", 0), lambda: world.Allgather(x, out_gather)),
            "reduce_scatter": (lambda: comm.reduce_scatter(x, "x", 0),
                               lambda: world.Reduce_scatter_block(x, out_scatter)),
            "all_to_all": (lambda: comm.all_to_all(x, "x", 0, 0), lambda: world.Alltoall(x, out_same)),
        }
        for name, (ours, raw) in cases.items():
            t_ours, t_raw = [], []
            for k in range(REPEATS + 2):
                for f, ts in ((ours, t_ours), (raw, t_raw)) if k % 2 == 0 else ((raw, t_raw), (ours, t_ours)):
                    world.Barrier()
                    t0 = time.perf_counter()
                    f()
                    dt = time.perf_counter() - t0
                    dt = world.allreduce(dt, op=MPI.MAX)
                    if k >= 2:
                        ts.append(dt)
            rows.append((name, mb, n, np.median(t_ours), np.median(t_raw)))
    if world.Get_rank() == 0:
        for name, mb, n, a, b in rows:
            print(f"{name:<15} {mb:>3} MB  {n} ranks   spmd {a * 1e3:8.2f} ms   raw mpi4py {b * 1e3:8.2f} ms   "
                  f"ratio {a / b:5.2f}")
        sys.stdout.flush()


def main():
    from spmd.launcher.cli import find_mpiexec
    print("spmd MPI collectives vs raw mpi4py (median of %d, float32)" % REPEATS)
    for n in (2, 4):
        subprocess.run([find_mpiexec(), "-n", str(n), sys.executable, __file__, "--rank"], check=True)


if __name__ == "__main__":
    if "--rank" in sys.argv:
        bench_rank()
    else:
        main()
