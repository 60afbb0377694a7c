"""How much of the gradient all-reduce hides behind the backward pass across hosts.

    python benchmarks/overlap_hosts.py [--steps 8] [--runs 3] [--rate 1gbit] [--modes thread,off,async]

train_gpt's step at d256, 4 layers, batch 16, seq 128 (benchmarks/models.py's gpt256),
data parallel over 4 MPI ranks (a 4x1 mesh), on a test bed of hosts
(spmd/testing/cluster.py): 2 hosts x 2 ranks joined by a --rate link, and the same
step with all 4 ranks on one host (no link). Each run also times the step's gradient
all-reduces alone (the same buckets, one after another, blocking) over the same ranks.

    hidden = 1 - (step on 2 hosts - fastest step on 1 host) / all-reduces alone on 2 hosts

Modes, how started all-reduces move on while the backward pass computes (SPMD_MPI_PROGRESS,
transports/mpi/mpi_progress.py): `poll` between the program's steps (the default), `thread`
also from a thread of spmd's own, `off` only inside MPI calls, `async` off plus MPICH's
own progress thread (MPIR_CVAR_ASYNC_PROGRESS=1).
Figures are medians of --runs runs, each the median of --steps steps after a warm-up
(every rank times its steps after a barrier; the slowest rank counts). The machine is
shared: `uptime`'s load is printed with them.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MODES = {"poll": {"SPMD_MPI_PROGRESS": "poll"}, "thread": {"SPMD_MPI_PROGRESS": "thread"},
         "off": {"SPMD_MPI_PROGRESS": "off"},
         "async": {"SPMD_MPI_PROGRESS": "off", "MPIR_CVAR_ASYNC_PROGRESS": "1"}}
# the fraction hidden counts against the fastest one-host step of any mode measured: a mode
# that slows the computation itself (a thread taking the GIL) must not look better for it


def child(steps, out):
    """One run, as a rank of `spmd run -n 4`: the step's and the all-reduces' times."""
    import numpy as np
    sys.path.insert(0, ROOT)
    sys.path.insert(0, HERE)
    import spmd
    from spmd.transports.mpi.mpi_communicator import MPICommunicator
    from models import GPT

    rt = spmd.init(backend="mpi")
    model = GPT(256, 4, 16, 128)
    mesh = spmd.Mesh((4, 1), ("data", "model"))
    args = model.inputs()
    f = spmd.jit(model.spmd_step(mesh), in_shardings=model.specs(mesh, args))
    low = f.lower(*args)
    reduces = [c for c in low.report()["launched"] if c["op"] in ("all_reduce", "all_reduce_start")]
    comm = MPICommunicator(mesh)

    def timed(fn):
        times = []
        for _ in range(steps + 1):
            rt.barrier()
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return statistics.median(times[1:])

    state = {"args": args}

    def step():
        loss, p, o = f(*state["args"])
        float(np.asarray(loss))
        state["args"] = (p, o) + state["args"][2:]

    bufs = [np.ones(max(1, c["bytes"] // np.dtype(c["dtype"]).itemsize), c["dtype"]) for c in reduces]

    def all_reduces():
        for b in bufs:
            comm.all_reduce(b, "data")

    got = {"step": timed(step), "all_reduce": timed(all_reduces),
           "bytes": sum(c["bytes"] for c in reduces), "count": len(reduces)}
    worst = rt.allgather_object(got)
    if spmd.process_index() == 0:
        with open(out, "w") as fh:
            json.dump({k: max(w[k] for w in worst) for k in ("step", "all_reduce")} |
                      {"bytes": got["bytes"], "count": got["count"]}, fh)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--rate", default="1gbit")
    ap.add_argument("--modes", default="poll,thread,off")
    ap.add_argument("--bucket-mb", type=float, default=None,
                    help="SPMD_BUCKET_BYTES in MB (the gradient buckets; default: the compiler's)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        return child(a.steps, a.child)
    from spmd.testing.cluster import Cluster, unavailable
    why = unavailable()
    if why:
        raise SystemExit(f"overlap_hosts: {why}")
    modes = a.modes.split(",")
    got = {(m, w): [] for m in modes for w in ("1 host", "2 hosts")}
    with Cluster(2, rate=a.rate) as bed, tempfile.TemporaryDirectory() as d:
        for run in range(a.runs):
            for m in modes:                      # interleaved: each sees the same drift of the load
                for where, hosts in (("1 host", "h1:4"), ("2 hosts", "h1:2,h2:2")):
                    out = os.path.join(d, "out.json")
                    env = bed.env({"PYTHONPATH": ROOT, **MODES[m]})
                    if a.bucket_mb is not None:
                        env["SPMD_BUCKET_BYTES"] = str(int(a.bucket_mb * (1 << 20)))
                    for k in ("SPMD_BACKEND", "SPMD_NUM_DEVICES", "RAY_ADDRESS"):
                        env.pop(k, None)
                    p = bed.run("h1", ["spmd", "run", "-n", "4", "--hosts", hosts, __file__, "--steps",
                                       str(a.steps), "--child", out], env=env, timeout=1200)
                    if p.returncode:
                        raise SystemExit(f"{m} on {where} failed (exit {p.returncode}):\n{p.stdout[-3000:]}{p.stderr[-3000:]}")
                    with open(out) as fh:
                        got[(m, where)].append(json.load(fh))
    load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    first = got[(modes[0], "2 hosts")][0]
    print(f"train_gpt d256 4 layers B16 T128, data parallel, 4 MPI ranks; {first['count']} gradient all-reduces, "
          f"{first['bytes'] / 1e6:.1f} MB a rank a step (SPMD_BUCKET_BYTES={os.environ.get('SPMD_BUCKET_BYTES', '-') if a.bucket_mb is None else int(a.bucket_mb * (1 << 20))}); {a.rate} link; medians of {a.runs} runs x {a.steps} steps")
    print(f"load: {load}")
    best = min(statistics.median(r["step"] for r in got[(m, "1 host")]) for m in modes)
    print(f"hidden = 1 - (step on 2 hosts - fastest step on 1 host, {best * 1e3:.0f} ms) / all-reduces alone")
    print(f"{'mode':8} {'step 1 host':>12} {'step 2 hosts':>13} {'all-reduce alone':>17} {'hidden':>7}")
    for m in modes:
        one = statistics.median(r["step"] for r in got[(m, "1 host")])
        two = statistics.median(r["step"] for r in got[(m, "2 hosts")])
        ar = statistics.median(r["all_reduce"] for r in got[(m, "2 hosts")])
        print(f"{m:8} {one * 1e3:10.0f}ms {two * 1e3:11.0f}ms {ar * 1e3:15.0f}ms {1 - (two - best) / ar:7.0%}")


if __name__ == "__main__":
    main()
