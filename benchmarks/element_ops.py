"""The weights of the elementwise ops in the cost model (ir/ops/elementwise.py: each op's
element-ops an element, a float32 add being one) against what the LLVM backend's code
for each op measures on this machine, on one device.

The unit is calibrate's (Machine.element: a fused kernel of 9 layers of adds against one
of one layer); each op is timed as `op(x) * 0.5 + 1.0` against `x * 0.5 + 1.0` over an
array the cache holds (the difference is the op's own code: one op in a small kernel,
as a program's kernels hold them), float32 and float64, the runs of all interleaved,
the fast end of each sample (calibrate.fast). A table weight far from its measure
(`ratio`: table / measured) is a kernel the model misprices.

The cheap ops (an add, a divide, a square root), which hide under that kernel's memory
traffic, are timed with `--layers` as calibrate times the add: a kernel of 9 layers of
the op over four arrays the cache holds against one of 1 layer.

    PYTHONPATH=. python benchmarks/element_ops.py [--n 262144] [--runs 60] [--layers]
"""
import argparse
import time

import numpy as np

import spmd
from spmd.ir.aval import Aval
from spmd.ir.ops.registry import op_flops
from spmd.jit.calibrate import adds, element_op_seconds, fast, timed

OPS = {
    "add": lambda x: x + x, "multiply": lambda x: x * x, "divide": lambda x: 1.5 / x,
    "maximum": lambda x: np.maximum(x, 1.0), "sqrt": np.sqrt, "exp": np.exp, "log": np.log,
    "log1p": np.log1p, "tanh": np.tanh, "sin": np.sin, "cos": np.cos,
    "power x**3": lambda x: x ** 3, "power x**2.5": lambda x: x ** 2.5, "atan2": lambda x: np.arctan2(x, 0.5),
    "remainder": lambda x: np.fmod(x, 0.3),
}


def table_weight(fn, x) -> float:
    """The model's element-ops an element of `fn`'s op (the ops its program holds beyond
    the scale and shift around it), from the op table."""
    low = spmd.jit(lambda x: fn(x) * 0.5 + 1.0).lower(x)
    base = spmd.jit(lambda x: x * 0.5 + 1.0).lower(x)
    count = lambda g: sum(op_flops(op) for op in g.ops if op.opdef.fusion == "elementwise")  # noqa: E731
    return (count(low.graph) - count(base.graph)) / x.size


# the cheap ops of --layers: (a binary op, or a unary one after which one add combines
# the layer's operands: `less` element-ops of that add's dtype come off)
CHEAP = {"add": (lambda x, y: x + y, 0), "multiply": (lambda x, y: x * y, 0), "divide": (lambda x, y: x / y, 0),
         "divide by 3.7": (lambda x, y: x / 3.7, 0), "maximum": (np.maximum, 0),
         "sqrt": (lambda x, y: np.sqrt(x) + y, 1), "power x**3": (lambda x, y: x ** 3 + y, 1)}


def _layered(op, k):
    def f(a, b, c, d):
        for _ in range(k):
            a, b, c, d = op(a, b), op(b, c), op(c, d), op(d, a)
        return a + b + c + d
    return f


def layers(unit, runs):
    """The cheap ops' element-ops an element (a kernel of 9 layers against 1), beside the table's."""
    rng = np.random.default_rng(0)
    print(f"{'op':<14} {'dtype':<8} {'measured':>9} {'table':>7}")
    for dtype in (np.float32, np.float64):
        quad = [(rng.random(1 << 14) + 1.0).astype(dtype) for _ in range(4)]
        calls = [(spmd.jit(_layered(op, k)), quad) for op, _ in CHEAP.values() for k in (1, 9)]
        t = timed(calls, runs)
        wide = 1 if dtype == np.float32 else 2
        for i, (name, (op, less)) in enumerate(CHEAP.items()):
            got = (t[2 * i + 1] - t[2 * i]) / (32 * quad[0].size) / unit - less * wide
            want = table_weight(lambda x, op=op: op(x, x), quad[0]) - less * wide
            print(f"{name:<14} {np.dtype(dtype).name:<8} {got:>9.1f} {want:>7.0f}")


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1 << 18)
    ap.add_argument("--runs", type=int, default=60)
    ap.add_argument("--layers", action="store_true", help="the cheap ops, in kernels of layers of them")
    a = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    quad = [rng.standard_normal(1 << 15).astype(np.float32) for _ in range(4)]
    unit = element_op_seconds(lambda k: spmd.jit(adds(k)), quad, quad[0].size, 7)
    print(f"unit (a float32 add in a fused kernel): {unit * 1e12:.1f} ps")
    if a.layers:
        return layers(unit, 30)
    print(f"{'op':<14} {'dtype':<8} {'measured':>9} {'table':>7} {'ratio':>6}")
    for dtype in (np.float32, np.float64):
        x = (rng.random(a.n) + 0.5).astype(dtype)
        calls = {"base": spmd.jit(lambda x: x * 0.5 + 1.0)}
        calls.update({k: spmd.jit(lambda x, f=f: f(x) * 0.5 + 1.0) for k, f in OPS.items()})
        ts = {k: [] for k in calls}
        for f in calls.values():
            f(x)
        for _ in range(a.runs):
            for k, f in calls.items():
                t0 = time.perf_counter()
                f(x)
                ts[k].append(time.perf_counter() - t0)
        base = fast(ts["base"])
        for k, f in OPS.items():
            got = max(fast(ts[k]) - base, 0.0) / a.n / unit
            want = table_weight(f, x)
            print(f"{k:<14} {np.dtype(dtype).name:<8} {got:>9.1f} {want:>7.0f} {want / max(got, 1e-9):>6.2f}")


if __name__ == "__main__":
    main()
