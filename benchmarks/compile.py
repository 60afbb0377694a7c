"""Compile time against program size: seconds per traced op to trace, lower (propagate,
partition, optimise) and compile (LLVM) programs users write in plain numpy, on a 2x2
mesh of local devices.

    python benchmarks/compile.py [--unroll 1,2,4,8,16] [--only fdtd,scatter,points,argsort]

Cases (issue 31): an FDTD-like 2-D step (Yee updates by slices) unrolled 1..16 times; a
per-sample Python loop of 100 scatter-adds into a buffer made with np.zeros (word2vec's
update); a per-point Python double loop writing one element at a time; a loop of 100
argsorts (k-NN, one per test point). Prints, per case: traced ops, seconds to trace, to
lower and to compile, and microseconds per op; for the unrolled step, how seconds per op
grow from 1 to the largest unroll (target: at most 1.5x) and whether every case stays
under 10 s. Each program's result is checked against numpy's. Each case runs in a fresh
process, so no case is helped by what an earlier one compiled (kernels and plans are cached
per process).
"""
import argparse
import json
import os
import subprocess
import sys
import time
import warnings

os.environ.setdefault("SPMD_CACHE", "0")              # compile, never load from the disk cache
os.environ.setdefault("SPMD_PROGRAM_CACHE", "0")

import numpy as np

import spmd

MESH = spmd.Mesh((2, 2), ("x", "y"))


def fdtd(steps):
    def step(ez, hx, hy):
        for _ in range(steps):
            hx[:, :-1] -= 0.5 * (ez[:, 1:] - ez[:, :-1])
            hy[:-1, :] += 0.5 * (ez[1:, :] - ez[:-1, :])
            ez[1:-1, 1:-1] += 0.5 * ((hy[1:-1, 1:-1] - hy[:-2, 1:-1]) - (hx[1:-1, 1:-1] - hx[1:-1, :-2]))
            ez[0, :] = 0.0
            ez[-1, :] = 0.0
        return ez, hx, hy
    n = 256
    rng = np.random.default_rng(0)
    args = tuple(rng.random((n, n)) for _ in range(3))
    return step, args, tuple(MESH.sharding("x", "y") for _ in args)


def scatter(samples=100):
    def step(emb, idx, grad):
        g = np.zeros(emb.shape)
        for i in range(samples):
            np.add.at(g, idx[i], grad[i])
        return emb - 0.1 * g
    rng = np.random.default_rng(0)
    args = (rng.random((512, 16)), rng.integers(0, 512, (samples, 5)), rng.random((samples, 5, 16)))
    return step, args, (MESH.sharding(None, None), MESH.sharding(None, None), MESH.sharding(None, None, None))


def points(n=24):
    def step(u):
        out = np.zeros_like(u)
        for i in range(1, n - 1):
            for j in range(1, n - 1):
                out[i, j] = 0.25 * (u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1])
        return out
    u = np.random.default_rng(0).random((n, n))
    return step, (u,), (MESH.sharding("x", "y"),)


def argsorts(queries=100):
    def step(train, test):
        out = np.zeros((test.shape[0], 3), dtype=np.int64)
        for q in range(test.shape[0]):
            d = ((train - test[q]) ** 2).sum(axis=1)
            out[q] = np.argsort(d)[:3]
        return out
    rng = np.random.default_rng(0)
    args = (rng.random((256, 4)), rng.random((queries, 4)))
    return step, args, (MESH.sharding("x", None), MESH.sharding(None, None))


def measure(name, make):
    fn, args, shardings = make()
    f = spmd.jit(fn, in_shardings=shardings, fallback=False)
    t0 = time.perf_counter()
    low = f.lower(*[a.copy() for a in args])
    t1 = time.perf_counter()
    low.compile()
    t2 = time.perf_counter()
    got = f(*[a.copy() for a in args])
    want = fn(*[a.copy() for a in args])
    for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
        np.testing.assert_allclose(np.asarray(g), w, rtol=1e-9, atol=1e-12)
    ops = len(low.stages["traced"].ops)
    trace = low.timings.get("trace", 0.0)
    lower = t1 - t0
    comp = t2 - t1
    print(json.dumps({"name": name, "ops": ops, "lower": lower, "compile": comp, "trace": trace}), flush=True)


CASES = {"scatter": scatter, "points": points, "argsort": argsorts}


def in_fresh_process(case):
    """(ops, seconds) of one case measured by a new interpreter, printed as it comes."""
    p = subprocess.run([sys.executable, os.path.abspath(__file__), "--case", case],
                       capture_output=True, text=True, timeout=900)
    if p.returncode:
        raise SystemExit(f"{case} failed:\n{p.stdout}{p.stderr}")
    r = json.loads(p.stdout.strip().splitlines()[-1])
    print(f"{r['name']:<14} {r['ops']:>7} ops  lower {r['lower']:7.2f} s  compile {r['compile']:7.2f} s  "
          f"{1e6 * (r['lower'] + r['compile']) / r['ops']:8.1f} us/op"
          f"{'  trace ' + format(r['trace'], '.2f') + ' s' if r['trace'] else ''}", flush=True)
    return r["ops"], r["lower"] + r["compile"]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--unroll", default="1,2,4,8,16")
    p.add_argument("--only", default="fdtd,scatter,points,argsort")
    p.add_argument("--case", help=argparse.SUPPRESS)     # one case, in this process
    a = p.parse_args()
    if a.case:
        warnings.simplefilter("ignore")
        name = a.case
        make = (lambda: fdtd(int(name.split("x")[1]))) if name.startswith("fdtd") else CASES[name]
        measure(name, make)
        return
    only = a.only.split(",")
    warnings.simplefilter("ignore")
    results = {}
    if "fdtd" in only:
        per = []
        for k in [int(s) for s in a.unroll.split(",")]:
            ops, secs = in_fresh_process(f"fdtd x{k}")
            per.append(secs / ops)
            results[f"fdtd x{k}"] = secs
        print(f"fdtd: seconds per op grow {per[-1] / per[0]:.2f}x from the first to the last unroll "
              f"(target <= 1.5x)")
    for name in CASES:
        if name in only:
            results[name] = in_fresh_process(name)[1]
    slow = {k: round(v, 1) for k, v in results.items() if v > 10}
    print("every case under 10 s" if not slow else f"over 10 s: {slow}")


if __name__ == "__main__":
    main()
