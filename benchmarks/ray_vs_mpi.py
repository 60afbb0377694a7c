"""Per-step time of the Ray backend against MPI and local threads on one host (issue 35).

    python benchmarks/ray_vs_mpi.py [--ranks 2] [--n 2048] [--steps 20] [--rounds 3] [--settle 5] [--cluster]
    python benchmarks/ray_vs_mpi.py --interleave 12 [--ranks 2] [--n 2048] [--batch 256]

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

--interleave BLOCKS: the three backends stay up side by side (one process, or MPI job,
each), and take turns: short blocks of steps, one backend at a time while the others
wait in a read (no CPU), the order rotated each block. This 2-core machine runs at two
speeds, ~1.6x apart, each held for a second or two (plain MPI steps alone show it): a
fresh process per backend lands in either, and its ratio with them. Blocks a fraction of
a second apart see mostly the same speed, so their ratios say what the backends cost.

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


def worker(backend, ranks, n, steps, settle, batch):
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
    run = steps_of(ranks, n, batch)
    timed = {}
    for k in ("heat", "mlp"):
        for _ in range(3):
            run[k]()
        ts = []
        for _ in range(steps):
            t = time.perf_counter()
            run[k]()
            ts.append(time.perf_counter() - t)
        run["done"]()                                  # the last step really ran
        timed[k] = ts
    ts, tm = timed["heat"], timed["mlp"]
    if spmd.process_index() == 0:
        print("RESULT " + json.dumps({"heat": statistics.median(ts), "mlp": statistics.median(tm),
                                      "start": start}), flush=True)


def steps_of(ranks, n, batch=256):
    """{"heat": a step, "mlp": a step}: each takes nothing and runs one step of its
    program (the heat array stays sharded; the MLP's loss is read each step); "done":
    waits for the steps sent (the Ray runtime does not wait for a step that prints
    nothing)."""
    import numpy as np
    import spmd
    from heat2d import diffuse, initial
    from mlp import step as mlp_step
    from spmd.runtime.current_runtime import get_runtime
    mesh = spmd.Mesh((ranks, 1), ("x", "y"))
    block = mesh.sharding("x", "y")
    heat = spmd.jit(lambda u: diffuse(u, 1), in_shardings=block, out_shardings=block)
    state = {"u": spmd.device_put(initial(n), block)}
    mm = spmd.Mesh((ranks, 1), ("data", "model"))
    row = mm.sharding("data", None)
    rng = np.random.default_rng(0)
    state["params"] = {"w1": rng.standard_normal((64, 256)).astype(np.float32) / 8,
                       "w2": rng.standard_normal((256, 8)).astype(np.float32) / 16}
    x = rng.standard_normal((batch, 64)).astype(np.float32)
    y = np.tanh(x[:, :8])
    f = spmd.jit(mlp_step, in_shardings=({"w1": mm.sharding(None, "model"),
                                          "w2": mm.sharding("model", None)}, row, row))

    def heat_step():
        state["u"] = heat(state["u"])

    def mlp_step_():
        loss, state["params"] = f(state["params"], x, y)
        float(loss)
    return {"heat": heat_step, "mlp": mlp_step_, "done": getattr(get_runtime(), "wait", lambda: None)}


def serve(backend, ranks, n, settle, fifos, batch):
    """A backend's process in --interleave: up once, then a block of steps per command
    read from this rank's FIFO ("heat K", "mlp K", "quit"); rank 0 prints each block's
    median step."""
    sys.path.insert(0, ROOT)
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    import spmd
    spmd.init(backend=backend, num_devices=ranks)
    time.sleep(settle)
    run = steps_of(ranks, n, batch)
    for k in ("heat", "mlp"):
        for _ in range(3):
            run[k]()
    run["done"]()
    rank = spmd.process_index()
    if rank == 0:
        print("READY", flush=True)
    with open(fifos.format(rank=rank)) as commands:
        for line in commands:
            kind, count = line.split()
            if kind == "quit":
                break
            ts = []
            for _ in range(int(count)):
                t = time.perf_counter()
                run[kind]()
                ts.append(time.perf_counter() - t)
            run["done"]()
            if rank == 0:
                print(f"BLOCK {statistics.median(ts)}", flush=True)


def interleaved(ranks, n, blocks, settle, batch):
    """--interleave: {backend: {"heat": [block medians], "mlp": [...]}}, and the ratios
    of Ray's blocks to the MPI and local blocks of the same turn."""
    import tempfile
    backends = ("local", "mpi", "ray")
    with tempfile.TemporaryDirectory() as tmp:
        procs, fifos = {}, {}
        try:
            for b in backends:
                count = ranks if b == "mpi" else 1
                fifos[b] = [os.path.join(tmp, f"{b}.{r}") for r in range(count)]
                for path in fifos[b]:
                    os.mkfifo(path)
                cmd = [sys.executable, os.path.abspath(__file__), "--serve", b, "--ranks", str(ranks),
                       "--n", str(n), "--batch", str(batch), "--settle", str(settle),
                       "--fifos", os.path.join(tmp, b + ".{rank}")]
                if b == "mpi":
                    cmd = ["mpiexec", "-n", str(ranks)] + cmd
                env = dict(os.environ, PYTHONPATH=ROOT)
                env.pop("SPMD_BACKEND", None)
                env.pop("RAY_ADDRESS", None)
                procs[b] = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env)
                if procs[b].stdout.readline().strip() != "READY":
                    raise RuntimeError(f"{b} did not start (exit {procs[b].wait()})")
            writers = {b: [open(path, "w") for path in fifos[b]] for b in backends}
            got = {b: {"heat": [], "mlp": []} for b in backends}
            sizes = {"heat": 20, "mlp": 200}
            for i in range(blocks):
                order = backends[i % 3:] + backends[:i % 3]
                for kind in ("heat", "mlp"):
                    for b in order:
                        for w in writers[b]:
                            w.write(f"{kind} {sizes[kind]}\n")
                            w.flush()
                        line = procs[b].stdout.readline().split()
                        if not line or line[0] != "BLOCK":
                            raise RuntimeError(f"{b} stopped (exit {procs[b].wait()})")
                        got[b][kind].append(float(line[1]))
                print(f"block {i}: " + "  ".join(f"{b} heat {1e3 * got[b]['heat'][-1]:.2f} mlp "
                                                f"{1e3 * got[b]['mlp'][-1]:.3f} ms" for b in backends),
                      flush=True)
            for b in backends:
                for w in writers[b]:
                    w.write("quit 0\n")
                    w.close()
            for p in procs.values():
                p.wait(60)
        finally:
            for p in procs.values():
                if p.poll() is None:
                    p.kill()
    ratios = {f"{k} ray/{b}": [r / o for r, o in zip(got["ray"][k], got[b][k])]
              for k in ("heat", "mlp") for b in ("mpi", "local")}
    return got, ratios


def measure(backend, ranks, n, steps, settle, batch, join=None):
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", backend, "--ranks", str(ranks),
           "--n", str(n), "--batch", str(batch), "--steps", str(steps), "--settle", str(settle)]
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
    ap.add_argument("--batch", type=int, default=256, help="the MLP's batch rows (examples/mlp.py: 256)")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--settle", type=float, default=5.0, help="seconds between spmd.init and the timed steps")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cluster", action="store_true", help="also time spmd.init joining a running Ray")
    ap.add_argument("--interleave", type=int, default=0, metavar="BLOCKS",
                    help="the backends up side by side, taking turns in this many blocks of steps")
    ap.add_argument("--worker", default=None)
    ap.add_argument("--serve", default=None)
    ap.add_argument("--fifos", default=None)
    a = ap.parse_args()
    if a.worker:
        return worker(a.worker, a.ranks, a.n, a.steps, a.settle, a.batch)
    if a.serve:
        return serve(a.serve, a.ranks, a.n, a.settle, a.fifos, a.batch)
    if a.interleave:
        got, ratios = interleaved(a.ranks, a.n, a.interleave, a.settle, a.batch)
        for b, g in got.items():
            print(f"{b}: heat {spread([1e3 * t for t in g['heat']], ' ms')}, mlp {spread([1e3 * t for t in g['mlp']], ' ms', '.3f')}")
        for k, v in ratios.items():
            print(f"{k}: {spread(v)}")
        return
    ratios = {"heat ray/mpi": [], "mlp ray/mpi": [], "heat ray/local": [], "mlp ray/local": []}
    imports, inits, joins = [], [], []
    for r in range(a.rounds):
        # --steps 0: Ray's start alone (the other backends have nothing to compare)
        backends = ("local", "mpi", "ray") if a.steps else ("ray",)
        got = {b: measure(b, a.ranks, a.n, a.steps, a.settle, a.batch) for b in backends}
        imports.append(got["ray"]["start"]["import"])
        inits.append(got["ray"]["start"]["init"])
        for k in ("heat", "mlp") if a.steps else ():
            ratios[f"{k} ray/mpi"].append(got["ray"][k] / got["mpi"][k])
            ratios[f"{k} ray/local"].append(got["ray"][k] / got["local"][k])
        print(f"round {r}: " + "  ".join(f"{b} heat {1e3 * g['heat']:.1f} ms mlp {1e3 * g['mlp']:.2f} ms"
                                         for b, g in got.items() if a.steps)
              + f"  ray: import spmd {imports[-1]:.2f} s, spmd.init {inits[-1]:.2f} s"
              + f"  (load {os.getloadavg()[0]:.1f})", flush=True)
    if a.cluster:
        join, stop = head_node(a.ranks)
        try:
            for r in range(a.rounds):
                joins.append(measure("ray", a.ranks, a.n, 0, 0.0, a.batch, join)["start"]["init"])
                print(f"joining a running Ray, round {r}: spmd.init {joins[-1]:.2f} s  (load {os.getloadavg()[0]:.1f})",
                      flush=True)
        finally:
            stop()
    for k, v in ratios.items():
        if v:
            print(f"{k}: {spread(v)}")
    print(f"ray import spmd: {spread(imports, ' s')}")
    print(f"ray spmd.init, a private Ray started: {spread(inits, ' s')}")
    if joins:
        print(f"ray spmd.init, joining a running Ray: {spread(joins, ' s')}")


if __name__ == "__main__":
    main()
