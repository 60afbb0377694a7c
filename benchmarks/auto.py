"""spmd.AUTO against the hand-annotated plan and the simple baseline (every argument's
largest dimension on the largest mesh axis that divides it), side by side, on a 2x2 local
mesh: train_gpt (default, and d256 L4 T128), the MLP step of benchmarks/kernels.py, the
Jacobi stencil (by hand: 2-D blocks), CG.

Per plan: the measured step time (median of `--runs`, the plans' runs interleaved, in
one process on the same inputs), bytes per step (lowered.report()), the model's
prediction (lowered.cost(); `--rates fresh`, the default: with the rates measured in this
process, as `spmd doctor --calibrate` measures them, just before and just after each
program's timed runs, averaged: the machine is shared, and rates stored earlier were
taken under another load; `--rates
stored`: the stored ones, else defaults) and its ratio to the measured time, the
search's solve time; and whether the plan's results equal the hand plan's (or the first
plan's). Read the ratios, not the milliseconds.

    PYTHONPATH=. python benchmarks/auto.py [--quick] [--runs 5]
"""
import argparse
import importlib.util
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import spmd  # noqa: E402


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, path))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def baseline_shardings(mesh, args):
    """Every argument's largest dim on the largest mesh axis dividing it (else the largest)."""
    axes = sorted(mesh.axis_names, key=lambda a: (-mesh.axis_size(a), mesh.axis_names.index(a)))

    def one(x):
        shape = np.shape(x)
        spec = [None] * len(shape)
        if shape:
            d = max(range(len(shape)), key=lambda k: (shape[k], -k))
            fit = [a for a in axes if shape[d] % mesh.axis_size(a) == 0]
            if fit or shape[d] > 1:
                spec[d] = (fit or axes)[0]
        return mesh.sharding(*spec)
    return tuple(spmd.tree_map(one, a) for a in args)


def copy(args):
    return spmd.tree_map(lambda x: np.array(x, copy=True) if isinstance(x, np.ndarray) else x, args)


def gpt(mesh, d, layers, seq, batch=16):
    tg = _load("train_gpt_auto", "examples/train_gpt.py")
    params = tg.init_params(np.random.default_rng(0), d, layers, seq)
    opt = {"m": {k: np.zeros_like(v) for k, v in params.items()},
           "v": {k: np.zeros_like(v) for k, v in params.items()}, "t": np.float32(0.0)}
    tok = np.random.default_rng(1).integers(0, tg.VOCAB, (batch, seq + 1)).astype(np.int32)
    x, y = tok[:, :-1], tok[:, 1:]
    psh = tg.param_shardings(mesh, params)
    hand = (psh, {"m": psh, "v": psh, "t": mesh.sharding()}, mesh.sharding("data", None), mesh.sharding("data", None))
    return tg.make_step(layers, 4, 3e-3, mesh, False, False), (params, opt, x, y), hand


def mlp(mesh):
    K = _load("kernels_auto", "benchmarks/kernels.py")
    rng = np.random.default_rng(0)
    d, h, b = 256, 1024, 256
    p = {"w1": (rng.standard_normal((d, h)) * 0.05).astype(np.float32),
         "w2": (rng.standard_normal((h, d)) * 0.05).astype(np.float32)}
    x = rng.standard_normal((b, d)).astype(np.float32)
    y = rng.standard_normal((b, d)).astype(np.float32)
    hand = ({"w1": mesh.sharding(None, "model"), "w2": mesh.sharding("model", None)},
            mesh.sharding("data", None), mesh.sharding("data", None))
    return K.spmd_mlp_step, (p, x, y), hand


def jacobi(mesh, n=1024, steps=5):
    S = _load("stencil_programs_auto", "benchmarks/stencil_programs.py")
    u = np.random.default_rng(0).random((n, n))
    return (lambda u: S.jacobi(u, steps)), (u,), (mesh.sharding("data", "model"),)   # the hand plan: 2-D blocks


def cg(mesh, n=512, steps=5):
    S = _load("stencil_programs_cg_auto", "benchmarks/stencil_programs.py")
    blk = mesh.sharding("data", "model")
    return (lambda x, r, p, rs: S.cg(x, r, p, rs, steps)), S._cg_state(n), (blk, blk, blk, mesh.sharding())


def leaves(out):
    return [np.asarray(v.numpy() if hasattr(v, "numpy") else v) for v in spmd.tree_flatten(out)[0]]


def fresh_rates():
    """(Machine, Network) measured now (spmd.jit.calibrate.measure), the rates each of the
    4 local devices gets while all run."""
    from spmd.jit.calibrate import measure
    from spmd.sharding.cost_model import Link, Machine, Network
    m = measure(4)
    mc, w = m["machine"], m["network"]["within"]
    machine = Machine(flops=mc["flops_devices"], bandwidth=mc["bandwidth_devices"], step=mc["step_devices"],
                      argument=mc.get("argument"), written=mc.get("written"), call=mc.get("call_devices", 0.0),
                      cache_bytes=mc.get("cache_bytes", 0.0), cache_bandwidth=mc.get("cache_bandwidth_devices"))
    print(f"rates: {machine.flops / 1e9:.1f} GFLOP/s, {machine.bandwidth / 1e9:.2f} GB/s "
          f"({(machine.cache_bandwidth or 0) / 1e9:.2f} in the cache), a kernel {machine.call * 1e6:.1f} us, "
          f"a call {machine.step * 1e6:.0f} us, a round {w['latency'] * 1e6:.0f} us, {w['bandwidth'] / 1e9:.2f} GB/s")
    return machine, Network(within=Link(latency=w["latency"], bandwidth=w["bandwidth"]))


def averaged(a, b):
    """The mean of two (Machine, Network) measurements, field by field."""
    import dataclasses
    from spmd.sharding.cost_model import Link, Network

    def mean(x, y):
        return None if x is None or y is None else (x + y) / 2
    m = dataclasses.replace(a[0], **{f.name: mean(getattr(a[0], f.name), getattr(b[0], f.name))
                                     for f in dataclasses.fields(a[0])})
    la, lb = a[1].within, b[1].within
    return m, Network(within=Link(latency=mean(la.latency, lb.latency), bandwidth=mean(la.bandwidth, lb.bandwidth)))


def run_program(name, fn, args, hand, mesh, runs, rates=None):
    plans = {"hand": dict(in_shardings=hand), "auto": dict(mesh=mesh, in_shardings=spmd.AUTO),
             "baseline": dict(in_shardings=baseline_shardings(mesh, args))}
    if hand is None:
        del plans["hand"]
    rows, fns, outs, lows = {}, {}, {}, {}
    for plan, kw in plans.items():
        f = spmd.jit(fn, **kw)
        t0 = time.perf_counter()
        low = f.lower(*copy(args))
        lower_s = time.perf_counter() - t0
        low.compile()
        lows[plan] = low
        solve = low.auto.solve_seconds if low.auto is not None else None
        rows[plan] = {"bytes": low.report()["comm_bytes"], "solve": solve,
                      "lower": lower_s, "chosen": low.auto.chosen if low.auto is not None else ""}
        fns[plan] = f
        outs[plan] = leaves(f(*copy(args)))
    times = {p: [] for p in plans}
    inputs = {p: copy(args) for p in plans}
    before = rates() if rates is not None else None
    for _ in range(runs):                  # interleaved: the plans see the same load
        for p, f in fns.items():
            a = copy(inputs[p])
            t0 = time.perf_counter()
            f(*a)
            times[p].append(time.perf_counter() - t0)
    ref = outs.get("hand", outs["baseline"])
    got = averaged(before, rates()) if rates is not None else (None, None)
    for p in plans:
        rows[p]["predicted"] = lows[p].cost(machine=got[0], network=got[1])["seconds"]
        rows[p]["ms"] = 1e3 * float(np.median(times[p]))
        # train_gpt: the loss (Adam's first step is sign(g) where g is ~0, which the order of
        # a sum decides); the other programs: every result
        pick = slice(0, 1) if name.startswith("gpt") else slice(None)
        rows[p]["same"] = all(np.allclose(a, b, rtol=1e-4, atol=1e-5) for a, b in zip(outs[p][pick], ref[pick]))
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="skip train_gpt d256")
    ap.add_argument("--only", default=None)
    ap.add_argument("--rates", choices=("fresh", "stored"), default="fresh")
    a = ap.parse_args(argv)
    spmd.init(backend="local", num_devices=4)
    mesh = spmd.Mesh((2, 2), ("data", "model"))
    progs = [("gpt d64 L2 T64", lambda: gpt(mesh, 64, 2, 64)),
             ("gpt d256 L4 T128", lambda: gpt(mesh, 256, 4, 128)),
             ("mlp step", lambda: mlp(mesh)), ("jacobi 1024", lambda: jacobi(mesh)),
             ("cg 512", lambda: cg(mesh))]
    if a.quick:
        progs = [p for p in progs if "d256" not in p[0]]
    if a.only:
        progs = [p for p in progs if a.only in p[0]]
    hdr = f"{'program':<22} {'plan':<9} {'ms/step':>9} {'x hand':>7} {'bytes/step':>11} {'model ms':>9} {'/meas':>6} " \
          f"{'solve s':>8} {'lower s':>8} {'same':>5} chosen"
    print(hdr)
    for name, make in progs:
        rates = fresh_rates if a.rates == "fresh" else None
        fn, args, hand = make()
        hand_rows = run_program(name, fn, args, hand, mesh, a.runs, rates)
        ref = hand_rows.get("hand", hand_rows["baseline"])["ms"]
        for plan, r in hand_rows.items():
            solve = "" if r["solve"] is None else f"{r['solve']:.2f}"
            print(f"{name:<22} {plan:<9} {r['ms']:9.2f} {r['ms'] / ref:7.2f} {r['bytes']:11d} "
                  f"{r['predicted'] * 1e3:9.3f} {r['predicted'] * 1e3 / r['ms']:6.2f} {solve:>8} {r['lower']:8.2f} {str(r['same']):>5} {r['chosen']}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
