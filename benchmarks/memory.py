"""Memory: what splitting parameters and optimizer state (FSDP) and recomputing (spmd.checkpoint)
save, each against the same program without it, in the same run.

    python benchmarks/memory.py [--parts fsdp,checkpoint,layers] [--runs 5] [--batch 2048]

fsdp: the deep MLP (8 layers of 1024x1024, ReLU, Adam) training step under
`mpiexec -n 4` on a 4-device data mesh, the batch split over data; once with parameters
and Adam state replicated (data parallel), once split over data (`mesh.sharding("data",
None)` on every weight and its state: FSDP). Per rank: the planned peak
(`lowered.memory()["peak_bytes"]`) and the measured one (tracemalloc, which sees every
numpy allocation: arguments, arena, collectives' buffers; from before the arrays exist,
over a training step after two warm-up steps), the larger rank's; the loss of both
(the same). Target: FSDP's peak <= 0.35x the replicated one.

checkpoint: a 16-layer MLP of transformer MLP layers (d -> 4d, tanh-GELU as train_gpt's,
-> d, residual; d=128, batch 2048) value_and_grad on one device, with and without
`spmd.checkpoint` on each layer: planned and measured peaks, median step times of
interleaved runs, and the losses and gradients (the same bits). Targets: peak <= 0.5x,
time <= 1.4x. (A layer of one matmul and an activation holds one value for the backward
pass either way -- its matmul result without checkpoint, its input with -- since the
compiler makes the activation again where the backward pass reads it: late_reads.)

fsdp also makes the parameters and Adam state on their shards (a jitted init with
out_shardings, spmd.random and np.zeros inside) and prints what a rank allocates while
making and placing them, against numpy's init placed afterwards.

layers: 16 layers of ReLU(h @ W + b) (d=256, batch 4096) value_and_grad on one device: as
written, spmd.checkpoint on every layer, by hand on every 4 layers, and
memory_limit=0.6x the planned peak as written; planned and measured peaks, step times,
and whether the loss and gradients are the same bits in every row. Targets: the
memory_limit fits, per-layer checkpoint <= 0.5x.

The machine is shared: run it when it is quiet (timings are medians of interleaved
runs; memory figures do not depend on load).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tracemalloc

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)
import spmd  # noqa: E402
from timing import interleaved  # noqa: E402  (benchmarks/timing.py)

MB = 2 ** 20


# ----------------------------------------------------------------------------- FSDP
def mlp_loss(p, x, y):
    h = x
    for i in range(len(p)):
        h = np.maximum(h @ p[f"w{i}"], 0)
    return np.mean((h - y) ** 2)


def adam(params, opt, grads, lr=1e-3, b1=0.9, b2=0.99):
    t = opt["t"] + 1.0
    new_p, new_m, new_v = {}, {}, {}
    for k in params:
        new_m[k] = b1 * opt["m"][k] + (1 - b1) * grads[k]
        new_v[k] = b2 * opt["v"][k] + (1 - b2) * grads[k] ** 2
        new_p[k] = params[k] - lr * (new_m[k] / (1 - b1 ** t)) / (np.sqrt(new_v[k] / (1 - b2 ** t)) + 1e-8)
    return new_p, {"m": new_m, "v": new_v, "t": t}


def mlp_step(p, opt, x, y):
    loss, g = spmd.value_and_grad(mlp_loss)(p, x, y)
    return (loss,) + adam(p, opt, g)


def mlp_init(key, layers, d):
    """Parameters and Adam state, made where jit's out_shardings put them: with the
    weights split over data (FSDP) each rank draws and zeroes its own shards alone."""
    keys = spmd.random.split(key, layers)
    p = {f"w{i}": spmd.random.normal(keys[i], (d, d), dtype=np.float32) / float(np.sqrt(d))
         for i in range(layers)}
    zeros = {k: np.zeros((d, d), np.float32) for k in p}
    return p, {"m": zeros, "v": dict(zeros), "t": np.float32(0)}


def fsdp_rank(layers, d, batch, fsdp, sharded_init=False):
    """One rank of the MPI run: (planned peak, measured peak, loss, measured peak of
    making the parameters) of a training step."""
    mesh = spmd.Mesh((spmd.process_count(),), ("data",))
    row = mesh.sharding("data", None)
    w = row if fsdp else mesh.sharding(None, None)
    psh = {f"w{i}": w for i in range(layers)}
    shard = (psh, {"m": psh, "v": psh, "t": mesh.sharding()}, row, row)
    f = spmd.jit(mlp_step, in_shardings=shard, donate_argnums=(0, 1))
    init = spmd.jit(lambda key: mlp_init(key, layers, d), out_shardings=shard[:2])
    if sharded_init:
        init.lower(spmd.random.key(0))            # (compiled before the measurement)
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    rng = np.random.default_rng(0)
    if sharded_init:
        p, opt = init(spmd.random.key(0))
    else:
        p = {f"w{i}": (rng.standard_normal((d, d)) / np.sqrt(d)).astype(np.float32) for i in range(layers)}
        opt = {"m": {k: np.zeros_like(v) for k, v in p.items()}, "v": {k: np.zeros_like(v) for k, v in p.items()},
               "t": np.float32(0)}
    x = rng.standard_normal((batch, d)).astype(np.float32)
    y = rng.standard_normal((batch, d)).astype(np.float32)
    flat, tree = spmd.tree.tree_flatten((p, opt, x, y))
    placed = spmd.tree.tree_unflatten(tree, [a if isinstance(a, spmd.Array) else spmd.device_put(a, s)
                                             for a, s in zip(flat, spmd.tree.tree_flatten(shard)[0])])
    del p, opt, x, y, flat                       # each rank keeps its shards alone
    p, opt, x, y = placed
    del placed
    made = tracemalloc.get_traced_memory()[1] - base
    planned = f.lower(p, opt, x, y).memory()["peak_bytes"]
    losses = []
    for _ in range(3):                           # two warm-up steps, then the measured one
        tracemalloc.reset_peak()
        loss, p, opt = f(p, opt, x, y)
        losses.append(float(loss))
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    return planned, peak, losses, made


def fsdp_child(a):
    spmd.init()
    out = {}
    for name, fsdp, sharded in (("replicated", False, False), ("fsdp", True, False), ("fsdp_init", True, True)):
        planned, peak, losses, made = fsdp_rank(a.layers, a.d, a.batch, fsdp, sharded)
        everyone = spmd.process_allgather(np.array([planned, peak, made], np.float64))
        out[name] = {"planned": float(np.max(everyone[:, 0])), "measured": float(np.max(everyone[:, 1])),
                     "made": float(np.max(everyone[:, 2])), "losses": losses}
    if spmd.process_index() == 0:
        print(json.dumps(out), flush=True)


def fsdp_part(a):
    from spmd.transports.mpi.mpi_launch import find_mpiexec
    cmd = [find_mpiexec(), "-n", "4", sys.executable, os.path.abspath(__file__), "--fsdp-child",
           "--layers", str(a.layers), "--d", str(a.d), "--batch", str(a.batch)]
    env = dict(os.environ, PYTHONPATH=os.path.dirname(HERE) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, env=env)
    if r.returncode:
        print(f"mpiexec run failed:\n{r.stderr[-3000:]}")
        return
    got = json.loads([line for line in r.stdout.splitlines() if line.startswith("{")][-1])
    rep, fs, fi = got["replicated"], got["fsdp"], got["fsdp_init"]
    print(f"FSDP: deep MLP step ({a.layers} x {a.d}x{a.d}, ReLU, Adam, batch {a.batch}) on mpiexec -n 4, "
          f"per rank (the larger rank); 'made': measured while the parameters, state and batch are made and placed")
    print(f"{'':36s} {'made MB':>8s} {'planned MB':>10s} {'measured MB':>11s}  {'loss (3 steps)'}")
    for name, r in (("replicated (data parallel)", rep), ("FSDP (numpy init, then placed)", fs),
                    ("FSDP (made on their shards: jit)", fi)):
        print(f"{name:36s} {r['made'] / MB:8.1f} {r['planned'] / MB:10.1f} {r['measured'] / MB:11.1f}  "
              f"{' '.join(f'{v:.6f}' for v in r['losses'])}")
    ratio = fs["measured"] / rep["measured"]
    same = np.allclose(rep["losses"], fs["losses"], rtol=1e-5)
    shard = 3 * a.layers * a.d * a.d * 4 / 4 + 2 * a.batch * a.d * 4 / 4     # p, m, v, x, y: a quarter each
    print(f"FSDP / replicated: planned {fs['planned'] / rep['planned']:.2f}x, measured {ratio:.2f}x "
          f"({'met' if ratio <= 0.35 else 'NOT met'}: <= 0.35); the same loss: {same}")
    whole_batch = 2 * a.batch * a.d * 4                                    # x and y, made whole by numpy in both
    print(f"parameters made on their shards: {fi['made'] / MB:.1f} MB a rank against {fs['made'] / MB:.1f} MB made "
          f"whole; the shards of parameters, state and batch are {shard / MB:.1f} MB, and the batch is made whole "
          f"first ({whole_batch / MB:.1f} MB) in both\n")


# ------------------------------------------------------------------------ checkpoint
def gelu(x):
    return 0.5 * x * (1 + np.tanh(0.7978845608 * (x + 0.044715 * x ** 3)))


def block(h, w1, w2):
    """A transformer's MLP layer: d -> 4d (GELU) -> d, residual."""
    return h + gelu(h @ w1) @ w2


def deep_loss(w1, w2, x, checkpointed):
    h = x
    for a, b in zip(w1, w2):
        h = spmd.checkpoint(block)(h, a, b) if checkpointed else block(h, a, b)
    return np.mean(h ** 2)


def measured_peak(f, *args):
    """Bytes a call holds at its peak beyond what exists before it, plus its arguments
    and what the program keeps between calls (the arena, scratch)."""
    f(*args)
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        f(*args)
        step = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    m = f.lower(*args).memory()
    return m["argument_bytes"] + (m["temp_bytes"] or 0) + m.get("scratch_bytes", 0) + step, m["peak_bytes"]


def checkpoint_part(a):
    layers, d, batch = 16, a.ckpt_d, a.ckpt_batch
    rng = np.random.default_rng(0)
    w1 = [(rng.standard_normal((d, 4 * d)) / np.sqrt(d)).astype(np.float32) for _ in range(layers)]
    w2 = [(rng.standard_normal((4 * d, d)) / np.sqrt(4 * d)).astype(np.float32) for _ in range(layers)]
    x = rng.standard_normal((batch, d)).astype(np.float32)
    fs = {ck: spmd.jit(spmd.value_and_grad(lambda w1, w2, x, ck=ck: deep_loss(w1, w2, x, ck), argnums=(0, 1)))
          for ck in (False, True)}
    outs = {ck: f(w1, w2, x) for ck, f in fs.items()}
    peaks = {ck: measured_peak(f, w1, w2, x) for ck, f in fs.items()}
    ms = dict(zip((False, True), interleaved([lambda: fs[False](w1, w2, x), lambda: fs[True](w1, w2, x)], a.runs)))
    flat = {ck: spmd.tree.tree_flatten(outs[ck])[0] for ck in outs}
    same = all(np.array_equal(np.asarray(u), np.asarray(v)) for u, v in zip(flat[False], flat[True]))
    print(f"checkpoint: {layers}-layer MLP (transformer MLP layers {d} -> {4 * d} GELU -> {d}, residual) "
          f"value_and_grad, batch {batch}, one device; medians of {a.runs} interleaved runs")
    print(f"{'':26s} {'planned MB':>10s} {'measured MB':>11s} {'ms':>9s}")
    for ck, name in ((False, "as written"), (True, "spmd.checkpoint per layer")):
        print(f"{name:26s} {peaks[ck][1] / MB:10.1f} {peaks[ck][0] / MB:11.1f} {ms[ck]:9.1f}")
    mem, t = peaks[True][0] / peaks[False][0], ms[True] / ms[False]
    print(f"checkpoint / as written: peak {mem:.2f}x ({'met' if mem <= 0.5 else 'NOT met'}: <= 0.5), time {t:.2f}x "
          f"({'met' if t <= 1.4 else 'NOT met'}: <= 1.4); loss and gradients the same bits: {same}\n")


# --------------------------------------------------------------- layers as users write them
def dense_loss(ws, bs, x, per_layer=False, group=0):
    """16 layers of ReLU(h @ W + b), the mean square of the last: per_layer puts
    spmd.checkpoint on every layer, group on segments of that many layers (by hand)."""
    def seg(h, ws, bs):
        for w, b in zip(ws, bs):
            h = np.maximum(h @ w + b, 0)
        return h
    h = x
    if per_layer or group:
        g = 1 if per_layer else group
        for i in range(0, len(ws), g):
            h = spmd.checkpoint(seg)(h, ws[i:i + g], bs[i:i + g])
    else:
        h = seg(h, ws, bs)
    return np.mean(h ** 2)


def layers_part(a):
    layers, d, batch = 16, a.dense_d, a.dense_batch
    rng = np.random.default_rng(0)
    ws = [(rng.standard_normal((d, d)) * np.sqrt(2 / d)).astype(np.float32) for _ in range(layers)]
    bs = [np.full(d, 0.01, np.float32) for _ in range(layers)]
    x = rng.standard_normal((batch, d)).astype(np.float32)
    vg = lambda **kw: spmd.value_and_grad(lambda ws, bs, x: dense_loss(ws, bs, x, **kw), argnums=(0, 1))  # noqa: E731
    free = spmd.jit(vg())
    base = free.lower(ws, bs, x).memory()["peak_bytes"]
    fs = {"as written": free, "spmd.checkpoint per layer": spmd.jit(vg(per_layer=True)),
          "by hand, every 4 layers": spmd.jit(vg(group=4)),
          "memory_limit=0.6x": spmd.jit(vg(), memory_limit=int(0.6 * base))}
    rows, outs = {}, {}
    for name, f in fs.items():
        try:
            outs[name] = [np.asarray(v) for v in spmd.tree.tree_flatten(f(ws, bs, x))[0]]
            rows[name] = measured_peak(f, ws, bs, x)
        except spmd.MemoryLimitError as e:
            rows[name] = None
            print(f"{name}: {str(e).splitlines()[0][:200]}")
    names = [n for n in fs if rows[n] is not None]
    ms = dict(zip(names, interleaved([lambda f=fs[n]: f(ws, bs, x) for n in names], a.runs)))
    print(f"layers: {layers} layers of ReLU(h @ W + b), {d} wide, batch {batch}, value_and_grad on one device; "
          f"medians of {a.runs} interleaved runs")
    print(f"{'':28s} {'planned MB':>10s} {'x':>5s} {'measured MB':>11s} {'ms':>8s}  loss")
    for n in names:
        meas, plan = rows[n]
        print(f"{n:28s} {plan / MB:10.1f} {plan / base:5.2f} {meas / MB:11.1f} {ms[n]:8.1f}  {outs[n][0]:.9g}")
    same = all(all(np.array_equal(u, v) for u, v in zip(outs[n], outs["as written"])) for n in names)
    lim = rows.get("memory_limit=0.6x")
    ck = rows["spmd.checkpoint per layer"][1]
    print(f"memory_limit at 0.6x: {'fits' if lim else 'does NOT fit'}; per-layer checkpoint {ck / base:.2f}x "
          f"({'met' if ck <= 0.5 * base else 'NOT met'}: <= 0.5); loss and gradients the same bits in every "
          f"row: {same}\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--parts", default="fsdp,checkpoint,layers")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--d", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=2048, help="the FSDP MLP's global batch")
    ap.add_argument("--ckpt-batch", type=int, default=2048, help="the checkpointed MLP's batch")
    ap.add_argument("--ckpt-d", type=int, default=128, help="the checkpointed MLP's width (its hidden layer: 4x)")
    ap.add_argument("--dense-d", type=int, default=256, help="the ReLU layers' width")
    ap.add_argument("--dense-batch", type=int, default=4096, help="the ReLU layers' batch")
    ap.add_argument("--fsdp-child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.fsdp_child:
        return fsdp_child(a)
    parts = a.parts.split(",")
    if "fsdp" in parts:
        fsdp_part(a)
    if "checkpoint" in parts:
        checkpoint_part(a)
    if "layers" in parts:
        layers_part(a)


if __name__ == "__main__":
    main()
