"""A 2-D Jacobi stencil written as numpy users write it -- an in-place interior update
`u[1:-1, 1:-1] = ...` in a loop -- run under spmd.jit on a 2x2 mesh: the per-step
communication (halo rows and columns, from lowered.report()) against the array's size,
and the time per step against plain numpy on the same input.

    python benchmarks/stencil.py [--n 2048] [--steps 10] [--repeats 5] [--quick]
"""
import argparse
import time

import numpy as np

import spmd


def jacobi(u, steps):
    for _ in range(steps):
        u[1:-1, 1:-1] = 0.25 * (u[2:, 1:-1] + u[:-2, 1:-1] + u[1:-1, 2:] + u[1:-1, :-2])
    return u


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=2048, help="grid size (n x n float64)")
    ap.add_argument("--steps", type=int, default=10, help="stencil steps per jit call")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="a small grid, for a smoke run")
    a = ap.parse_args()
    n, steps = (256, 4) if a.quick else (a.n, a.steps)

    mesh = spmd.Mesh((2, 2), ("x", "y"))
    sh = mesh.sharding("x", "y")
    f = spmd.jit(jacobi, in_shardings=(sh,), static_argnums=(1,))
    u0 = np.random.default_rng(0).random((n, n))

    low = f.lower(u0, steps)
    rep = low.report()
    per_step = rep["comm_bytes"] / steps
    print(f"grid {n}x{n} float64 on a 2x2 mesh, {steps} steps per call")
    print(f"  array: {u0.nbytes / 1e6:.1f} MB, one shard: {u0.nbytes / 4e6:.1f} MB")
    print(f"  communication per step per device: {per_step / 1e3:.1f} KB in "
          f"{len(rep['collectives']) // steps} collectives "
          f"({', '.join(sorted({c['op'] for c in rep['collectives']}))})")
    halo = 4 * (n // 2) * 8
    print(f"  halo of one shard (4 edges): {halo / 1e3:.1f} KB -> ratio {per_step / halo:.2f}")

    u = spmd.device_put(u0.copy(), sh)
    f(u, steps)                                   # compile
    ref = jacobi(u0.copy(), steps)
    t_spmd, t_np = [], []
    for _ in range(a.repeats):
        x = u0.copy()
        t = time.perf_counter()
        jacobi(x, steps)
        t_np.append(time.perf_counter() - t)
        t = time.perf_counter()
        f(u, steps)
        t_spmd.append(time.perf_counter() - t)
    check = spmd.device_put(u0.copy(), sh)
    f(check, steps)
    err = np.abs(check.numpy() - ref).max()
    print(f"  max |spmd - numpy| after {steps} steps: {err:.2e}")
    print(f"  time per step: spmd {np.median(t_spmd) / steps * 1e3:.2f} ms, "
          f"numpy {np.median(t_np) / steps * 1e3:.2f} ms (medians of {a.repeats})")


if __name__ == "__main__":
    main()
