"""median / percentile / quantile along a split axis against numpy, same process, same
inputs, runs interleaved, medians.

    python benchmarks/quantiles.py [--rows 2000000] [--cols 8] [--runs 5]

A rows x cols float64 array split over its rows on a 2x2 local mesh (rows over both
axes, so each of the 4 devices holds a quarter): np.median(X, axis=0) and
np.nanpercentile(X, 90, axis=0), eager on the spmd.Array and jitted, against numpy on
the whole array. spmd selects the elements with a distributed selection (a few small
all_reduces and all_gathers: `lowered.report()`'s bytes are printed), never gathering X.
Prints milliseconds and the ratio spmd / numpy (target: at most 1.0 for the median).
"""
from __future__ import annotations

import argparse
import os
import sys
import warnings

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import spmd  # noqa: E402
from timing import interleaved  # noqa: E402  (benchmarks/timing.py)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--cols", type=int, default=8)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    warnings.simplefilter("error", spmd.ReshardWarning if hasattr(spmd, "ReshardWarning") else UserWarning)
    mesh = spmd.Mesh((2, 2), ("data", "model"))
    X = np.random.default_rng(0).standard_normal((args.rows, args.cols))
    A = spmd.device_put(X, mesh.sharding(("data", "model"), None))
    cases = {
        "median(X, axis=0)": lambda x: np.median(x, axis=0),
        "nanpercentile(X, 90, axis=0)": lambda x: np.nanpercentile(x, 90, axis=0),
    }
    print(f"X: float64[{args.rows}, {args.cols}] ({X.nbytes / 2**20:.0f} MB) split over rows on a 2x2 mesh; "
          f"medians of {args.runs} interleaved runs")
    worst = 0.0
    for name, f in cases.items():
        jf = spmd.jit(f)
        low = jf.lower(A)
        moved = low.report()["comm_bytes"]
        assert np.array_equal(jf(A).numpy(), f(X)), name
        assert np.array_equal(f(A).numpy(), f(X)), name
        t_np, t_eager, t_jit = interleaved([lambda: f(X), lambda: f(A).numpy(), lambda: jf(A).numpy()], args.runs)
        print(f"  {name:30s} numpy {t_np:8.1f} ms   spmd eager {t_eager:8.1f} ms ({t_eager / t_np:.2f}x)   "
              f"jit {t_jit:8.1f} ms ({t_jit / t_np:.2f}x)   {moved} bytes moved per device")
        if name.startswith("median"):
            worst = max(t_eager / t_np, t_jit / t_np)
    print(f"target: median at or below numpy's time: {'met' if worst <= 1.0 else 'NOT met'} ({worst:.2f}x)")


if __name__ == "__main__":
    main()
