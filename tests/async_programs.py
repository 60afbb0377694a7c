"""Training steps whose gradient all-reduces the optimiser buckets and overlaps with the
backward pass (passes/combine.py, passes/schedule_async.py): a 2-layer MLP and the GPT
example's step at a small size, on a (data, model) mesh. Shared by
tests/test_async_collectives.py and the MPI script tests/mpi_scripts/async_step.py.

Each case is (step function, arguments, in_shardings)."""
import os
import sys

import numpy as np

import spmd

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def mlp_case(mesh, seed=0, batch=8, din=16, dh=32, dout=4):
    rng = np.random.default_rng(seed)
    p = {"w1": rng.standard_normal((din, dh)).astype(np.float32) / 4,
         "b1": rng.standard_normal((dh,)).astype(np.float32) / 4,
         "w2": rng.standard_normal((dh, dout)).astype(np.float32) / 4,
         "b2": rng.standard_normal((dout,)).astype(np.float32) / 4}
    x = rng.standard_normal((batch, din)).astype(np.float32)
    y = rng.standard_normal((batch, dout)).astype(np.float32)

    def step(params, x, y):
        def loss(p):
            h = np.maximum(x @ p["w1"] + p["b1"], 0)
            return np.mean((h @ p["w2"] + p["b2"] - y) ** 2)
        l, g = spmd.value_and_grad(loss)(params)
        return l, {k: params[k] - 0.1 * g[k] for k in params}

    row = mesh.sharding("data", None)
    sh = ({"w1": mesh.sharding(None, "model"), "b1": mesh.sharding("model"),
           "w2": mesh.sharding("model", None), "b2": mesh.sharding(None)}, row, row)
    return step, (p, x, y), sh


def _train_gpt():
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    try:
        import train_gpt
    finally:
        sys.path.pop(0)
    return train_gpt


def gpt_case(mesh, seed=0, d=32, layers=2, batch=8, seq=16, heads=4):
    tg = _train_gpt()
    rng = np.random.default_rng(seed)
    p = tg.init_params(rng, d, layers, seq)
    opt = {"m": {k: np.zeros_like(v) for k, v in p.items()},
           "v": {k: np.zeros_like(v) for k, v in p.items()}, "t": np.float32(0.0)}
    x = rng.integers(0, 256, (batch, seq)).astype(np.int32)
    y = rng.integers(0, 256, (batch, seq)).astype(np.int32)
    step = tg.make_step(layers, heads, 3e-3, mesh)
    psh = tg.param_shardings(mesh, p)
    row = mesh.sharding("data", None)
    return step, (p, opt, x, y), (psh, {"m": psh, "v": psh, "t": mesh.sharding()}, row, row)


def flat(out):
    """Every array of a step's outputs (a pytree of spmd.Arrays), as numpy, in a fixed order."""
    if isinstance(out, dict):
        return [a for k in sorted(out) for a in flat(out[k])]
    if isinstance(out, (list, tuple)):
        return [a for v in out for a in flat(v)]
    return [np.asarray(out.numpy() if hasattr(out, "numpy") else out)]


def pairs(graph):
    """[(start index, done index, ops with operands strictly between)] of a program."""
    out = []
    for i, op in enumerate(graph.ops):
        if op.opdef.collective.phase == "start":
            j = next(k for k, o in enumerate(graph.ops) if op.result in o.operands)
            assert graph.ops[j].opdef.collective.phase == "done"
            work = sum(1 for o in graph.ops[i + 1:j] if o.operands and o.opdef.collective.phase is None)
            out.append((i, j, work))
    return out
