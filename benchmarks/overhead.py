"""A jitted call's fixed cost: what one call of an already compiled step of a few small
arrays costs beyond its arithmetic, per backend.

    python benchmarks/overhead.py [--calls 2000] [--repeats 5]

Backends: local with no mesh (1 device), local with a mesh of 4 devices, and
`mpiexec -n 2` (launched by this script: it runs itself as the MPI worker). The step is
an optimizer-like update of three float64 arrays of 64 elements, its results fed to
the next call, as in a training loop. Per backend it prints the median microseconds of
a call (medians over `--repeats` blocks of `--calls` calls), and in the same process
the same step as plain numpy (the peer: what the arithmetic and Python's calls cost).
Under MPI it also prints the median latency of one 8-byte mpi4py Allreduce measured
in the same run, the unit of the target (a call under 200 us + one all-reduce).
Noise: the machine is shared; the medians of blocks move by 10-30% between runs.
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

N = 64


def step(w, m, g):
    m = 0.9 * m + g
    w = w - 0.01 * m
    return w, m, g * 0.5


def _median_us(f, calls, repeats, world=None):
    f()
    f()
    blocks = []
    for _ in range(repeats):
        if world is not None:
            world.Barrier()
        t0 = time.perf_counter()
        for _ in range(calls):
            f()
        blocks.append((time.perf_counter() - t0) / calls)
    return 1e6 * float(np.median(blocks))


def _loop(fn, state):
    """A call that feeds the step's results to the next call."""
    def call():
        state[:] = fn(*state)
    return call


def measure(mesh, calls, repeats, world=None):
    import spmd
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(N) for _ in range(3)]
    if mesh is None:
        f = spmd.jit(step)
        state = [a.copy() for a in arrays]
    else:
        sh = mesh.sharding("d")
        f = spmd.jit(step, in_shardings=(sh, sh, sh), out_shardings=(sh, sh, sh))
        state = [spmd.device_put(a.copy(), sh) for a in arrays]
    spmd_us = _median_us(_loop(f, state), calls, repeats, world)
    numpy_us = _median_us(_loop(step, [a.copy() for a in arrays]), calls, repeats, world)
    return {"spmd_us": spmd_us, "numpy_us": numpy_us}


def mpi_worker(calls, repeats):
    from mpi4py import MPI
    import spmd
    world = MPI.COMM_WORLD
    mesh = spmd.Mesh((world.Get_size(),), ("d",))
    row = measure(mesh, calls, repeats, world)
    one, out = np.ones(1), np.empty(1)

    def allreduce():
        world.Allreduce(one, out, op=MPI.SUM)
    row["allreduce_us"] = _median_us(allreduce, calls, repeats, world)
    if world.Get_rank() == 0:
        print("RESULT " + json.dumps(row), flush=True)


def run_mpi(n, calls, repeats, env_extra=None):
    env = dict(os.environ, **(env_extra or {}))
    cmd = ["mpiexec", "-n", str(n), sys.executable, __file__, "--mpi-worker",
           "--calls", str(calls), "--repeats", str(repeats)]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise RuntimeError(f"mpiexec failed ({p.returncode}):\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")


def show(name, row):
    extra = ""
    if "allreduce_us" in row:
        extra = (f"  allreduce {row['allreduce_us']:7.1f} us  call - allreduce "
                 f"{row['spmd_us'] - row['allreduce_us']:7.1f} us")
    print(f"{name:28s} call {row['spmd_us']:7.1f} us  numpy {row['numpy_us']:6.1f} us  "
          f"call - numpy {row['spmd_us'] - row['numpy_us']:7.1f} us{extra}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--only", default="", help="comma-separated: local1,local4,mpi2")
    ap.add_argument("--mpi-worker", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.mpi_worker:
        mpi_worker(a.calls, a.repeats)
        return
    only = set(filter(None, a.only.split(",")))
    import spmd
    if not only or "local1" in only:
        spmd.init(backend="local", num_devices=1)
        show("local, 1 device (no mesh)", measure(None, a.calls, a.repeats))
    if not only or "local4" in only:
        spmd.init(backend="local", num_devices=4)
        show("local, 4 devices", measure(spmd.Mesh((4,), ("d",)), a.calls, a.repeats))
    if not only or "mpi2" in only:
        show("mpiexec -n 2", run_mpi(2, a.calls // 4, a.repeats))


if __name__ == "__main__":
    main()
