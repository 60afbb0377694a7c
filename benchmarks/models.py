"""Whole training steps of real models: spmd against jax.jit with the same shardings, same
process, same inputs; median step times, first-call (compile) times, memory, ratios.

    python benchmarks/models.py [--runs 7] [--models gpt,gpt256,mlp] [--meshes 1x1,2x2] [--no-mpi]

Models: `gpt` is examples/train_gpt.py's step at its default size (d64, 2 layers, batch 16,
seq 64, Adam), `gpt256` the same code at d256, 4 layers, seq 128, and `mlp` the 2-layer MLP
step of benchmarks/kernels.py (batch 256, 1024 -> 4096 -> 1024, SGD). Meshes: `1x1` is one
device (no sharding), `2x2` a (data, model) mesh with train_gpt's Megatron shardings (the
MLP: batch over data, hidden units over model), run by the local runtime (4 threads) for
spmd and on 4 host devices for jax (XLA_FLAGS=--xla_force_host_platform_device_count=4).
Unless --no-mpi, the 2x2 spmd step is also run under `mpiexec -n 4` (a child run of this
script) and compared with jax's 2x2 step run by this process between the child's steps
(one of each in turn: the child waits for a line on its stdin, without spinning), so that
both see the same load.

First calls are cold: spmd compiles into an empty disk cache (a temporary SPMD_CACHE_DIR),
jax.jit has no persistent cache. Memory is the per-device temporary memory of one step,
arguments and outputs excluded on both sides, against XLA's temp allocation
(compiled.memory_analysis().temp_size_in_bytes): spmd's planned figure
(`lowered.memory()["temporary_bytes"]`: the arena of temporaries, scratch, and the most
other per-call buffers live at once), and the measured one: the arena and scratch plus
what a step allocates beyond them (tracemalloc: ops run through numpy, collectives'
buffers; less the outputs). Both compilers recompute what they find cheap to (XLA's
fusion duplicates elementwise producers; spmd's late_reads pass likewise).

Both place a temporary that dies before an output is written in that output's buffer,
and leave it out of the temp figure (spmd: memory.py, `temporaries_in_outputs` in
`lowered.memory()`). They place different ones: on the 2x2 MLP XLA computes both weight
gradients in the new weights' buffers and all-reduces them into a 16 MiB temporary; spmd
computes them in the gradient bucket (16 MiB, in the arena), reduces it in place, and
puts the activations in the new weights' buffers. Per device in all (arguments, outputs
and temporaries) each holds 49 MiB there.

Timings on a shared machine are noisy: the runs of spmd and jax are interleaved so that
they see the same load, and medians are reported. jax comes from the `bench` extra.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
import tracemalloc

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")
if "--mpi-child" not in sys.argv:       # (the ranks of the MPI child run share the one mpi_run makes)
    _CACHE = tempfile.TemporaryDirectory(prefix="spmd-bench-cache-")
    os.environ["SPMD_CACHE_DIR"] = _CACHE.name      # cold first calls (set before spmd compiles)

import numpy as np  # noqa: E402

sys.path.insert(0, ROOT)
import spmd  # noqa: E402
from timing import interleaved  # noqa: E402  (benchmarks/timing.py)

MPI_CHILD = "--mpi-child" in sys.argv
jax = jnp = None
if not MPI_CHILD:
    try:
        import jax
        import jax.numpy as jnp
        jax.config.update("jax_platforms", "cpu")
    except ImportError:     # the bench extra is not installed
        jax = jnp = None


def _load(name, as_jax=False):
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "examples", "train_gpt.py"))
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    if as_jax:
        m.np = _JaxNumpy()  # the same model code, its numpy calls now jax.numpy's
    return m


class _JaxNumpy:
    """jax.numpy for the model code, except that numpy on a Python number stays numpy (under
    jax.jit, jnp.sqrt of an int is a tracer, which float() and shapes cannot take)."""

    def __getattr__(self, name):
        f = getattr(jnp, name)
        npf = getattr(np, name, None)
        if not callable(f) or npf is None or not callable(npf):
            return f
        return lambda *a, **k: (npf(*a, **k) if a and all(isinstance(x, (int, float)) for x in a)
                                else f(*a, **k))


# ----------------------------------------------------------------------------- models
class GPT:
    def __init__(self, d, layers, batch, seq, heads=4, lr=3e-3):
        self.d, self.layers, self.batch, self.seq, self.heads, self.lr = d, layers, batch, seq, heads, lr
        self.tg = _load("train_gpt_np")
        self.name = f"gpt d{d} L{layers} B{batch} T{seq}"

    def inputs(self):
        rng = np.random.default_rng(0)
        p = self.tg.init_params(rng, self.d, self.layers, self.seq)
        opt = {"m": {k: np.zeros_like(v) for k, v in p.items()},
               "v": {k: np.zeros_like(v) for k, v in p.items()}, "t": np.float32(0.0)}
        x = rng.integers(0, 256, (self.batch, self.seq)).astype(np.int32)
        y = rng.integers(0, 256, (self.batch, self.seq)).astype(np.int32)
        return (p, opt, x, y)

    def specs(self, mesh, args):
        """In-shardings as spmd Shardings (train_gpt's own)."""
        psh = self.tg.param_shardings(mesh, args[0])
        row = mesh.sharding("data", None)
        return (psh, {"m": psh, "v": psh, "t": mesh.sharding()}, row, row)

    def spmd_step(self, mesh):
        return self.tg.make_step(self.layers, self.heads, self.lr, mesh)

    def jax_step(self):
        tj = _load("train_gpt_jax", as_jax=True)
        layers, heads, lr = self.layers, self.heads, self.lr

        def step(params, opt, tokens, targets):     # train_gpt.make_step, jax's grad
            loss, grads = jax.value_and_grad(tj.loss_fn)(params, tokens, targets, layers, heads)
            return (loss,) + tj.adam(params, opt, grads, lr)   # its np is jax.numpy there
        return step


class MLP:
    LR = np.float32(0.01)

    def __init__(self, batch=256, din=1024, dh=4096, dout=1024):
        self.sizes = (batch, din, dh, dout)
        self.name = f"mlp B{batch} {din}-{dh}-{dout}"

    def inputs(self):
        b, din, dh, dout = self.sizes
        rng = np.random.default_rng(0)
        p = {"w1": (rng.standard_normal((din, dh)) / np.sqrt(din)).astype(np.float32),
             "w2": (rng.standard_normal((dh, dout)) / np.sqrt(dh)).astype(np.float32)}
        return (p, rng.standard_normal((b, din)).astype(np.float32),
                rng.standard_normal((b, dout)).astype(np.float32))

    def specs(self, mesh, args):
        row = mesh.sharding("data", None)
        return ({"w1": mesh.sharding(None, "model"), "w2": mesh.sharding("model", None)}, row, row)

    @staticmethod
    def _loss(xp):
        def loss(p, x, y):
            h = xp.maximum(x @ p["w1"], 0)
            return xp.mean((h @ p["w2"] - y) ** 2)
        return loss

    def spmd_step(self, mesh):
        loss, lr = self._loss(np), self.LR

        def step(p, x, y):
            if mesh is not None:
                x = spmd.shard(x, mesh.sharding("data", None))
            l, g = spmd.value_and_grad(loss)(p, x, y)
            return l, {k: p[k] - lr * g[k] for k in p}
        return step

    def jax_step(self):
        loss, lr = self._loss(jnp), self.LR

        def step(p, x, y):
            l, g = jax.value_and_grad(loss)(p, x, y)
            return l, {k: p[k] - lr * g[k] for k in p}
        return step


MODELS = {"gpt": lambda: GPT(64, 2, 16, 64), "gpt256": lambda: GPT(256, 4, 16, 128), "mlp": MLP}


# ----------------------------------------------------------------------------- running
def spmd_setup(model, mesh_shape, args):
    """(step callable on placed inputs, first-call seconds, (planned, measured) temp bytes
    per device, loss)."""
    dp, mp = mesh_shape
    mesh = spmd.Mesh((dp, mp), ("data", "model")) if dp * mp > 1 else None
    kw = {}
    placed = args
    if mesh is not None:
        specs = model.specs(mesh, args)
        kw = dict(in_shardings=specs)
        leaves, tree = spmd.tree.tree_flatten(args)
        sh_leaves = spmd.tree.tree_flatten(specs)[0]
        placed = spmd.tree.tree_unflatten(tree, [spmd.device_put(np.asarray(x), s)
                                                 for x, s in zip(leaves, sh_leaves)])
    f = spmd.jit(model.spmd_step(mesh), **kw)
    t0 = time.perf_counter()
    out = f(*placed)
    loss = float(np.asarray(out[0].numpy() if hasattr(out[0], "numpy") else out[0]))
    first = time.perf_counter() - t0
    rep = f.lower(*placed).memory()
    planned = (rep["temp_bytes"] or 0) + rep.get("scratch_bytes", 0)
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    out = f(*placed)
    extra = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    # what a step allocates beyond its reused buffers, less its outputs (XLA's temp excludes them)
    leaves = spmd.tree.tree_flatten(out)[0]
    outs = sum(sum(np.asarray(s).nbytes for s in getattr(x, "_handles", {0: x}).values()) for x in leaves)
    ranks = len(getattr(leaves[0], "_handles", {0: None}))         # the devices this process runs
    del out, leaves
    return (lambda: f(*placed)), first, (rep["temporary_bytes"], planned + max(0, extra - outs) // ranks), loss


def jax_setup(model, mesh_shape, args):
    dp, mp = mesh_shape
    step = model.jax_step()
    leaves, tree = jax.tree_util.tree_flatten(args)
    if dp * mp > 1:
        from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
        jm = Mesh(np.array(jax.devices()[:dp * mp]).reshape(dp, mp), ("data", "model"))
        smesh = spmd.Mesh((dp, mp), ("data", "model"))
        specs = spmd.tree.tree_flatten(model.specs(smesh, args))[0]
        shs = [NamedSharding(jm, P(*s.spec)) for s in specs]
        placed = [jax.device_put(jnp.asarray(x), s) for x, s in zip(leaves, shs)]
        jf = jax.jit(step, in_shardings=tuple(jax.tree_util.tree_unflatten(tree, shs)))
    else:
        placed = [jax.device_put(jnp.asarray(x)) for x in leaves]
        jf = jax.jit(step)
    placed = jax.tree_util.tree_unflatten(tree, placed)
    t0 = time.perf_counter()
    out = jax.block_until_ready(jf(*placed))
    first = time.perf_counter() - t0
    try:
        temp = jf.lower(*placed).compile().memory_analysis().temp_size_in_bytes
    except Exception:      # noqa: BLE001 - not every jax version reports it
        temp = None
    return (lambda: jax.block_until_ready(jf(*placed))), first, temp, float(out[0])


def mpi_child(a):
    """Under mpiexec -n 4: the 2x2 spmd step of each model, one step each time the parent
    (mpi_run) writes a line to rank 0's stdin, so that its runs interleave with jax's;
    rank 0 prints READY, a line per step and a JSON line per model."""
    spmd.init()
    from mpi4py import MPI
    world = MPI.COMM_WORLD
    rank0 = spmd.process_index() == 0

    def go():
        """Wait for the parent's word without spinning: the parent's jax step runs meanwhile."""
        if rank0 and not sys.stdin.readline():
            sys.exit(0)
        req = world.Ibarrier()
        while not req.Test():
            time.sleep(2e-4)

    for key in a.models.split(","):
        model = MODELS[key]()
        args = model.inputs()
        run, first, mem, loss = spmd_setup(model, (2, 2), args)
        run()                                   # warm up
        if rank0:
            print(f"READY {key}", flush=True)
        ts = []
        for _ in range(a.runs):
            go()
            t0 = time.perf_counter()
            run()
            ts.append(time.perf_counter() - t0)
            if rank0:
                print("STEP", flush=True)
        if rank0:
            print(json.dumps({"model": key, "ms": 1e3 * float(np.median(ts)), "first": first, "mem": mem[1],
                              "planned": mem[0], "loss": loss}), flush=True)


def mpi_run(a, jax_runs):
    """The MPI child's rows, its steps interleaved with jax's 2x2 step of the same model
    (jax_runs: model -> step callable): {model: row, with "jax" the median of jax's
    interleaved runs}. Both see the same load, as the rows of one process do."""
    cmd = ["mpiexec", "-n", "4", sys.executable, os.path.abspath(__file__), "--mpi-child",
           "--models", a.models, "--runs", str(a.runs)]
    cold = tempfile.TemporaryDirectory(prefix="spmd-bench-mpi-cache-")
    got = {}
    try:
        err = tempfile.TemporaryFile("w+")      # (a pipe nobody reads until the end could fill)
        p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                             text=True, env=dict(os.environ, SPMD_CACHE_DIR=cold.name))
        jax_ms = []
        for line in p.stdout:
            if line.startswith("READY "):
                j_run, jax_ms = jax_runs[line.split()[1]], []
                j_run()
                t0 = time.perf_counter()
                j_run()
                jax_ms.append(time.perf_counter() - t0)
                p.stdin.write("go\n")
                p.stdin.flush()
            elif line.startswith("STEP"):
                if len(jax_ms) < a.runs:
                    t0 = time.perf_counter()
                    j_run()
                    jax_ms.append(time.perf_counter() - t0)
                    p.stdin.write("go\n")
                    p.stdin.flush()
            elif line.startswith("{"):
                d = json.loads(line)
                d["jax"] = 1e3 * float(np.median(jax_ms))
                got[d["model"]] = d
        p.stdin.close()
        if p.wait(timeout=60):
            err.seek(0)
            print(f"mpiexec run failed:\n{err.read()[-2000:]}")
    except (OSError, subprocess.TimeoutExpired) as e:
        print(f"mpiexec run failed: {e}")
    finally:
        cold.cleanup()
    return got


def fmt_mb(b):
    return "n/a" if b is None else f"{b / 2**20:.1f}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--models", default="gpt,gpt256,mlp")
    ap.add_argument("--meshes", default="1x1,2x2")
    ap.add_argument("--no-mpi", action="store_true")
    ap.add_argument("--mpi-child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.mpi_child:
        return mpi_child(a)
    if jax is None:
        sys.exit("models.py compares against jax.jit: pip install -e .[bench]")
    spmd.init(backend="local", num_devices=4)
    print(f"spmd vs jax {jax.__version__} (jax.jit, CPU); {os.cpu_count()} cores; medians of {a.runs} "
          f"interleaved runs; ms per step; first call = trace + compile + run, empty caches\n")
    hdr = (f"{'model':28s} {'mesh':8s} {'spmd ms':>9s} {'jax ms':>9s} {'ratio':>6s}  {'1st spmd s':>10s} "
           f"{'1st jax s':>9s} {'ratio':>6s}  {'temp MB spmd plan':>17s} {'meas':>6s} {'jax':>6s}  "
           f"{'loss spmd/jax':>15s}")
    print(hdr)
    print("-" * len(hdr))
    rows = []
    jax22 = {}                  # model -> jax's 2x2 step, run again beside the MPI child's
    for key in a.models.split(","):
        model = MODELS[key]()
        args = model.inputs()
        for m in a.meshes.split(","):
            shape = tuple(int(v) for v in m.split("x"))
            s_run, s_first, s_mem, s_loss = spmd_setup(model, shape, args)
            j_run, j_first, j_mem, j_loss = jax_setup(model, shape, args)
            s_ms, j_ms = interleaved([s_run, j_run], a.runs)
            if shape == (2, 2):
                jax22[key] = j_run
            row = dict(model=model.name, mesh=f"{m} local", spmd=s_ms, jax=j_ms, first_spmd=s_first,
                       first_jax=j_first, mem_spmd=s_mem[1], mem_planned=s_mem[0], mem_jax=j_mem)
            rows.append(row)
            print(f"{model.name:28s} {m + ' local':8s} {s_ms:9.2f} {j_ms:9.2f} {s_ms / j_ms:6.2f}  "
                  f"{s_first:10.2f} {j_first:9.2f} {s_first / j_first:6.2f}  {fmt_mb(s_mem[0]):>17s} "
                  f"{fmt_mb(s_mem[1]):>6s} {fmt_mb(j_mem):>6s}  {s_loss:7.4f}/{j_loss:7.4f}", flush=True)
    if not a.no_mpi and jax22:
        got = mpi_run(a, jax22)
        for key, d in got.items():
            j_ms = d["jax"]
            name = MODELS[key]().name
            print(f"{name:28s} {'2x2 mpi':8s} {d['ms']:9.2f} {j_ms:9.2f} {d['ms'] / j_ms:6.2f}  "
                  f"{d['first']:10.2f} {'':9s} {'':6s}  {fmt_mb(d['planned']):>17s} {fmt_mb(d['mem']):>6s} "
                  f"{'':6s}  {d['loss']:7.4f}", flush=True)
            rows.append(dict(model=name, mesh="2x2 mpi", spmd=d["ms"], jax=j_ms))
    worst = max(r["spmd"] / r["jax"] for r in rows)
    print(f"\nworst step-time ratio spmd/jax: {worst:.2f} ({'met' if worst <= 1.0 else 'NOT met'}: <= 1.0)")
    mem = [(r["mem_planned"] / r["mem_jax"], r["mem_spmd"] / r["mem_jax"]) for r in rows if r.get("mem_jax")]
    if mem:
        p, q = max(m[0] for m in mem), max(m[1] for m in mem)
        # judged on the plans, as XLA's figure is its plan; the measured one also holds the
        # Python objects a call makes (a few KB), which neither plan counts
        print(f"worst temporaries ratio spmd/XLA: planned {p:.3f} ({'met' if p <= 1.0 else 'NOT met'}: <= 1.0), "
              f"measured {q:.3f}")


if __name__ == "__main__":
    main()
