"""Helpers for the partitioner tests: run a hand-annotated global Graph through
partition() on the real local runtime (threads + LocalCommunicator), and random
programs for the property tests.

`run_partitioned(graph, args)` places each argument as the padded local shards its
input Value's sharding says (padding filled with garbage: NaN, 77, True, so a result
that read padding shows it; a partial input split into random addends that sum to the
value), runs the per-device program on every device, and assembles the global outputs,
checking on the way that every device holding a piece of an output agrees with it.
"""
from __future__ import annotations

import itertools

import numpy as np

from spmd.backends import compile_graph
from spmd.ir import Graph
from spmd.ir.ops.names import (
    ADD, BROADCAST_IN_DIM, COMPARE, CONCATENATE, CONSTANT, DOT_GENERAL, DYNAMIC_SLICE, GATHER,
    IOTA, PAD, REDUCE, RESHAPE, SELECT, SHARDING_CONSTRAINT, SLICE, SUBTRACT, TANH, TRANSPOSE
)
from spmd.transports.local.local_runtime import LocalRuntime
from spmd.sharding import Sharding
from spmd.sharding.partition import partition

_RT = LocalRuntime()


def specs(mesh, ndim):
    """Every spec of `ndim` dims on `mesh` (an axis splits at most one dim)."""
    opts = [None] + list(mesh.axis_names)
    if mesh.ndim == 2:
        opts += [tuple(mesh.axis_names), tuple(reversed(mesh.axis_names))]
    out = []
    for combo in itertools.product(opts, repeat=ndim):
        used = [a for e in combo if e for a in ((e,) if isinstance(e, str) else e)]
        if len(used) == len(set(used)):
            out.append(combo)
    return out


def sharding_of(v, mesh):
    return (v.sharding or Sharding(mesh, ())).for_rank(v.ndim)


def garbage(shape, dtype):
    dt = np.dtype(dtype)
    if dt.kind in "fc":
        return np.full(shape, np.nan, dt)
    if dt.kind == "b":
        return np.ones(shape, dt)
    return np.full(shape, 77, dt)


def place(x, sh, rng=None):
    """{device: padded local shard} of global array x under sharding sh."""
    x = np.asarray(x)
    mesh = sh.mesh
    out = {}
    parts = {}
    if sh.partial:
        # a pending sum: random addends over each partial group, summing to x
        rng = rng or np.random.default_rng(0)
        for dev in range(mesh.size):
            if mesh.index_in_group(dev, sh.partial) != 0:
                parts[dev] = (rng.integers(-3, 4, size=x.shape) if x.dtype.kind in "iu"
                              else rng.uniform(-1, 1, size=x.shape)).astype(x.dtype)
        for dev in range(mesh.size):
            if mesh.index_in_group(dev, sh.partial) == 0:
                others = [parts[d] for d in mesh.group(dev, sh.partial) if d != dev]
                parts[dev] = (x - sum(others, np.zeros_like(x))).astype(x.dtype)
    for dev in range(mesh.size):
        src = parts.get(dev, x)
        local = garbage(sh.local_shape(x.shape), x.dtype)
        piece = src[sh.shard_slices(x.shape, dev)]
        local[tuple(slice(0, s) for s in piece.shape)] = piece
        out[dev] = local
    return out


def assemble(locals_, sh, shape, dtype, what="output"):
    """The global array from {device: local}; every device's piece must agree."""
    out = np.zeros(shape, dtype)
    seen = np.zeros(shape, bool)
    for dev in range(sh.mesh.size):
        box = sh.shard_slices(shape, dev)
        sizes = tuple(b.stop - b.start for b in box)
        piece = np.asarray(locals_[dev])[tuple(slice(0, s) for s in sizes)]
        prev = out[box]
        both = seen[box]
        same = (prev == piece) | (np.isnan(prev) & np.isnan(piece) if np.dtype(dtype).kind == "f" else False)
        if not np.all(same | ~both):
            raise AssertionError(f"{what}: device {dev} disagrees with another replica of {box}")
        out[box] = piece
        seen[box] = True
    return out


def run_per_device(pg, mesh, args_per_device):
    exe = compile_graph(pg, "numpy")
    res = _RT.run(exe, mesh, args_per_device)
    return res


def run_partitioned(graph: Graph, args, rng=None):
    """-> (list of global output arrays, the per-device Graph)."""
    mesh = graph.mesh
    pg = partition(graph)
    placed = [place(a, sharding_of(v, mesh), rng) for a, v in zip(args, graph.inputs)]
    per_dev = {d: [p[d] for p in placed] for d in range(mesh.size)}
    res = run_per_device(pg, mesh, per_dev)
    outs = []
    for k, v in enumerate(graph.outputs):
        sh = sharding_of(v, mesh).replace(partial=())
        outs.append(assemble({d: res[d][k] for d in res}, sh, v.shape, v.dtype, f"output {k}"))
    return outs, pg


def reference(graph: Graph, args):
    """The global program on one device (the numpy backend)."""
    return compile_graph(graph, "numpy")([np.asarray(a) for a in args])


def collective_ops(pg):
    return [op for op in pg.ops if op.opdef.family == "collective" and op.name != "axis_index"]


# -- random programs ---------------------------------------------------------------------------
UNARY_F = ("tanh", "negate", "abs", "sin", "logistic")
UNARY_I = ("negate", "abs")
BINARY = ("add", "subtract", "multiply", "maximum", "minimum")


def random_program(rng, dtype, dims, n_ops, constrain=None):
    """A global Graph of 3-4 inputs with dims drawn from `dims`, then n_ops random ops
    (elementwise, dot, reduce, broadcast, transpose, reshape, slice, pad, concatenate,
    select, dynamic_slice, gather, iota, the x[1:] - x[:-1] stencil). -> (graph, args).
    `constrain(v)` -> a spec or None: pin that value's sharding with a sharding_constraint
    (what spmd.shard records), as a user annotation."""
    g = Graph("random")
    isf = np.dtype(dtype).kind == "f"
    pool, args = [], []

    def add_input(shape):
        pool.append(g.add_input(shape, dtype))
        args.append(rng.uniform(-2, 2, size=shape).astype(dtype) if isf
                    else rng.integers(-5, 6, size=shape).astype(dtype))

    a, b, c = (int(rng.choice(dims)) for _ in range(3))
    add_input((a, b))
    add_input((a, b))
    add_input((b, c))
    if rng.random() < 0.5:
        add_input((b,))

    def pick(pred=lambda v: True):
        cands = [v for v in pool if pred(v)]
        return cands[rng.integers(len(cands))] if cands else None

    def const(value, dt):
        return g.emit(CONSTANT, value=np.array(value, dt))

    ops = tries = 0
    while ops < n_ops and tries < 20 * n_ops:
        tries += 1
        kind = rng.choice(["unary", "binary", "binary", "dot", "reduce", "bcast", "transpose", "slice",
                           "pad", "concat", "reshape", "select", "dslice", "gather", "iota", "diff"])
        x = pick()
        out = None
        if kind == "unary":
            out = g.emit(str(rng.choice(UNARY_F if isf else UNARY_I)), x)
        elif kind == "binary":
            out = g.emit(str(rng.choice(BINARY)), x, pick(lambda v: v.shape == x.shape))
        elif kind == "dot" and x.ndim == 2:
            y = pick(lambda v: v.ndim == 2 and v.shape[0] == x.shape[1])
            if y is not None:
                out = g.emit(DOT_GENERAL, x, y, lhs_batch=(), rhs_batch=(), lhs_contract=(1,), rhs_contract=(0,))
                out = g.emit(TANH, out) if isf else out
        elif kind == "reduce" and x.ndim >= 1:
            out = g.emit(REDUCE, x, kind=str(rng.choice(["sum", "max", "min"])), axes=(int(rng.integers(x.ndim)),))
        elif kind == "bcast" and x.ndim == 1:
            n, other = x.shape[0], int(rng.choice(dims))
            shape, bd = ((other, n), (1,)) if rng.random() < 0.5 else ((n, other), (0,))
            out = g.emit(BROADCAST_IN_DIM, x, shape=shape, broadcast_dimensions=bd)
        elif kind == "transpose" and x.ndim == 2:
            out = g.emit(TRANSPOSE, x, permutation=(1, 0))
        elif kind == "slice" and x.ndim >= 1:
            d = int(rng.integers(x.ndim))
            n = x.shape[d]
            if n >= 2:
                st, lim, sd = [0] * x.ndim, list(x.shape), [1] * x.ndim
                st[d] = int(rng.integers(0, n // 2 + 1))
                lim[d] = int(rng.integers(st[d] + 1, n + 1))
                sd[d] = int(rng.choice([1, 1, 2]))
                out = g.emit(SLICE, x, start=tuple(st), limit=tuple(lim), stride=tuple(sd))
        elif kind == "pad" and x.ndim >= 1:
            d = int(rng.integers(x.ndim))
            lo, hi, it = [0] * x.ndim, [0] * x.ndim, [0] * x.ndim
            lo[d], hi[d], it[d] = int(rng.integers(0, 3)), int(rng.integers(0, 3)), int(rng.choice([0, 0, 1]))
            out = g.emit(PAD, x, const(1.5 if isf else 3, dtype), low=tuple(lo), high=tuple(hi), interior=tuple(it))
        elif kind == "concat" and x.ndim >= 1:
            d = int(rng.integers(x.ndim))
            y = pick(lambda v: v.ndim == x.ndim and all(v.shape[k] == x.shape[k] for k in range(x.ndim) if k != d))
            out = g.emit(CONCATENATE, x, y, dimension=d)
        elif kind == "reshape" and x.ndim == 2:
            out = g.emit(RESHAPE, x, shape=(x.shape[0] * x.shape[1],))
        elif kind == "reshape" and x.ndim == 1:
            n = x.shape[0]
            fs = [f for f in (2, 3, 4) if n % f == 0 and n > f]
            if fs:
                f = int(rng.choice(fs))
                out = g.emit(RESHAPE, x, shape=(f, n // f) if rng.random() < 0.5 else (n // f, f))
        elif kind == "select":
            y = pick(lambda v: v.shape == x.shape)
            out = g.emit(SELECT, g.emit(COMPARE, x, y, direction=str(rng.choice(["LT", "GE"]))), x, y)
        elif kind == "dslice" and x.ndim >= 1:
            sizes = tuple(int(rng.integers(1, n + 1)) if n else 0 for n in x.shape)
            starts = [const(int(rng.integers(-1, n + 1)), "int32") for n in x.shape]
            out = g.emit(DYNAMIC_SLICE, x, *starts, slice_sizes=sizes)
        elif kind == "gather" and x.ndim >= 1:
            ax = int(rng.integers(x.ndim))
            if x.shape[ax]:
                idx = g.emit(CONSTANT, value=rng.integers(0, x.shape[ax], size=(int(rng.choice(dims)),)))
                out = g.emit(GATHER, x, idx, axis=ax)
        elif kind == "iota" and x.ndim >= 1:
            out = g.emit(ADD, x, g.emit(IOTA, shape=x.shape, dtype=dtype, dimension=int(rng.integers(x.ndim))))
        elif kind == "diff" and x.ndim >= 1:
            d = int(rng.integers(x.ndim))
            n = x.shape[d]
            if n >= 2:
                one = (1,) * x.ndim
                st1 = tuple(1 if k == d else 0 for k in range(x.ndim))
                lim0 = tuple(n - 1 if k == d else s for k, s in enumerate(x.shape))
                out = g.emit(SUBTRACT, g.emit(SLICE, x, start=st1, limit=x.shape, stride=one),
                             g.emit(SLICE, x, start=(0,) * x.ndim, limit=lim0, stride=one))
        if out is None or out.size > 4096:
            continue
        spec = constrain(out) if constrain else None
        if spec is not None:
            out = g.emit(SHARDING_CONSTRAINT, out, spec=spec, partial=())
        pool.append(out)
        ops += 1
    outs = [pool[-1]] + [pool[int(i)] for i in rng.choice(len(pool), size=min(2, len(pool)), replace=False)]
    g.outputs = list(dict.fromkeys(outs))
    return g, args


def random_sharding(rng, mesh, v, p_partial=0.2):
    """A random valid sharding for Value v: each mesh axis splits some dim (or none);
    sometimes a pending sum over unused axes (not for inputs or bools)."""
    spec = [None] * v.ndim
    free = list(mesh.axis_names)
    rng.shuffle(free)
    for a in list(free):
        if v.ndim and rng.random() < 0.6:
            d = int(rng.integers(v.ndim))
            cur = spec[d]
            spec[d] = a if cur is None else ((cur,) if isinstance(cur, str) else cur) + (a,)
            free.remove(a)
    partial = ()
    if v.dtype != "bool" and v.producer is not None and rng.random() < p_partial:
        partial = tuple(a for a in free if rng.random() < 0.7)
    return Sharding(mesh, spec, partial)


def check_random_jit_program(seed, mesh, even, backend="numpy"):
    """Random annotated program `seed` through jit's real stages (propagate, partition,
    optimise) on `mesh`, compared with single-device numpy: exactly for int64, to 1e-9
    for float64. Shapes divide the mesh evenly when `even`, else they do not."""
    import warnings
    from spmd.compiler.pipeline import lower
    from spmd.jit.lowering import Lowered
    rng = np.random.default_rng(seed)
    dims = (4, 8, 16) if even else (3, 5, 7, 9)
    dtype = "int64" if seed % 3 == 0 else "float64"

    def constrain(v):
        return random_sharding(rng, mesh, v, p_partial=0).spec if rng.random() < 0.2 else None

    g, args = random_program(rng, dtype, dims, int(rng.integers(5, 31)), constrain)
    g.mesh = mesh
    in_sh = [random_sharding(rng, mesh, v) if rng.random() < 0.5 else None for v in g.inputs]
    want = reference(g, args)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        low = Lowered(lower(g, mesh, in_sh, [None] * len(g.outputs))[0], None, None, backend, mesh)
        got = low(*args)
    for k, (w, r) in enumerate(zip(want, got)):
        msg = f"output {k} of seed {seed} on {mesh.text()}:\n{low.as_text('propagated')}"
        if dtype == "int64":
            np.testing.assert_array_equal(r.numpy(), w, err_msg=msg)
        else:
            np.testing.assert_allclose(r.numpy(), w, rtol=1e-9, atol=1e-9, err_msg=msg)
