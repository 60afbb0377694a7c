"""A large matmul sharded on both dimensions of a 2-d mesh (SUMMA-style layout).

A is split (rows over x, cols over y), B (rows over x, cols over y); spmd chooses the
collectives that make C = A @ B come out split (x, y). Prints them and GFLOP/s.

    python examples/matmul2d.py --mesh 2x2 --n 1024
"""
import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import spmd  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--mesh", default="2x2")
    ap.add_argument("--n", type=int, default=1024)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--backend", default=None)
    args = ap.parse_args(argv)
    mx, my = (int(v) for v in args.mesh.split("x"))
    spmd.init(backend=args.backend, num_devices=mx * my)
    mesh = spmd.Mesh((mx, my), ("x", "y"))
    s = mesh.sharding("x", "y")
    rng = np.random.default_rng(0)
    a = rng.standard_normal((args.n, args.n)).astype(np.float32)
    b = rng.standard_normal((args.n, args.n)).astype(np.float32)

    f = spmd.jit(lambda a, b: a @ b, in_shardings=(s, s), out_shardings=s)
    da, db = spmd.device_put(a, s), spmd.device_put(b, s)
    c = f(da, db)                    # compile + warm up
    times = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        c = f(da, db)
        np.asarray(c)
        times.append(time.perf_counter() - t0)
    got = np.asarray(c)
    want = a @ b
    err = float(np.max(np.abs(got - want)) / np.max(np.abs(want)))
    if spmd.process_index() == 0:
        rep = f.lower(da, db).report()
        for col in rep["collectives"]:
            print(f"  {col['op']:<18} axes={col['axes']} {col['in_shape']} -> {col['out_shape']} "
                  f"{col['bytes'] / 1e6:.2f} MB")
        t = float(np.median(times))
        print(f"matmul {args.n}x{args.n} on mesh {mx}x{my}: {2 * args.n ** 3 / t / 1e9:.2f} GFLOP/s "
              f"(median of {args.repeats}), max rel error {err:.1e}")
    return got, want


if __name__ == "__main__":
    main()
