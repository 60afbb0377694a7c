"""Collectives: spmd over MPI against raw mpi4py calls on the same buffers, in the same
run, and the Ray backend against MPI.

    python benchmarks/collectives.py [--sizes 1,8,64] [--ranks 2,4] [--repeats 15] [--no-ray]
    python benchmarks/collectives.py --testbed [--sizes 8] [--ranks 4]    # across 2 hosts
    python benchmarks/collectives.py --startup 3       # a private Ray's start-up, 3 starts

MPI: runs itself under `mpiexec -n N` for each N; every rank times spmd's collective and
the raw mpi4py call (Allreduce, Allgather, Reduce_scatter_block, Alltoall into
preallocated buffers) alternately, each after a barrier; a run's time is the slowest
rank's, the figure is the median over the runs. Ray: N rank actors of a private Ray on
this machine (their collectives over direct links: shared memory within a host, TCP
between hosts; transports/ray/ray_communicator.py), each timing the same collective after a barrier
(slowest rank, median). On one host MPI and Ray are measured in turn --rounds times
(default 3): each time is the median of its rounds, and ray/mpi the median of the
rounds' ratios (each Ray time over the MPI time measured just before it): the machine's
load drifts over minutes, which a single MPI-then-Ray pass would read as a ratio.

Prints, per op, size (MB of float32 per rank) and rank count: raw mpi4py, spmd-mpi,
spmd/raw (target <= 1.05 at >= 1 MB), spmd-ray, ray/mpi (target <= 1.3 at 8 MB).

--testbed: the same across two hosts of spmd/testing/cluster.py (network namespaces
joined by a 1 Gbit/s link, or --rate): MPI as `mpiexec -hosts h1:N/2,h2:N/2` with UCX over
TCP, Ray as a two-node cluster (`ray start` on each host, the driver on h1), N/2 ranks a
host. The all_reduce is then the hierarchical one on Ray (transports/ray/ray_communicator.py).

--startup K: seconds from spmd.init(backend="ray", num_devices=4) to 4 ranks ready to run
(a private Ray: transports/ray/ray_private.py), against the peer, ray.init() and 4 actors
placed the same way, each in a fresh process, medians of K alternating starts.
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
    from spmd.transports.mpi.mpi_communicator import MPICommunicator

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


def run_mpi(n, sizes, repeats, launch=None):
    """launch: the mpiexec command line up to the program (default: `mpiexec -n n` here)."""
    from spmd.transports.mpi.mpi_launch import find_mpiexec
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "rows.json")
        cmd = (launch or [find_mpiexec(), "-n", str(n)]) + [
            sys.executable, __file__, "--mpi-rank", "--out", path, "--sizes", ",".join(map(str, sizes)),
            "--repeats", str(repeats)]
        subprocess.run(cmd, check=True)
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


def ray_rows(rt, n, sizes, repeats):
    """Rows of spmd-ray times of the runtime rt's first n ranks."""
    import ray

    import spmd
    mesh = spmd.Mesh((n,), ("x",))
    rows = []
    for mb in sizes:
        for name in OPS:
            out = rt.run(RayBench(name, mb, max(repeats, 200 // mb)), mesh, {d: [] for d in range(n)})
            per_rank = np.array(ray.get([out[d][0] for d in range(n)]))
            rows.append({"op": name, "mb": mb, "ranks": n, "spmd_ray": float(np.median(per_rank.max(axis=0)))})
    return rows


def run_ray(ranks, sizes, repeats):
    """Rows of spmd-ray times on the cluster RAY_ADDRESS names; and how many nodes."""
    import ray

    from spmd.transports.ray.ray_placement import connect
    from spmd.transports.ray.ray_runtime import RayRuntime
    connect(max(ranks))
    rows = []
    for n in ranks:
        rt = RayRuntime(n)
        rows += ray_rows(rt, n, sizes, repeats)
        hosts = sorted({w["node"] for w in rt.where()})
        rt.shutdown()
    ray.shutdown()
    return rows, len(hosts)


def run_one_host(ranks, sizes, repeats, ray_repeats, rounds, with_ray):
    """MPI and Ray rows, the two measured in turn `rounds` times (the machine's load
    changes over minutes): each row's figure is the median of its rounds, ray_per_mpi
    the median of the rounds' Ray/MPI ratios."""
    got = {}
    rt = None
    if with_ray:
        import ray

        from spmd.transports.ray.ray_placement import connect
        from spmd.transports.ray.ray_runtime import RayRuntime
        connect(max(ranks))
    for n in ranks:
        if with_ray:
            rt = RayRuntime(n)
        for _ in range(rounds):
            for r in run_mpi(n, sizes, repeats) + (ray_rows(rt, n, sizes, ray_repeats) if with_ray else []):
                row = got.setdefault((r["op"], r["mb"], r["ranks"]), {})
                for k, v in r.items():
                    row.setdefault(k, []).append(v)
        if with_ray:
            rt.shutdown()
    if with_ray:
        ray.shutdown()
    out = {}
    for key, row in got.items():
        out[key] = {k: (float(np.median(v)) if isinstance(v[0], float) else v[0]) for k, v in row.items()}
        if with_ray:
            out[key]["ray_per_mpi"] = float(np.median(np.array(row["spmd_ray"]) / np.array(row["spmd_mpi"])))
    return out


# -- across two hosts of the test bed -------------------------------------------------------------
def run_testbed(ranks, sizes, repeats, ray_repeats, rate, with_ray):
    """The MPI and Ray rows with the ranks split over two hosts h1, h2."""
    from spmd.transports.mpi.mpi_launch import find_mpiexec
    from spmd.testing.cluster import Cluster, unavailable
    why = unavailable()
    if why:
        raise SystemExit(f"--testbed: {why}")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    rows = {}
    with Cluster(2, rate=rate) as bed:
        env = bed.env({"PYTHONPATH": root, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"})
        for k in ("SPMD_BACKEND", "RAY_ADDRESS"):
            env.pop(k, None)
        with tempfile.TemporaryDirectory(dir="/tmp") as d:
            for n in ranks:
                path = os.path.join(d, f"mpi{n}.json")
                cmd = [find_mpiexec(), "-hosts", f"h1:{n // 2},h2:{n - n // 2}", "-n", str(n), sys.executable,
                       __file__, "--mpi-rank", "--out", path, "--sizes", ",".join(map(str, sizes)),
                       "--repeats", str(repeats)]
                p = bed.run("h1", cmd, env=env, timeout=900)
                if p.returncode:
                    raise SystemExit(f"mpiexec across the hosts failed:\n{p.stdout}{p.stderr}")
                with open(path) as f:
                    for r in json.load(f):
                        rows[(r["op"], r["mb"], r["ranks"])] = r
            if not with_ray:
                return rows
            ray_cli = os.path.join(os.path.dirname(sys.executable), "ray")
            ip1, ip2 = bed.host("h1").ip, bed.host("h2").ip
            port = 6379
            cpus = str(max(ranks) // 2)
            common = ["--disable-usage-stats", "--num-cpus", cpus]
            # as `spmd run --hosts` starts it: the ranks at nice 0 (spmd/transports/ray/ray_hosts.py)
            p = bed.run("h1", [ray_cli, "start", "--head", "--include-dashboard=false", "--node-ip-address", ip1,
                               "--port", str(port), "--temp-dir", os.path.join(d, "ray1"),
                               '--system-config={"worker_niceness": 0}'] + common, env=env,
                        timeout=120)
            if p.returncode:
                raise SystemExit(f"ray start on h1 failed:\n{p.stdout}{p.stderr}")
            p = bed.run("h2", [ray_cli, "start", "--address", f"{ip1}:{port}", "--node-ip-address", ip2,
                               "--temp-dir", os.path.join(d, "ray2")] + common, env=env, timeout=120)
            if p.returncode:
                raise SystemExit(f"ray start on h2 failed:\n{p.stdout}{p.stderr}")
            path = os.path.join(d, "ray.json")
            p = bed.run("h1", [sys.executable, __file__, "--ray-driver", "--out", path, "--sizes",
                               ",".join(map(str, sizes)), "--ranks", ",".join(map(str, ranks)),
                               "--ray-repeats", str(ray_repeats)],
                        env=dict(env, RAY_ADDRESS=f"{ip1}:{port}", SPMD_RAY_STRATEGY="SPREAD"), timeout=900)
            if p.returncode:
                raise SystemExit(f"the Ray driver on h1 failed:\n{p.stdout}{p.stderr}")
            with open(path) as f:
                got = json.load(f)
            assert got["hosts"] == 2, got
            for r in got["rows"]:
                rows[(r["op"], r["mb"], r["ranks"])].update(r)
    return rows


# -- start-up ---------------------------------------------------------------------------------------
STARTUP = {
    "spmd": "import time, spmd\n"
            "t0 = time.perf_counter(); spmd.init(backend='ray', num_devices=4)\n"
            "print(time.perf_counter() - t0)",
    "ray": "import time, ray\n"
           "from spmd.transports.ray.ray_runtime import RankActor\n"
           "from spmd.transports.ray.ray_placement import place_ranks\n"
           "t0 = time.perf_counter(); ray.init(num_cpus=4, include_dashboard=False, _node_ip_address='127.0.0.2')\n"
           "pg, actors = place_ranks(RankActor, 4); ray.get([a.where.remote() for a in actors])\n"
           "print(time.perf_counter() - t0)",
}


def run_startup(k):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=root, RAY_USAGE_STATS_ENABLED="0")
    for v in ("RAY_ADDRESS", "SPMD_BACKEND"):
        env.pop(v, None)
    ts = {name: [] for name in STARTUP}
    for _ in range(k):
        for name, code in STARTUP.items():
            p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
            if p.returncode:
                raise SystemExit(f"start-up ({name}) failed:\n{p.stderr}")
            ts[name].append(float(p.stdout.split()[-1]))
    spmd_s, ray_s = float(np.median(ts["spmd"])), float(np.median(ts["ray"]))
    print(f"\nstart-up to 4 ranks ready, median of {k}: spmd.init(backend='ray') {spmd_s:.2f} s "
          f"(target < 5), ray.init() + 4 actors {ray_s:.2f} s, spmd/ray {spmd_s / ray_s:.2f}")


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1,8,64")
    ap.add_argument("--ranks", default="2,4")
    ap.add_argument("--repeats", type=int, default=int(os.environ.get("BENCH_REPEATS", "15")))
    ap.add_argument("--ray-repeats", type=int, default=int(os.environ.get("BENCH_REPEATS", "15")))
    ap.add_argument("--no-ray", action="store_true")
    ap.add_argument("--rounds", type=int, default=3, help="one host: MPI and Ray measured in turn this often")
    ap.add_argument("--testbed", action="store_true", help="across two hosts of spmd/testing/cluster.py")
    ap.add_argument("--rate", default="1gbit", help="--testbed: the link's rate, as tc writes it")
    ap.add_argument("--startup", type=int, default=0, metavar="K",
                    help="only time a private Ray's start-up, K times")
    ap.add_argument("--mpi-rank", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--ray-driver", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    ranks = [int(s) for s in args.ranks.split(",")]
    if args.mpi_rank:
        return mpi_rank(sizes, args.repeats, args.out)
    if args.ray_driver:
        rows, hosts = run_ray(ranks, sizes, args.ray_repeats)
        with open(args.out, "w") as f:
            json.dump({"rows": rows, "hosts": hosts}, f)
        return None
    if args.startup:
        return run_startup(args.startup)

    if args.testbed:
        rows = run_testbed(ranks, sizes, args.repeats, args.ray_repeats, args.rate, not args.no_ray)
        where = f"2 hosts joined by a {args.rate} link (spmd/testing/cluster.py), half the ranks on each"
    else:
        rows = run_one_host(ranks, sizes, args.repeats, args.ray_repeats, args.rounds, not args.no_ray)
        where = f"one host, medians of {args.rounds} rounds of MPI then Ray"
    print(f"\nmedian ms (float32, MB per rank), {where}; MPI: max({args.repeats}, 200/MB) runs, "
          f"Ray: max({args.ray_repeats}, 200/MB) runs, as many as MPI's by default")
    print(f"{'op':<15}{'MB':>4}{'ranks':>6}{'raw mpi4py':>12}{'spmd-mpi':>10}{'spmd/raw':>10}"
          f"{'spmd-ray':>10}{'ray/mpi':>9}")
    for n in ranks:
        for mb in sizes:
            for name in OPS:
                r = rows[(name, mb, n)]
                line = (f"{name:<15}{mb:>4}{n:>6}{r['raw_mpi4py'] * 1e3:>12.2f}{r['spmd_mpi'] * 1e3:>10.2f}"
                        f"{r['spmd_mpi'] / r['raw_mpi4py']:>10.2f}")
                if "spmd_ray" in r:
                    line += f"{r['spmd_ray'] * 1e3:>10.2f}{r.get('ray_per_mpi', r['spmd_ray'] / r['spmd_mpi']):>9.2f}"
                print(line)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
