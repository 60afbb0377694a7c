"""The Parallel Research Kernels as the machine's limit: nstream, stencils (star and box,
radius 1-4), transpose, dgemm and sparse matrix-vector, written here in numpy the PRK's
way (benchmarks/prk/kernels.py), run as

  numpy       plain numpy, one process
  spmd1       spmd.jit of the same function, 1 device
  spmd x2     spmd.jit on 2 local devices (threads), rows split
  mpi4py N    written by hand with mpi4py (row blocks, Sendrecv halos, Alltoall)  } under
  spmd N      spmd.jit on a mesh of the N ranks                                    } mpiexec -n N
  C N         PRK-style C+MPI kernels (benchmarks/prk/c, built here with mpicc -O3 -march=native)

for N = 2 and 4 (C also at 1 rank). Each prints the PRK's rate (MB/s for nstream and
transpose, MFlops/s for the rest): the median over runs of a PRK timed loop (iterations
+ 1, the first untimed; the slowest rank's time). Every run is validated the PRK's way;
a rate that failed its validation is marked `!`. Ratios: spmd1 / numpy, spmd1 / C 1 rank,
spmd N / C N. The machine is shared and noisy: compare ratios within one run.

    python benchmarks/prk/run.py [--quick] [--runs 3] [--iters 10] [--kernels nstream,star2]
                                 [--ranks 2,4] [--no-mpi] [--json OUT] [--sizes dgemm=2000]
"""
import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cref  # noqa: E402
import suite  # noqa: E402
import variants  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def local_rows(kerns, sizes):
    import spmd
    spmd.init(num_devices=2)
    mesh2 = spmd.Mesh((2,), ("x",))
    rows = {}
    for kern in kerns:
        vs = [variants.Numpy(kern), variants.Spmd(kern), variants.Spmd(kern, mesh2)]
        res = variants.interleaved_runs(vs, sizes.iters, sizes.runs)
        rows[kern.name] = {"numpy": res[0], "spmd1": res[1], "spmd x2": res[2]}
    return rows


def mpi_env(ranks):
    """The worker's environment: this spmd first on the path; BLAS threads no more than a
    rank's share of the cores."""
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(HERE))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    threads = str(max(1, (os.cpu_count() or 1) // ranks))
    for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env.setdefault(v, threads)
    env.pop("SPMD_NUM_DEVICES", None)
    return env


def mpi_rows(mpiexec, ranks, kerns, sizes):
    with tempfile.NamedTemporaryFile(suffix=".json") as fh:
        cmd = [mpiexec, "-n", str(ranks), sys.executable, os.path.join(HERE, "worker.py"), fh.name,
               json.dumps(dataclasses.asdict(sizes)), *[k.name for k in kerns]]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, env=mpi_env(ranks))
        if p.returncode != 0:
            raise SystemExit(f"mpiexec -n {ranks} worker.py failed:\n{p.stdout[-3000:]}\n{p.stderr[-5000:]}")
        data = json.load(open(fh.name))
    return {name: {f"{v} {ranks}": r for v, r in row.items()} for name, row in data.items()}


def c_rows(mpiexec, ranks, kerns, sizes):
    out = {}
    for kern in kerns:
        rate, ok = cref.run(mpiexec, ranks, kern, sizes.iters, sizes.runs)
        out[kern.name] = {f"C {ranks}": (kern.work * 1e-6 / rate, ok)}
    return out


def table(kerns, rows, columns, ratios):
    def cell(name, col):
        r = rows[name].get(col)
        if r is None:
            return f"{'-':>9}"
        return f"{next(k for k in kerns if k.name == name).rate(r[0]):8.0f}{' ' if r[1] else '!'}"

    def ratio(name, a, b):
        """rate a / rate b (times b / a)"""
        ra, rb = rows[name].get(a), rows[name].get(b)
        return f"{rb[0] / ra[0]:6.2f}" if ra and rb else f"{'-':>6}"

    head = f"{'kernel':<10} {'unit':<8} " + " ".join(f"{c:>9}" for c in columns) + " " + " ".join(
        f"{f'{a}/{b}':>{max(6, len(a) + len(b) + 1)}}" for a, b in ratios)
    lines = [head]
    for k in kerns:
        lines.append(f"{k.name:<10} {k.unit:<8} " + " ".join(cell(k.name, c) for c in columns) + " " + " ".join(
            f"{ratio(k.name, a, b):>{max(6, len(a) + len(b) + 1)}}" for a, b in ratios))
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="tiny sizes, one run: a smoke test of every variant")
    ap.add_argument("--runs", type=int)
    ap.add_argument("--iters", type=int)
    ap.add_argument("--kernels", default="", help="comma-separated names (nstream, star1..4, box1..4, transpose, dgemm, sparse)")
    ap.add_argument("--ranks", default="2,4")
    ap.add_argument("--no-mpi", action="store_true")
    ap.add_argument("--json", help="write the rows (seconds an iteration, valid) here")
    ap.add_argument("--sizes", default="", help="size overrides, e.g. dgemm=2000,grid=1000 (fields of suite.Sizes)")
    a = ap.parse_args()
    sizes = suite.QUICK if a.quick else suite.Sizes()
    sizes = dataclasses.replace(sizes, **{k: v for k, v in (("runs", a.runs), ("iters", a.iters)) if v})
    sizes = dataclasses.replace(sizes, **{k: int(v) for k, v in (kv.split("=") for kv in a.sizes.split(",") if kv)})
    only = [s for s in a.kernels.split(",") if s]
    kerns = [k for k in suite.suite(sizes) if not only or k.name in only]
    ranks = [int(r) for r in a.ranks.split(",") if r]
    t0 = time.perf_counter()
    print(f"PRK kernels: nstream {sizes.nstream} doubles, stencils {sizes.grid}^2, transpose {sizes.order}^2, "
          f"dgemm {sizes.dgemm}, sparse 2^{sizes.lsize} grid squared (radius 2); {sizes.iters} iterations a run, "
          f"median of {sizes.runs} runs", flush=True)
    rows = local_rows(kerns, sizes)
    columns, ratios = ["numpy", "spmd1", "spmd x2"], [("spmd1", "numpy")]
    from spmd.transports.mpi.mpi_launch import find_mpiexec
    mpiexec = None if a.no_mpi else find_mpiexec()
    if mpiexec is not None and cref.mpicc() is not None:
        for n in [1] + ranks:
            for name, r in c_rows(mpiexec, n, kerns, sizes).items():
                rows[name].update(r)
        columns.append("C 1")
        ratios.append(("spmd1", "C 1"))
    if mpiexec is not None:
        for n in ranks:
            for name, r in mpi_rows(mpiexec, n, kerns, sizes).items():
                rows[name].update(r)
            columns += [f"mpi4py {n}", f"spmd {n}"] + ([f"C {n}"] if cref.mpicc() else [])
            ratios += [(f"spmd {n}", f"C {n}")] if cref.mpicc() else [(f"spmd {n}", f"mpi4py {n}")]
    print(table(kerns, rows, columns, ratios))
    bad = [(name, col) for name, row in rows.items() for col, (_, ok) in row.items() if not ok]
    print(f"validation: {'every run valid' if not bad else 'FAILED ' + ', '.join(f'{n} ({c})' for n, c in bad)}; "
          f"{time.perf_counter() - t0:.0f} s")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(rows, fh, indent=1)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
