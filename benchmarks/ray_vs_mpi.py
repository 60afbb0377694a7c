"""Per-step time of the Ray backend against MPI and local threads on one host (issue 35).

    python benchmarks/ray_vs_mpi.py [--ranks 2] [--n 2048] [--steps 20] [--rounds 3] [--settle 5] [--cluster]

Each round runs the same two steps in three fresh processes, one per backend (local
threads, `mpiexec -n RANKS`, Ray with RANKS actors): a heat2d step (examples/heat2d.py,
N^2, one step a call, the array staying sharded) and a step of examples/mlp.py (params
in, params and loss out, the batch given as numpy each step, the loss read each step).
Each process prints its medians per step; this prints, per round, Ray/MPI and
Ray/local ratios, and the median and spread of the ratios over the rounds (the
machine is shared: the spread, and the load average printed with each round, say how
noisy). Also the start on Ray: `import spmd`, then spmd.init(backend="ray") (importing
ray, starting a private Ray, its rank actors up) until it returns; and, with --cluster,
spmd.init joining a Ray already running on this host (`ray start --head`, RAY_ADDRESS
set: every rank an actor, nothing started but them), another case: its medians are
printed apart.

The steps are timed SETTLE seconds after spmd.init returns, for every backend alike: a
step's cost, not the start's. Right after a private Ray's start its runtime-env agent
imports ray and Ray's own processes settle, and a heat step taken then costs ~1.3x one
taken 4 s later (--settle 0 shows it).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def worker(backend, ranks, n, steps, settle):
    import numpy as np
    sys.path.insert(0, ROOT)
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    t0 = time.perf_counter()
    import spmd
    t1 = time.perf_counter()
    spmd.init(backend=backend, num_devices=ranks)
    start = {"import": t1 - t0, "init": time.perf_counter() - t1}
    if steps == 0:
        print("RESULT " + json.dumps({"start": start}), flush=True)
        return
    time.sleep(settle)
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


def measure(backend, ranks, n, steps, settle, join=None):
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", backend, "--ranks", str(ranks),
           "--n", str(n), "--steps", str(steps), "--settle", str(settle)]
    if backend == "mpi":
        cmd = ["mpiexec", "-n", str(ranks)] + cmd
    env = dict(os.environ, PYTHONPATH=ROOT)
    env.pop("SPMD_BACKEND", None)
    env.pop("RAY_ADDRESS", None)
    env.update(join or {})
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise RuntimeError(f"{backend} failed:\n{p.stdout[-2000:]}\n{p.stderr[-4000:]}")


def head_node(ranks):
    """`ray start --head --block` on loopback with room for the ranks, with a token of its
    own, in a session of its own: (the environment that joins it, a function that stops
    it: its own processes, by their process group, not every Ray on the machine as
    `ray stop` would)."""
    import secrets
    import signal
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.2", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(32))
    head = subprocess.Popen(["ray", "start", "--head", "--block", f"--port={port}", f"--num-cpus={ranks}",
                             "--node-ip-address=127.0.0.2", "--include-dashboard=false", "--disable-usage-stats"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            start_new_session=True)
    for line in head.stdout:             # ray start says so once its node is up
        if "Ray runtime started" in line:
            break
    else:
        raise RuntimeError(f"ray start --head did not start (exit {head.wait()})")

    def stop():
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(head.pid, sig)
                head.wait(30)
                return
            except subprocess.TimeoutExpired:
                continue
            except ProcessLookupError:
                return
    join = {k: env[k] for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN")}
    join["RAY_ADDRESS"] = f"127.0.0.2:{port}"
    return join, stop


def spread(v, unit="", fmt=".2f"):
    return f"median {statistics.median(v):{fmt}}{unit} (rounds {min(v):{fmt}}..{max(v):{fmt}}{unit})"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--n", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--settle", type=float, default=5.0, help="seconds between spmd.init and the timed steps")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cluster", action="store_true", help="also time spmd.init joining a running Ray")
    ap.add_argument("--worker", default=None)
    a = ap.parse_args()
    if a.worker:
        return worker(a.worker, a.ranks, a.n, a.steps, a.settle)
    ratios = {"heat ray/mpi": [], "mlp ray/mpi": [], "heat ray/local": [], "mlp ray/local": []}
    imports, inits, joins = [], [], []
    for r in range(a.rounds):
        got = {b: measure(b, a.ranks, a.n, a.steps, a.settle) for b in ("local", "mpi", "ray")}
        imports.append(got["ray"]["start"]["import"])
        inits.append(got["ray"]["start"]["init"])
        for k in ("heat", "mlp"):
            ratios[f"{k} ray/mpi"].append(got["ray"][k] / got["mpi"][k])
            ratios[f"{k} ray/local"].append(got["ray"][k] / got["local"][k])
        print(f"round {r}: " + "  ".join(f"{b} heat {1e3 * g['heat']:.1f} ms mlp {1e3 * g['mlp']:.2f} ms"
                                         for b, g in got.items())
              + f"  ray: import spmd {imports[-1]:.2f} s, spmd.init {inits[-1]:.2f} s"
              + f"  (load {os.getloadavg()[0]:.1f})", flush=True)
    if a.cluster:
        join, stop = head_node(a.ranks)
        try:
            for r in range(a.rounds):
                joins.append(measure("ray", a.ranks, a.n, 0, 0.0, join)["start"]["init"])
                print(f"joining a running Ray, round {r}: spmd.init {joins[-1]:.2f} s  (load {os.getloadavg()[0]:.1f})",
                      flush=True)
        finally:
            stop()
    for k, v in ratios.items():
        print(f"{k}: {spread(v)}")
    print(f"ray import spmd: {spread(imports, ' s')}")
    print(f"ray spmd.init, a private Ray started: {spread(inits, ' s')}")
    if joins:
        print(f"ray spmd.init, joining a running Ray: {spread(joins, ' s')}")


if __name__ == "__main__":
    main()
