"""The stencil suite: numpy programs of stencils and iterative solvers (benchmarks/
stencil_programs.py: Jacobi, a 9-point smoother, a 3-D 7-point heat step, diffusion with
boundary conditions, the Game of Life, CG on a 2-D Poisson problem, and the cavity-flow
step with 50 pressure sweeps) run unchanged under spmd.jit, against plain numpy and
against the same stencil written by hand with mpi4py (benchmarks/stencil_mpi.py).

    python benchmarks/stencil.py [--n 2048] [--n3d 160] [--steps 10] [--repeats 5]
                                 [--only jacobi,cg] [--no-mpi] [--quick]

Prints, per program, milliseconds per step of: plain numpy; spmd on 1 device; spmd on a
1x2 and a 2x2 mesh of local devices (threads); spmd under `mpiexec -n 2` (1x2) and
`-n 4` (2x2) against the hand-written mpi4py program at the same rank count; then the
bytes a device receives per step, spmd's against the hand-written halo exchange's.
Targets (issue 21): 1 device <= 0.6x numpy; MPI <= 0.9x the hand-written program with
bytes equal to the halo; the cavity step on 2x2 local <= numpy, its compile time the same
for 50 and 500 sweeps (printed last). Every spmd result is checked against numpy's.
Timings are medians of interleaved runs; the machine is shared: compare ratios.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import stencil_programs as sp  # noqa: E402
from timing import interleaved  # noqa: E402

import spmd  # noqa: E402

MESHES = {"1x2": (1, 2), "2x2": (2, 2)}


def _shardings(mesh, arrays):
    return tuple(mesh.sharding("x", "y") if a.ndim >= 2 else mesh.sharding() for a in arrays)


def _same(got, want, exact):
    got = [np.asarray(g) for g in (got if isinstance(got, tuple) else (got,))]
    want = want if isinstance(want, tuple) else (want,)
    for g, w in zip(got, want):
        if exact:
            assert np.array_equal(g, w), f"max |spmd - numpy| = {np.abs(g - w).max()}"
        else:
            # sums in another order than numpy's pairwise one: error relative to the largest value
            np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-10 * max(1.0, float(np.abs(w).max())))


def local_row(prog, repeats):
    arrays = prog.inputs()
    steps = prog.steps
    row = {}
    work = [a.copy() for a in arrays]
    fns = [lambda: prog.fn(*work, steps)]
    names = ["numpy"]
    jitted = {}
    for name, shape in [("spmd1", None)] + list(MESHES.items()):
        if shape is None:
            f = spmd.jit(prog.fn, static_argnums=(len(arrays),))
            placed = [a.copy() for a in arrays]
        else:
            mesh = spmd.Mesh(shape, ("x", "y"))
            shs = _shardings(mesh, arrays)
            f = spmd.jit(prog.fn, in_shardings=shs, static_argnums=(len(arrays),))
            placed = [spmd.device_put(a.copy(), s) for a, s in zip(arrays, shs)]
            row[f"{name}_bytes"] = f.lower(*arrays, steps).report()["bytes_per_run"] / steps
        # the answer first: one call from the same state as numpy's
        check = [a.copy() if shape is None else spmd.device_put(a.copy(), s)
                 for a, s in zip(arrays, [None] * len(arrays) if shape is None else shs)]
        _same(f(*check, steps), prog.fn(*[a.copy() for a in arrays], steps), prog.exact)
        jitted[name] = f
        fns.append(lambda f=f, placed=placed: f(*placed, steps))
        names.append(name)
    for name, ms in zip(names, interleaved(fns, repeats)):
        row[f"{name}_ms"] = ms / steps
    return row


def mpi_rows(n, n3d, steps, repeats, only):
    from mpi4py import MPI  # noqa: F401  (the mpich wheel's mpiexec sits beside it)
    import shutil
    mpiexec = shutil.which("mpiexec") or os.path.join(os.path.dirname(sys.executable), "mpiexec")
    out = {}
    here = os.path.dirname(os.path.abspath(__file__))
    for ranks in (2, 4):
        with tempfile.NamedTemporaryFile(suffix=".json") as fh:
            cmd = [mpiexec, "-n", str(ranks), sys.executable, os.path.join(here, "stencil_mpi.py"), fh.name,
                   "--n", str(n), "--n3d", str(n3d), "--steps", str(steps), "--repeats", str(repeats),
                   "--only", ",".join(only)]
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
            if p.returncode != 0:
                print(p.stdout[-2000:], p.stderr[-4000:], file=sys.stderr)
                raise SystemExit(f"mpiexec -n {ranks} failed")
            out[ranks] = json.load(open(fh.name))
    return out


def cavity_compile_times():
    """The cavity step's lowering + compile time (a fresh jit each, no caches) for 50
    and 500 pressure sweeps; tracing (Python running the loop) is shown apart."""
    os.environ["SPMD_CACHE"] = "0"
    mesh = spmd.Mesh((2, 2), ("x", "y"))
    z = np.zeros((128, 128))
    shs = _shardings(mesh, (z, z, z))
    out = {}
    for nit in (50, 500):
        def step(u, v, p, steps):
            return sp.cavity(u, v, p, steps, nit=nit)
        f = spmd.jit(step, in_shardings=shs, static_argnums=(3,))
        t0 = time.perf_counter()
        low = f.lower(z, z.copy(), z.copy(), 1)
        t1 = time.perf_counter()
        low.compile()
        t2 = time.perf_counter()
        stages = sum(low.timings.values())
        out[nit] = (t1 - t0 - stages, stages + (t2 - t1), len(low.graph.ops))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=2048)
    ap.add_argument("--n3d", type=int, default=160)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--only", default="")
    ap.add_argument("--no-mpi", action="store_true")
    ap.add_argument("--quick", action="store_true", help="small grids, for a smoke run")
    a = ap.parse_args()
    n, n3d, steps = (128, 24, 3) if a.quick else (a.n, a.n3d, a.steps)
    only = [s for s in a.only.split(",") if s]
    progs = [p for p in sp.suite(n, n3d, steps) if not only or p.name in only]
    spmd.init(num_devices=4)
    print(f"stencil suite: 2-D {n}x{n}, 3-D {n3d}^3, cavity 128x128, float64 (life int64); {steps} steps a call; "
          f"ms per step, medians of {a.repeats}")
    rows = {p.name: local_row(p, a.repeats) for p in progs}
    mpi = {} if a.no_mpi else mpi_rows(n, n3d, steps, a.repeats, [p.name for p in progs])
    hdr = (f"{'program':<11} {'numpy':>8} {'spmd1':>8} {'x np':>6} {'1x2':>8} {'2x2':>8} "
           f"{'mpi2':>8} {'hand2':>8} {'x hand':>6} {'mpi4':>8} {'hand4':>8} {'x hand':>6}")
    print(hdr)
    for p in progs:
        r = rows[p.name]
        cells = [f"{p.name:<11}", f"{r['numpy_ms']:8.2f}", f"{r['spmd1_ms']:8.2f}", f"{r['spmd1_ms'] / r['numpy_ms']:6.2f}",
                 f"{r['1x2_ms']:8.2f}", f"{r['2x2_ms']:8.2f}"]
        for ranks in (2, 4):
            m = mpi.get(ranks, {}).get(p.name)
            if m is None or "hand_ms" not in m:
                cells += [f"{m['spmd_ms']:8.2f}" if m else f"{'-':>8}", f"{'-':>8}", f"{'-':>6}"]
            else:
                cells += [f"{m['spmd_ms']:8.2f}", f"{m['hand_ms']:8.2f}", f"{m['spmd_ms'] / m['hand_ms']:6.2f}"]
        print(" ".join(cells))
    print("\nbytes per step on 2x2 (each message once): spmd local, spmd mpi-4, the halo of a shard "
          "(its four edges, with corners where the stencil reads diagonals, for every array exchanged, and\n"
          "again each sweep of an inner loop)")
    for p in progs:
        r, m = rows[p.name], mpi.get(4, {}).get(p.name, {})
        arrays = p.inputs()
        halo = p.step_halo_bytes(arrays, (2, 2))
        print(f"  {p.name:<11} {r['2x2_bytes']:>10.0f} {m.get('spmd_bytes', float('nan')):>10.0f} {halo:>10.0f}"
              f"  spmd/halo {r['2x2_bytes'] / halo:.2f}")
    if not only or "cavity" in only:
        print("\ncavity step (2x2): tracing s, lowering + compile s, ops in the per-device program")
        for nit, (tr, comp, ops) in cavity_compile_times().items():
            print(f"  {nit:>4} sweeps: tracing {tr:.2f} s, lowering + compile {comp:.2f} s, {ops} ops")


if __name__ == "__main__":
    main()
