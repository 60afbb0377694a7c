"""Recomputing instead of holding (compiler/passes/remat.py), and its FSDP use: weights
split over data gathered again before each use (passes/regather.py).

A recomputed value must be the same bits as the one it replaces, so every case also
runs and compares with the program as it was (and with numpy)."""
import numpy as np
from hypothesis import given, settings, strategies as st

import spmd
from partition_util import random_program
from spmd.backends import compile_graph
from spmd.compiler.passes import rematerialize, regather
from spmd.ir import Graph
from spmd.ir.ops.names import (ADD, ALL_GATHER, ALL_REDUCE_DONE, ALL_REDUCE_START, DOT_GENERAL, EXP,
                                NOT, TANH)


def _run(g, args, backend="numpy"):
    return compile_graph(g, backend)([np.asarray(a) for a in args])


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), dtype=st.sampled_from(["float32", "int32"]))
def test_recomputed_values_are_the_same_bits(seed, dtype):
    """Any values, recomputed before any later positions: the program's results are the
    same bits, and the copies are there (the op count grows by one per recomputation)."""
    rng = np.random.default_rng(seed)
    g, args = random_program(rng, dtype, (2, 3, 4, 6), 10)
    made = [op.results[0] for op in g.ops if len(op.results) == 1]
    where = {}
    for v in rng.permutation(len(made))[:4]:
        v = made[int(v)]
        after = [q for q, op in enumerate(g.ops) if q > g.ops.index(v.producer)]
        if after:
            where[v] = sorted({int(q) for q in rng.choice(after, size=min(2, len(after)), replace=False)})
    r = rematerialize(g, where)
    assert len(r.ops) == len(g.ops) + sum(len(ps) for ps in where.values())
    for a, b in zip(_run(g, args), _run(r, args)):
        np.testing.assert_array_equal(a, b)


def test_a_recomputed_value_frees_its_buffer_in_between():
    """x -> e = exp(x); a long chain of other work; then e read again. Recomputed before
    the late read, e's buffer is free during the chain: the plan's peak drops."""
    g = Graph()
    x = g.add_input((256, 256), "float32")
    e = g.emit(EXP, x)
    w = g.emit(DOT_GENERAL, e, x, lhs_batch=(), rhs_batch=(), lhs_contract=(1,), rhs_contract=(0,))
    for _ in range(3):
        w = g.emit(DOT_GENERAL, g.emit(TANH, w), x, lhs_batch=(), rhs_batch=(), lhs_contract=(1,),
                   rhs_contract=(0,))
    late = len(g.ops)
    g.outputs = [g.emit(ADD, w, e)]
    r = rematerialize(g, {e: [late]})
    xs = [np.linspace(-1, 1, 256 * 256, dtype=np.float32).reshape(256, 256) / 8]
    np.testing.assert_array_equal(_run(g, xs, "llvm")[0], _run(r, xs, "llvm")[0])
    from spmd.backends.llvm import compile_llvm
    assert compile_llvm(r).memory_profile().peak_bytes < compile_llvm(g).memory_profile().peak_bytes


def test_a_started_collectives_halves_are_never_made_again():
    """A done read late is held, never recomputed: made again, it would read a start made
    again, and the first start would stay in flight, finished by no rank (the memory
    limit's fit did this to train_gpt's error flag, and the next run on the mesh hung)."""
    from spmd.compiler.passes.remat import Uses, chain
    g = Graph()
    g.mesh = spmd.Mesh((2,), ("data",))
    x = g.add_input((64, 64), "float32")
    flag = g.add_input((), "bool")
    h = g.emit(ALL_REDUCE_START, flag, axes=("data",), reduction="max", group_size=2)
    d = g.emit(ALL_REDUCE_DONE, h, flag, axes=("data",), reduction="max", group_size=2)
    w = x
    for _ in range(3):
        w = g.emit(DOT_GENERAL, g.emit(TANH, w), x, lhs_batch=(), rhs_batch=(), lhs_contract=(1,),
                   rhs_contract=(0,))
    late = len(g.ops)
    g.outputs = [w, g.emit(NOT, d)]
    uses = Uses(g)
    assert chain(d, late, uses) is None and chain(h, late, uses) is None
    e = g.emit(EXP, x)          # (what is not a half still is made again)
    assert chain(e, late, Uses(g)) == [e]


# -- FSDP: parameters and optimizer state split over data ------------------------------------
L, D, B = 4, 128, 1024


def _mlp(mesh):
    def loss_fn(p, x, y):
        h = x
        for w in p:
            h = np.maximum(h @ w, 0)
        return np.mean((h - y) ** 2)

    def step(p, x, y):
        loss, g = spmd.value_and_grad(loss_fn)(p, x, y)
        return loss, [w - np.float32(0.1) * gw for w, gw in zip(p, g)]
    row = mesh.sharding("data", None)
    return spmd.jit(step, in_shardings=([row] * L, row, row)), loss_fn


def _inputs():
    rng = np.random.default_rng(0)
    p = [(rng.standard_normal((D, D)) / np.sqrt(D)).astype(np.float32) for _ in range(L)]
    return p, rng.standard_normal((B, D)).astype(np.float32), rng.standard_normal((B, D)).astype(np.float32)


def test_fsdp_gathers_each_weight_again_for_the_backward_pass():
    """Weights, batch and gradients split over data on 4 devices: each weight is
    all-gathered for its forward use and again for its backward use (the last layer's
    forward and backward uses are adjacent: kept; the first layer's input needs no
    gradient: no backward use), the gradients are reduce-scattered, and at the peak at
    most two gathered weights are live. The step is the numpy step's."""
    spmd.init(backend="local", num_devices=4)
    mesh = spmd.Mesh((4,), ("data",))
    f, loss_fn = _mlp(mesh)
    p, x, y = _inputs()
    low = f.lower(p, x, y)
    text = low.as_text("optimized")
    assert text.count("all_gather(") == L + (L - 2), text
    assert text.count("reduce_scatter(") == L
    assert low.as_text("hoist").count("all_gather(") == L          # before the pass: each gathered once
    live = low.memory()["peak"]["live"]
    assert sum(r["op"] == "all_gather" for r in live) <= 2, live
    loss, new = f(p, x, y)

    def grads(p):                                    # numpy's gradient of the same loss, by hand
        hs, h = [x], x
        for w in p:
            h = np.maximum(h @ w, 0)
            hs.append(h)
        d = 2 * (h - y) / h.size
        out = []
        for i in reversed(range(L)):
            d = d * (hs[i + 1] > 0)
            out.append(hs[i].T @ d)
            d = d @ p[i].T
        return out[::-1]
    np.testing.assert_allclose(float(loss), loss_fn(p, x, y), rtol=1e-5)
    for w, gw, got in zip(p, grads(p), new):
        np.testing.assert_allclose(got.numpy(), w - 0.1 * gw, rtol=1e-4, atol=1e-6)


def test_regather_leaves_a_weight_alone_when_nothing_else_is_gathered_in_between():
    g = Graph()
    w, x = g.add_input((32, 128), "float32"), g.add_input((64, 128), "float32")
    full = g.emit(ALL_GATHER, w, axes=("data",), dimension=0, group_size=4)
    a = g.emit(DOT_GENERAL, x, full, lhs_batch=(), rhs_batch=(), lhs_contract=(1,), rhs_contract=(0,))
    b = g.emit(DOT_GENERAL, g.emit(TANH, a), full, lhs_batch=(), rhs_batch=(), lhs_contract=(1,),
               rhs_contract=(1,))
    g.outputs = [b]
    assert regather(g) is g


# -- cheap values made again where read late (passes/late_reads.py) ----------------------------
def test_a_gelu_layer_holds_its_matmul_result_alone_for_the_backward_pass():
    """gelu(h @ w) layers: the backward pass reads the activation (for the next layer's
    weight gradient), the tanh and the pre-activation; made again from the pre-activation
    where read, only that is held: one value per layer at the peak. Same bits as the
    program that holds them all."""
    def gelu(x):
        return 0.5 * x * (1 + np.tanh(0.7978845608 * (x + 0.044715 * x ** 3)))

    def loss(ws, x):
        h = x
        for w in ws:
            h = gelu(h @ w)
        return np.mean(h ** 2)
    rng = np.random.default_rng(0)
    ws = [(rng.standard_normal((128, 128)) / 12).astype(np.float32) for _ in range(5)]
    x = rng.standard_normal((256, 128)).astype(np.float32)
    low = spmd.jit(spmd.value_and_grad(loss)).lower(ws, x)
    held = [r for r in low.memory()["peak"]["live"] if r["kind"] == "activations"]
    assert len(held) <= 5 and sum(r["op"] == "dot_general" for r in held) >= 4, held
    before, after = low.stages["regather"], low.stages["late_reads"]
    assert len(after.ops) > len(before.ops)
    for a, b in zip(_run(before, ws + [x], "llvm"), _run(after, ws + [x], "llvm")):
        np.testing.assert_array_equal(a, b)


def test_a_ghost_layer_made_again_reads_its_halos_and_exchanges_once():
    """A 2-D Jacobi sweep on 2x2: the ghost layer (x's chunk with its row halos) is read
    by the column exchange and, after it, by the stencil; made again there, it is made
    from the row halos received once, not exchanged again: the compiled program moves
    the bytes the partitioner planned, a halo a sweep."""
    def jacobi(u, steps):
        for _ in range(steps):
            u[1:-1, 1:-1] = 0.25 * (u[2:, 1:-1] + u[:-2, 1:-1] + u[1:-1, 2:] + u[1:-1, :-2])
        return u

    mesh = spmd.Mesh((2, 2), ("x", "y"))
    low = spmd.jit(jacobi, in_shardings=(mesh.sharding("x", "y"),), static_argnums=(1,)).lower(
        spmd.ShapeDtype((512, 512), np.float64), 2)
    before, after = low.stages["regather"], low.stages["late_reads"]
    assert len(after.ops) > len(before.ops)          # (the ghost layer is made again)
    permutes = [op for op in after.ops if op.opdef.collective.exchange]
    assert len(permutes) == 8, len(permutes)
    r = low.report()
    assert r["launched_bytes"] == r["comm_bytes"] == r["bytes_per_run"]
