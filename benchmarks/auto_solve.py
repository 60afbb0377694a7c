"""spmd.AUTO's solve time (issue 33: under 2 s for train_gpt default, under 10 s for d256
L4 T128, growing at most linearly with the number of ops): the search's wall seconds
and its thread's CPU seconds (AutoPlan.solve_seconds, solve_cpu_seconds: the figure a
machine shared with other work does not inflate) for each program of benchmarks/auto.py
on a 2x2 local mesh, then train_gpt d64 T64 at 1, 2, 4, 8 layers: the ops of the
global program searched against the seconds, and the seconds per thousand ops.

Each plan is made in a fresh process (nothing remembered from an earlier plan, as a
user's first jit), medians of `--runs`; planning only (lower), nothing runs. The FSDP
row plans under auto.py's memory_limit, which takes an unconstrained plan of the same
step first (in the same process: that plan's work is partly remembered). The rates are
the stored ones (spmd.AUTO's), else the defaults.

    PYTHONPATH=. python benchmarks/auto_solve.py [--runs 3] [--only NAME] [--layers 1,2,4,8]
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

PROGRAMS = ("gpt d64 L2 T64", "gpt d256 L4 T128", "gpt d64 L2 T64 fsdp", "mlp step", "jacobi 1024", "cg 512")


def plan_one(name):
    """Plan `name` (a PROGRAMS entry, or "gpt d64 L<n> T64") with spmd.AUTO here: -> its figures."""
    import spmd
    import auto
    spmd.init(backend="local", num_devices=4)
    mesh = spmd.Mesh((2, 2), ("data", "model"))
    parts = name.split()
    limit = None
    if parts[0] == "gpt":
        d, layers, seq = int(parts[1][1:]), int(parts[2][1:]), int(parts[3][1:])
        fn, args, _ = auto.gpt(mesh, d, layers, seq, fsdp=name.endswith("fsdp"))
        if name.endswith("fsdp"):
            fn = fn[0]
            limit = auto.fsdp_limit(fn, args, mesh)
    else:
        fn, args, _ = {"mlp": lambda: auto.mlp(mesh), "jacobi": lambda: auto.jacobi(mesh),
                       "cg": lambda: auto.cg(mesh)}[parts[0]]()
    kw = {} if limit is None else {"memory_limit": limit}
    low = spmd.jit(fn, mesh=mesh, in_shardings=spmd.AUTO, **kw).lower(*auto.copy(args))
    a = low.auto
    return {"wall": a.solve_seconds, "cpu": a.solve_cpu_seconds, "chosen": a.chosen, **a.size}


def measure(name, runs):
    """Median figures of `runs` fresh processes planning `name`."""
    got = []
    for _ in range(runs):
        out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", name], capture_output=True,
                             text=True, check=True, env={**os.environ, "PYTHONPATH": ROOT})
        got.append(json.loads(out.stdout.strip().splitlines()[-1]))
    med = dict(got[-1])
    for k in ("wall", "cpu"):
        med[k] = float(np.median([g[k] for g in got]))
        med[k + "s"] = [g[k] for g in got]
    return med


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--only", default=None, help="programs whose name holds this")
    ap.add_argument("--layers", default="1,2,4,8", help="train_gpt d64 T64 layer counts ('' for none)")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        print(json.dumps(plan_one(a.child)))
        return
    print(f"{'program':<22} {'ops':>6} {'nodes':>6} {'solve s':>8} {'cpu s':>7}  runs (cpu)   chosen")
    for name in PROGRAMS:
        if a.only and a.only not in name:
            continue
        m = measure(name, a.runs)
        print(f"{name:<22} {m['ops']:6d} {m['nodes']:6d} {m['wall']:8.2f} {m['cpu']:7.2f}  "
              f"{' '.join(f'{c:.2f}' for c in m['cpus']):<12} {m['chosen']}", flush=True)
    layers = [int(n) for n in a.layers.split(",") if n]
    if layers:
        print(f"\ntrain_gpt d64 T64 by layers\n{'layers':>6} {'ops':>6} {'nodes':>6} {'edges':>6} {'solve s':>8} "
              f"{'cpu s':>7} {'cpu s / 1000 ops':>17}")
        for n in layers:
            m = measure(f"gpt d64 L{n} T64", a.runs)
            print(f"{n:6d} {m['ops']:6d} {m['nodes']:6d} {m['edges']:6d} {m['wall']:8.2f} {m['cpu']:7.2f} "
                  f"{1e3 * m['cpu'] / m['ops']:17.3f}", flush=True)


if __name__ == "__main__":
    main()
