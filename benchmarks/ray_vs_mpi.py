"""Per-step time of the Ray backend against MPI and local threads on one host (issue 35).

    python benchmarks/ray_vs_mpi.py [--ranks 2] [--n 2048] [--steps 20] [--rounds 3]

Each round runs the same two steps in three fresh processes, one per backend (local
threads, `mpiexec -n RANKS`, Ray with RANKS actors): a heat2d step (examples/heat2d.py,
N^2, one step a call, the array staying sharded) and a step of examples/mlp.py (params
in, params and loss out, the batch given as numpy each step, the loss read each step).
Each process prints its medians per step; this prints, per round, Ray/MPI and
Ray/local ratios, and the median and spread of the ratios over the rounds (the
machine is shared: the spread, and the load average printed with each round, say how
noisy). Also the time of spmd.init on Ray.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def worker(backend, ranks, n, steps):
    import numpy as np
    sys.path.insert(0, ROOT)
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    t0 = time.perf_counter()
    import spmd
    spmd.init(backend=backend, num_devices=ranks)
    start = time.perf_counter() - t0
    from heat2d import diffuse, initial
    from mlp import step as mlp_step
    mesh = spmd.Mesh((ranks, 1), ("x", "y"))
    block = mesh.sharding("x", "y")
    heat = spmd.jit(lambda u: diffuse(u, 1), in_shardings=block, out_shardings=block)
    u = spmd.device_put(initial(n), block)
    for _ in range(3):
        u = heat(u)
    ts = []
    for _ in range(steps):
        t = time.perf_counter()
        u = heat(u)
        ts.append(time.perf_counter() - t)
    u.numpy()                                     # the last step really ran

    mm = spmd.Mesh((ranks, 1), ("data", "model"))
    row = mm.sharding("data", None)
    rng = np.random.default_rng(0)
    params = {"w1": rng.standard_normal((64, 256)).astype(np.float32) / 8,
              "w2": rng.standard_normal((256, 8)).astype(np.float32) / 16}
    x = rng.standard_normal((256, 64)).astype(np.float32)
    y = np.tanh(x[:, :8])
    f = spmd.jit(mlp_step, in_shardings=({"w1": mm.sharding(None, "model"),
                                          "w2": mm.sharding("model", None)}, row, row))
    for _ in range(3):
        loss, params = f(params, x, y)
        float(loss)
    tm = []
    for _ in range(steps):
        t = time.perf_counter()
        loss, params = f(params, x, y)
        float(loss)
        tm.append(time.perf_counter() - t)
    if spmd.process_index() == 0:
        print("RESULT " + json.dumps({"heat": statistics.median(ts), "mlp": statistics.median(tm),
                                      "start": start}), flush=True)


def measure(backend, ranks, n, steps):
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", backend, "--ranks", str(ranks),
           "--n", str(n), "--steps", str(steps)]
    if backend == "mpi":
        cmd = ["mpiexec", "-n", str(ranks)] + cmd
    env = dict(os.environ, PYTHONPATH=ROOT)
    env.pop("SPMD_BACKEND", None)
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise RuntimeError(f"{backend} failed:\n{p.stdout[-2000:]}\n{p.stderr[-4000:]}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--n", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--worker", default=None)
    a = ap.parse_args()
    if a.worker:
        return worker(a.worker, a.ranks, a.n, a.steps)
    ratios = {"heat ray/mpi": [], "mlp ray/mpi": [], "heat ray/local": [], "mlp ray/local": []}
    starts = []
    for r in range(a.rounds):
        got = {b: measure(b, a.ranks, a.n, a.steps) for b in ("local", "mpi", "ray")}
        starts.append(got["ray"]["start"])
        for k in ("heat", "mlp"):
            ratios[f"{k} ray/mpi"].append(got["ray"][k] / got["mpi"][k])
            ratios[f"{k} ray/local"].append(got["ray"][k] / got["local"][k])
        print(f"round {r}: " + "  ".join(f"{b} heat {1e3 * g['heat']:.1f} ms mlp {1e3 * g['mlp']:.2f} ms"
                                         for b, g in got.items()) + f"  ray start {got['ray']['start']:.2f} s"
              + f"  (load {os.getloadavg()[0]:.1f})", flush=True)
    for k, v in ratios.items():
        print(f"{k}: median {statistics.median(v):.2f} (rounds {min(v):.2f}..{max(v):.2f})")
    print(f"ray spmd.init: median {statistics.median(starts):.2f} s (rounds {min(starts):.2f}..{max(starts):.2f})")


if __name__ == "__main__":
    main()
