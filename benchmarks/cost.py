"""Planning on paper: spmd.plan for train_gpt (default: d64 L2 T64, 4 heads) with
spmd.AUTO on meshes from 4 to 4096 devices this machine does not have, over a given
network (spmd.Network: `--per-host` ranks a host joined by `within` links, hosts by
`across` links). Nothing runs: each row is the plan's predicted step time (compute,
communication), bytes a step and per kind of collective, peak memory per device, and
the search's solve time against the number of ops it laid out. Then the solve time as
the model deepens (`--sweep-layers`, on the 8x8 mesh): it must grow at most linearly
with the ops (the s/kop column stays flat).

The batch grows with the data axis (`--per-replica` sequences per data-parallel
replica: weak scaling), so that every mesh has a batch to split; `--batch N` fixes it.

    PYTHONPATH=. python benchmarks/cost.py [--max-devices 4096] [--repeat 3]
"""
import argparse
import importlib.util
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import spmd  # noqa: E402
import warnings  # noqa: E402

# (data, model) per size: the model axis within a host (8 ranks at most), the rest data
MESHES = [(2, 2), (4, 4), (8, 8), (32, 8), (128, 8), (512, 8)]


def _train_gpt():
    spec = importlib.util.spec_from_file_location("train_gpt_cost", os.path.join(ROOT, "examples/train_gpt.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def gpt_args(tg, d, layers, seq, batch):
    """The step's arguments as spmd.ShapeDtype: nothing of the model's size is allocated."""
    S = spmd.ShapeDtype
    shapes = {k: S(v.shape, v.dtype) for k, v in tg.init_params(np.random.default_rng(0), d, layers, seq).items()}
    opt = {"m": dict(shapes), "v": dict(shapes), "t": S((), np.float32)}
    tok = S((batch, seq), np.int32)
    return shapes, opt, tok, tok


def plan_row(tg, shape, a, network):
    mesh = spmd.Mesh(shape, ("data", "model"))
    batch = a.batch or a.per_replica * shape[0]
    step = tg.make_step(a.layers, a.heads, 3e-3, mesh, False, False)
    args = gpt_args(tg, a.d_model, a.layers, a.seq, batch)
    solves = []
    for _ in range(a.repeat):                 # the solve time's median (the machine is shared)
        low = spmd.plan(step, *args, mesh=mesh, network=network)
        solves.append(low.auto.solve_seconds)
    c = low.cost(network=network)
    kinds = {}
    for r in c["collectives"]:
        kinds[r["op"]] = kinds.get(r["op"], 0) + r["bytes"] * (r["runs"] or 1)
    ops = sum(1 for _ in low.stages["scalar_reads"].ops) if "scalar_reads" in low.stages else -1
    return {"devices": mesh.size, "mesh": "x".join(map(str, shape)), "batch": batch, "c": c, "kinds": kinds,
            "solve": float(np.median(solves)), "solves": solves, "ops": ops, "chosen": low.auto.chosen,
            "nodes": low.auto.size["nodes"]}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--max-devices", type=int, default=4096)
    ap.add_argument("--repeat", type=int, default=3, help="solves per mesh (the median is printed)")
    ap.add_argument("--per-host", type=int, default=8, help="ranks a host")
    ap.add_argument("--within", default="5e-6,5e9", help="latency s, bandwidth B/s within a host")
    ap.add_argument("--across", default="20e-6,1.2e9", help="latency s, bandwidth B/s across hosts")
    ap.add_argument("--d-model", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--per-replica", type=int, default=8)
    ap.add_argument("--batch", type=int, default=0)
    ap.add_argument("--sweep-layers", default="1,2,4,8", help="layer counts for the solve-time sweep ('' to skip)")
    a = ap.parse_args(argv)
    warnings.simplefilter("ignore")       # (a plan's ReshardWarnings: explain() tells them; here the figures)
    w, x = ([float(v) for v in s.split(",")] for s in (a.within, a.across))
    network = spmd.Network(within=spmd.Link(latency=w[0], bandwidth=w[1]),
                           across=spmd.Link(latency=x[0], bandwidth=x[1]), ranks_per_host=a.per_host)
    tg = _train_gpt()
    print(f"train_gpt d{a.d_model} L{a.layers} T{a.seq}, spmd.AUTO; network: {a.per_host} ranks a host, "
          f"within {w[0] * 1e6:g} us {w[1] / 1e9:g} GB/s, across {x[0] * 1e6:g} us {x[1] / 1e9:g} GB/s")
    print(f"{'devices':>7} {'mesh':>7} {'batch':>6} {'step ms':>9} {'compute':>8} {'comm':>8} {'bytes/step':>11} "
          f"{'peak MiB':>9} {'solve s':>8} {'nodes':>6} {'s/kop':>6}  bytes per collective kind; plan")
    for shape in MESHES:
        if shape[0] * shape[1] > a.max_devices:
            break
        r = plan_row(tg, shape, a, network)
        c = r["c"]
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(r["kinds"].items()))
        per_kop = r["solve"] / r["ops"] * 1e3 if r["ops"] > 0 else float("nan")
        print(f"{r['devices']:>7} {r['mesh']:>7} {r['batch']:>6} {c['seconds'] * 1e3:9.3f} "
              f"{c['compute_seconds'] * 1e3:8.3f} {c['comm_seconds'] * 1e3:8.3f} {sum(r['kinds'].values()):11d} "
              f"{c['peak_bytes'] / 2**20:9.2f} {r['solve']:8.2f} {r['nodes']:>6} {per_kop:6.2f}  {kinds}; {r['chosen']}")
        sys.stdout.flush()
    if a.sweep_layers:
        print(f"\nsolve time against the ops, on 8x8: {'layers':>6} {'ops':>6} {'nodes':>6} {'solve s':>8} {'s/kop':>6}")
        for layers in (int(v) for v in a.sweep_layers.split(",")):
            r = plan_row(tg, (8, 8), argparse.Namespace(**{**vars(a), "layers": layers}), network)
            print(f"{'':>35} {layers:>6} {r['ops']:>6} {r['nodes']:>6} {r['solve']:8.2f} {r['solve'] / r['ops'] * 1e3:6.2f}")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
