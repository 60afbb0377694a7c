"""Collectives: spmd over MPI against raw mpi4py calls on the same buffers, in the same
run, and the Ray backend against MPI.

    python benchmarks/collectives.py [--sizes 1,8,64] [--ranks 2,4] [--repeats 15] [--no-ray]

MPI: runs itself under `mpiexec -n N` for each N; every rank times spmd's collective and
the raw mpi4py call (Allreduce, Allgather, Reduce_scatter_block, Alltoall into
preallocated buffers) alternately, each after a barrier; a run's time is the slowest
rank's, the figure is the median over the runs. Ray: N rank actors of a private Ray on
this machine, each timing the same collective after a barrier (slowest rank, median).

Prints, per op, size (MB of float32 per rank) and rank count: raw mpi4py, spmd-mpi,
spmd/raw (target <= 1.05 at >= 1 MB), spmd-ray, ray/mpi (target <= 3 at 8 MB). The
private Ray's object store is pre-faulted (SPMD_RAY_PREALLOCATE=1; --no-preallocate
to compare), which halves the cost of putting MBs into it on this VM.
This machine is shared and small: figures are noisy, ratios within a run less so.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")


def _count(mb, n):
    count = (mb << 20) // 4
    return count - count % (n * n)


# -- MPI: one process per rank ------------------------------------------------------------------
def mpi_rank(sizes, repeats, out_path):
    from mpi4py import MPI

    import spmd
    from spmd.collectives.mpi import MPICommunicator

    spmd.init()
    world = MPI.COMM_WORLD
    n = world.Get_size()
    comm = MPICommunicator(spmd.Mesh((n,), ("x",)))
    rows = []
    for mb in sizes:
        count = _count(mb, n)
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
        runs = max(repeats, 200 // mb)           # small messages: more runs, the noise is relatively larger
        for name in OPS:
            ours, raw = cases[name]
            t_ours, t_raw = [], []
            for k in range(runs + 2):            # 2 warm-up runs; the order alternates
                for f, ts in ((ours, t_ours), (raw, t_raw)) if k % 2 == 0 else ((raw, t_raw), (ours, t_ours)):
                    world.Barrier()
                    t0 = time.perf_counter()
                    f()
                    dt = world.allreduce(time.perf_counter() - t0, op=MPI.MAX)
                    if k >= 2:
                        ts.append(dt)
            rows.append({"op": name, "mb": mb, "ranks": n, "spmd_mpi": float(np.median(t_ours)),
                         "raw_mpi4py": float(np.median(t_raw))})
    if world.Get_rank() == 0:
        with open(out_path, "w") as f:
            json.dump(rows, f)


def run_mpi(n, sizes, repeats):
    from spmd.launcher.mpi import find_mpiexec
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "rows.json")
        subprocess.run([find_mpiexec(), "-n", str(n), sys.executable, __file__, "--mpi-rank", "--out", path,
                        "--sizes", ",".join(map(str, sizes)), "--repeats", str(repeats)], check=True)
        with open(path) as f:
            return json.load(f)


# -- Ray: one actor per rank --------------------------------------------------------------------
class RayBench:
    """A per-device program: time one collective `repeats` times; returns the times."""
    num_outputs = 1

    def __init__(self, op, mb, repeats):
        self.op, self.mb, self.repeats = op, mb, repeats

    def __call__(self, inputs, comm):
        n = comm.mesh.size
        x = np.random.default_rng(comm.rank).standard_normal(_count(self.mb, n)).astype(np.float32)
        f = {"all_reduce": lambda: comm.all_reduce(x, "x"),
             "all_gather": lambda: comm.all_gather(x, "x", 0),
             "reduce_scatter": lambda: comm.reduce_scatter(x, "x", 0),
             "all_to_all": lambda: comm.all_to_all(x, "x", 0, 0)}[self.op]
        ts = []
        for _ in range(self.repeats + 2):
            comm.barrier()
            t0 = time.perf_counter()
            f()
            ts.append(time.perf_counter() - t0)
        return [np.array(ts[2:])]


def ray_hop(sizes, repeats):
    """The transport's floor: one actor puts an array in the object store and another
    actor receives it as an argument (what every message of the Ray backend does), timed
    round trip by the sender. {MB: median seconds}."""
    import ray

    @ray.remote(num_cpus=0)
    class Receiver:
        def take(self, x):
            return x.nbytes

    @ray.remote(num_cpus=0)
    class Sender:
        def send(self, peer, mb, repeats):
            x = np.random.default_rng(0).standard_normal((mb << 20) // 4).astype(np.float32)
            ts = []
            for _ in range(repeats + 2):
                t0 = time.perf_counter()
                ray.get(peer.take.remote(ray.put(x)))
                ts.append(time.perf_counter() - t0)
            return float(np.median(ts[2:]))

    a, b = Sender.remote(), Receiver.remote()
    out = {mb: ray.get(a.send.remote(b, mb, max(repeats, 40 // mb))) for mb in sizes}
    ray.kill(a)
    ray.kill(b)
    return out


def run_ray(ranks, sizes, repeats, preallocate):
    import ray

    import spmd
    from spmd.launcher.ray import connect
    from spmd.runtime.ray import RayRuntime
    if "SPMD_RAY_OBJECT_STORE_MB" not in os.environ:        # room for 4 ranks x 64 MB x a few
        os.environ["SPMD_RAY_OBJECT_STORE_MB"] = str(max(1024, 8 * max(sizes) * max(ranks)))
    if preallocate:
        os.environ["SPMD_RAY_PREALLOCATE"] = "1"
    connect(max(ranks))
    rows = []
    for n in ranks:
        rt = RayRuntime(n)
        mesh = spmd.Mesh((n,), ("x",))
        for mb in sizes:
            for name in OPS:
                out = rt.run(RayBench(name, mb, max(repeats, 40 // mb)), mesh, {d: [] for d in range(n)})
                per_rank = np.array(ray.get([out[d][0] for d in range(n)]))
                rows.append({"op": name, "mb": mb, "ranks": n, "spmd_ray": float(np.median(per_rank.max(axis=0)))})
        rt.shutdown()
    hop = ray_hop(sizes, repeats)
    ray.shutdown()
    return rows, hop


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1,8,64")
    ap.add_argument("--ranks", default="2,4")
    ap.add_argument("--repeats", type=int, default=int(os.environ.get("BENCH_REPEATS", "15")))
    ap.add_argument("--ray-repeats", type=int, default=7)
    ap.add_argument("--no-ray", action="store_true")
    ap.add_argument("--no-preallocate", action="store_true",
                    help="do not pre-fault the private Ray's object store (SPMD_RAY_PREALLOCATE)")
    ap.add_argument("--mpi-rank", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    ranks = [int(s) for s in args.ranks.split(",")]
    if args.mpi_rank:
        return mpi_rank(sizes, args.repeats, args.out)

    rows = {}
    for n in ranks:
        for r in run_mpi(n, sizes, args.repeats):
            rows[(r["op"], r["mb"], r["ranks"])] = r
    hop = {}
    if not args.no_ray:
        ray_rows, hop = run_ray(ranks, sizes, args.ray_repeats, not args.no_preallocate)
        for r in ray_rows:
            rows[(r["op"], r["mb"], r["ranks"])].update(r)
    print(f"\nmedian ms (float32, MB per rank); MPI: max({args.repeats}, 200/MB) runs, "
          f"Ray: max({args.ray_repeats}, 40/MB) runs"
          f"{'' if args.no_ray else ', object store pre-faulted' if not args.no_preallocate else ''}")
    print(f"{'op':<15}{'MB':>4}{'ranks':>6}{'raw mpi4py':>12}{'spmd-mpi':>10}{'spmd/raw':>10}"
          f"{'spmd-ray':>10}{'ray/mpi':>9}")
    for n in ranks:
        for mb in sizes:
            for name in OPS:
                r = rows[(name, mb, n)]
                line = (f"{name:<15}{mb:>4}{n:>6}{r['raw_mpi4py'] * 1e3:>12.2f}{r['spmd_mpi'] * 1e3:>10.2f}"
                        f"{r['spmd_mpi'] / r['raw_mpi4py']:>10.2f}")
                if "spmd_ray" in r:
                    line += f"{r['spmd_ray'] * 1e3:>10.2f}{r['spmd_ray'] / r['spmd_mpi']:>9.1f}"
                print(line)
    if hop:
        print("\nRay's own floor: one array put by an actor and received by another (round trip)")
        for mb, t in hop.items():
            print(f"{mb:>4} MB {t * 1e3:8.2f} ms {mb / 1024 / t:6.2f} GB/s")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
