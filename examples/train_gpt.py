"""Train a small GPT-style character-level transformer with data + tensor parallelism.

The text is the .py source of Python's own standard library (every machine has it).
The model is written in plain numpy; a handful of annotations shard it Megatron-style
over a (data, model) mesh: the batch over `data`, attention heads and the MLP's hidden
units over `model`. spmd infers every other sharding and inserts the collectives.

    python examples/train_gpt.py                       # 4 local devices, mesh 2x2
    mpiexec -n 4 python examples/train_gpt.py          # 4 MPI processes
    mpiexec -n 4 python examples/train_gpt.py --mesh 4x1 --fsdp   # parameters and Adam state split too
    spmd run -n 4 --backend ray examples/train_gpt.py  # 4 Ray actors
"""
import argparse
import os
import sys
import sysconfig
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import spmd  # noqa: E402


# ----------------------------------------------------------------------------- data
def load_corpus(max_bytes):
    """Bytes of the standard library's .py files, in a fixed order."""
    root = sysconfig.get_paths()["stdlib"]
    chunks, total = [], 0
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in ("site-packages", "test", "__pycache__"))
        for fn in sorted(filenames):
            if fn.endswith(".py"):
                with open(os.path.join(dirpath, fn), "rb") as f:
                    data = f.read()
                chunks.append(data)
                total += len(data)
                if total >= max_bytes:
                    return np.frombuffer(b"".join(chunks)[:max_bytes], dtype=np.uint8).astype(np.int32)
    return np.frombuffer(b"".join(chunks), dtype=np.uint8).astype(np.int32)


def batches(corpus, batch, seq, seed):
    """Deterministic random windows: batch i depends only on (seed, i), so a resumed run
    sees the same data as an uninterrupted one."""
    i = 0
    while True:
        rng = np.random.default_rng([seed, i])
        starts = rng.integers(0, len(corpus) - seq - 1, size=batch)
        x = np.stack([corpus[s:s + seq] for s in starts])
        y = np.stack([corpus[s + 1:s + seq + 1] for s in starts])
        yield i, x, y
        i += 1


# ----------------------------------------------------------------------------- model
VOCAB = 256


def init_params(rng, d, layers, seq, hidden_mult=4):
    def w(*shape, scale=None):
        scale = scale or 1 / np.sqrt(shape[0])
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    p = {"wte": w(VOCAB, d, scale=0.02), "wpe": w(seq, d, scale=0.02),
         "lnf_g": np.ones(d, np.float32), "lnf_b": np.zeros(d, np.float32)}
    for i in range(layers):
        p.update({
            f"l{i}_ln1_g": np.ones(d, np.float32), f"l{i}_ln1_b": np.zeros(d, np.float32),
            f"l{i}_wq": w(d, d), f"l{i}_wk": w(d, d), f"l{i}_wv": w(d, d),
            f"l{i}_wo": w(d, d, scale=1 / np.sqrt(d * 2 * layers)),
            f"l{i}_ln2_g": np.ones(d, np.float32), f"l{i}_ln2_b": np.zeros(d, np.float32),
            f"l{i}_w1": w(d, hidden_mult * d), f"l{i}_b1": np.zeros(hidden_mult * d, np.float32),
            f"l{i}_w2": w(hidden_mult * d, d, scale=1 / np.sqrt(hidden_mult * d * 2 * layers)),
        })
    return p


def param_shardings(mesh, params):
    """Megatron: q/k/v and w1 split by columns (heads / hidden units) over `model`,
    wo and w2 by rows, so each block needs one all-reduce forward; the rest replicated."""
    out = {}
    for k in params:
        if k.endswith(("_wq", "_wk", "_wv", "_w1")):
            out[k] = mesh.sharding(None, "model")
        elif k.endswith("_b1"):
            out[k] = mesh.sharding("model")
        elif k.endswith(("_wo", "_w2")):
            out[k] = mesh.sharding("model", None)
        else:
            out[k] = mesh.sharding(*([None] * params[k].ndim))
    return out


def fsdp_shardings(mesh, params):
    """FSDP (ZeRO-3): every parameter -- and so its Adam state -- also split over `data`,
    on its first dim the Megatron layout leaves whole. spmd gathers each weight where a
    layer needs it (again for the backward pass, not held in between), reduce-scatters its
    gradient and updates the shard: a device holds 1/data of the parameters and state."""
    out = {}
    for k, s in param_shardings(mesh, params).items():
        spec = list(s.spec)
        free = [d for d, a in enumerate(spec) if a is None]
        if free:
            spec[free[0]] = "data"
        out[k] = mesh.sharding(*spec)
    return out


def layernorm(x, g, b, eps=1e-5):
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * g + b


def gelu(x):
    return 0.5 * x * (1 + np.tanh(0.7978845608 * (x + 0.044715 * x ** 3)))


LAYER_KEYS = ("ln1_g", "ln1_b", "wq", "wk", "wv", "wo", "ln2_g", "ln2_b", "w1", "b1", "w2")


def attention(x, p, heads):
    B, T, D = x.shape
    dh = D // heads

    def split(w):
        return (x @ w).reshape(B, T, heads, dh).transpose(0, 2, 1, 3)

    q, k, v = split(p["wq"]), split(p["wk"]), split(p["wv"])
    scores = (q @ k.transpose(0, 1, 3, 2)) / dh ** 0.5     # a Python float: the scores stay float32
    causal = np.tril(np.ones((T, T), dtype=bool))
    scores = np.where(causal, scores, -1e9)
    scores = scores - scores.max(axis=-1, keepdims=True)
    att = np.exp(scores)
    att = att / att.sum(axis=-1, keepdims=True)
    out = (att @ v).transpose(0, 2, 1, 3).reshape(B, T, D)
    return out @ p["wo"]


def block(x, q, heads):
    """One transformer layer; q holds its parameters (LAYER_KEYS)."""
    x = x + attention(layernorm(x, q["ln1_g"], q["ln1_b"]), q, heads)
    h = layernorm(x, q["ln2_g"], q["ln2_b"])
    return x + gelu(h @ q["w1"] + q["b1"]) @ q["w2"]


def forward(p, tokens, layers, heads, scan=False, batch=None):
    """`batch`: the sharding of the activations' batch dim (FSDP): pinned after the
    embedding and after each layer, so the data axis keeps splitting the batch and the
    parameters split over it are what gets gathered (as jax's FSDP recipes pin it)."""
    B, T = tokens.shape
    pin = (lambda x: spmd.shard(x, batch)) if batch is not None else (lambda x: x)
    x = pin(p["wte"][tokens] + p["wpe"][None, :T])
    if scan:
        # one traced layer, run `layers` times over the stacked parameters (spmd.scan):
        # the program (and its compile time) no longer grows with the depth
        stacked = {k: np.stack([p[f"l{i}_{k}"] for i in range(layers)]) for k in LAYER_KEYS}
        x, _ = spmd.scan(lambda x, q: (pin(block(x, q, heads)), None), x, stacked)
    else:
        for i in range(layers):
            x = pin(block(x, {k: p[f"l{i}_{k}"] for k in LAYER_KEYS}, heads))
    x = layernorm(x, p["lnf_g"], p["lnf_b"])
    return x @ p["wte"].T                       # tied embeddings


def loss_fn(p, tokens, targets, layers, heads, scan=False, batch=None):
    logits = forward(p, tokens, layers, heads, scan, batch)
    logits = logits - logits.max(axis=-1, keepdims=True)
    logp = logits - np.log(np.exp(logits).sum(axis=-1, keepdims=True))
    onehot = targets[..., None] == np.arange(VOCAB)
    return -np.mean(np.sum(np.where(onehot, logp, 0.0), axis=-1))


def make_step(layers, heads, lr, mesh, scan=False, fsdp=False):
    batch = mesh.sharding("data", None, None) if fsdp and mesh is not None else None

    def step(params, opt, tokens, targets):
        if mesh is not None:
            tokens = spmd.shard(tokens, mesh.sharding("data", None))
        loss, grads = spmd.value_and_grad(loss_fn)(params, tokens, targets, layers, heads, scan, batch)
        return (loss,) + adam(params, opt, grads, lr)
    return step


def adam(params, opt, grads, lr, b1=0.9, b2=0.99):
    """One Adam update: (new params, new optimizer state)."""
    t = opt["t"] + 1.0
    new_p, new_m, new_v = {}, {}, {}
    for k in params:
        new_m[k] = b1 * opt["m"][k] + (1 - b1) * grads[k]
        new_v[k] = b2 * opt["v"][k] + (1 - b2) * grads[k] ** 2
        mhat = new_m[k] / (1 - b1 ** t)
        vhat = new_v[k] / (1 - b2 ** t)
        new_p[k] = params[k] - lr * mhat / (np.sqrt(vhat) + 1e-8)
    return new_p, {"m": new_m, "v": new_v, "t": t}


# ----------------------------------------------------------------------------- main
def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mesh", default="2x2", help="data x model mesh shape, e.g. 2x2, 4x1, 1x1")
    ap.add_argument("--backend", default=None, help="local | mpi | ray (default: detected)")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--d-model", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--corpus-bytes", type=int, default=2_000_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--checkpoint-dir", default=None)
    ap.add_argument("--save-every", type=int, default=0)
    ap.add_argument("--plot", default="loss.png", help="loss-curve PNG (needs matplotlib); '' to skip")
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("--scan", action="store_true", help="run the layers with spmd.scan (one traced layer)")
    ap.add_argument("--fsdp", action="store_true",
                    help="split parameters and Adam state over the data axis too (FSDP / ZeRO-3)")
    ap.add_argument("--memory-limit", type=float, default=None, metavar="MB",
                    help="memory per device: recompute what the step would hold to fit, or fail up front")
    return ap.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    dp, mp = (int(v) for v in args.mesh.lower().split("x"))
    if args.backend or dp * mp > 1:
        spmd.init(backend=args.backend, num_devices=dp * mp)
    mesh = spmd.Mesh((dp, mp), ("data", "model")) if dp * mp > 1 else None
    rank0 = spmd.process_index() == 0 if hasattr(spmd, "process_index") else True

    corpus = load_corpus(args.corpus_bytes)
    params = init_params(np.random.default_rng(args.seed), args.d_model, args.layers, args.seq)
    opt = {"m": {k: np.zeros_like(v) for k, v in params.items()},
           "v": {k: np.zeros_like(v) for k, v in params.items()}, "t": np.float32(0.0)}
    start = 0
    if args.checkpoint_dir and hasattr(spmd, "load"):
        latest = spmd.latest_checkpoint(args.checkpoint_dir)
        if latest is not None:
            shardings = None
            if mesh is not None:      # placed as the step wants them: each rank reads only its shards
                psh = (fsdp_shardings if args.fsdp else param_shardings)(mesh, params)
                shardings = {"params": psh, "opt": {"m": psh, "v": psh, "t": mesh.sharding()}, "step": None}
            state = spmd.load(latest, shardings)
            params, opt, start = state["params"], state["opt"], int(np.asarray(state["step"])) + 1
            if rank0:
                print(f"resumed from {latest} at step {start}")

    jit_kw = {}
    if args.memory_limit is not None:
        jit_kw["memory_limit"] = int(args.memory_limit * 2**20)
    if mesh is not None:
        psh = (fsdp_shardings if args.fsdp else param_shardings)(mesh, params)
        rep = mesh.sharding()
        jit_kw.update(in_shardings=(psh, {"m": psh, "v": psh, "t": rep},
                                    mesh.sharding("data", None), mesh.sharding("data", None)))
        # params and optimizer state are replaced by the step's outputs: donated, the new
        # values are computed in the old ones' buffers (the first, numpy, call copies them)
        jit_kw["donate_argnums"] = (0, 1)
    step = spmd.jit(make_step(args.layers, args.heads, args.lr, mesh, args.scan, args.fsdp), **jit_kw)

    losses, tokens_per_step = [], args.batch * args.seq
    tc = time.perf_counter()
    _, x0, y0 = next(batches(corpus, args.batch, args.seq, args.seed))
    try:
        low = step.lower(params, opt, x0, y0)     # (a memory_limit it cannot meet fails here, before a step)
    except spmd.MemoryLimitError as e:
        if rank0:
            print(f"train_gpt: {e}", file=sys.stderr)
        sys.exit(2)
    low.compile()
    if rank0 and not args.quiet:
        mem = low.memory()
        print(f"compile: {time.perf_counter() - tc:.2f} s ({'scan over' if args.scan else 'unrolled'} "
              f"{args.layers} layers); memory per device: peak {mem['peak_bytes'] / 2**20:.1f} MB, of which "
              f"parameters, Adam state and batch {mem['argument_bytes'] / 2**20:.1f} MB")
    t0 = time.perf_counter()
    data = batches(corpus, args.batch, args.seq, args.seed)
    for i, x, y in data:
        if i < start:
            continue
        if i >= args.steps:
            break
        loss, params, opt = step(params, opt, x, y)
        losses.append(float(loss))
        if args.checkpoint_dir and args.save_every and (i + 1) % args.save_every == 0:
            spmd.save(os.path.join(args.checkpoint_dir, f"step_{i:08d}"),
                      {"params": params, "opt": opt, "step": np.int64(i)})
        if rank0 and not args.quiet:
            el = time.perf_counter() - t0
            n = i - start + 1
            bar = "#" * int(30 * (i + 1) / args.steps)
            print(f"\r[{bar:<30}] step {i + 1}/{args.steps} loss {losses[-1]:.4f} "
                  f"{n * tokens_per_step / el:,.0f} tok/s", end="", flush=True)
    if rank0 and not args.quiet:
        print()
    if rank0 and losses:
        print(f"loss: first {losses[0]:.4f}  last {losses[-1]:.4f}  "
              f"({time.perf_counter() - t0:.1f} s, mesh {dp}x{mp})")
        if mesh is not None and hasattr(step, "lower"):
            low = step.lower(params, opt, x, y)
            if hasattr(low, "report"):
                rep = low.report()
                print(f"communication per step per device: {rep['launched_bytes'] / 1e6:.2f} MB in "
                      f"{len(rep['launched'])} collectives ({len(rep['collectives'])} reshards, the "
                      f"independent all-reduces combined)")
        if args.plot:
            _plot(losses, args.plot, start)
    return losses


def _plot(losses, path, start):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"loss curve skipped: matplotlib is not installed (pip install matplotlib, or --plot '')")
        return
    plt.figure(figsize=(6, 3.5))
    plt.plot(range(start, start + len(losses)), losses)
    plt.xlabel("step")
    plt.ylabel("loss")
    plt.title("train_gpt.py")
    plt.tight_layout()
    plt.savefig(path)
    print(f"loss curve: {path}")


if __name__ == "__main__":
    main()
