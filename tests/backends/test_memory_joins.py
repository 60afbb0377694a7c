"""Joins in the memory plan (backends/llvm/memory.py, point 4): a concatenation's operands
computed in their place in its buffer, each part of that buffer held from the step that
writes it, so what dies before a part is written may use its bytes (a gradient bucket:
the backward pass's activations in the place of the gradients still to come). Checked
on the plan's figures and, run twice (the arena is kept between calls), against numpy."""
import numpy as np
from hypothesis import given, settings, strategies as st

from spmd.backends import compile_graph
from spmd.backends.llvm import compile_llvm
from spmd.backends.llvm.memory import ALIGN, first_fit
from spmd.ir import Graph
from spmd.ir.ops.names import (
    ALL_REDUCE, CONCATENATE, DOT_GENERAL, EXP, NEGATE, REDUCE, RESHAPE, SLICE, SUBTRACT, TANH
)
from spmd.transports.local.local_runtime import LocalRuntime
from spmd.sharding import Mesh

F8 = 8
MESH = Mesh((2,), ("x",))


def dot(g, a, b):
    return g.emit(DOT_GENERAL, a, b, lhs_batch=(), rhs_batch=(), lhs_contract=(1,), rhs_contract=(0,))


def flat(g, v):
    return g.emit(RESHAPE, v, shape=(v.size,))


def bucket(g, *parts):
    """The parts flattened, joined and all-reduced over a mesh axis "x" of 2 (a gradient
    bucket: the join is a step of its own, which the all_reduce then overwrites)."""
    c = g.emit(CONCATENATE, *[flat(g, p) for p in parts], dimension=0)
    return c, g.emit(ALL_REDUCE, c, axes=("x",), reduction="sum", group_size=2)


# one runtime for the module: each runtime keeps its device threads
RT = LocalRuntime()


def check(g, args, tol=1e-12):
    """The LLVM executable on the two devices of MESH (twice: the arena is kept between
    calls) against the numpy backend's, each device with its own inputs."""
    rng = np.random.default_rng(len(g.ops))
    per = {d: [a * (1 + d) + rng.standard_normal(a.shape) / 8 for a in args] for d in range(MESH.size)}
    want = RT.run(compile_graph(g, "numpy"), MESH, {d: [a.copy() for a in v] for d, v in per.items()})
    exe = compile_llvm(g)
    for _ in range(2):
        got = RT.run(exe, MESH, {d: [a.copy() for a in v] for d, v in per.items()})
        for d in range(MESH.size):
            for k, (w, r) in enumerate(zip(want[d], got[d])):
                np.testing.assert_allclose(r, w, rtol=tol, atol=tol, err_msg=f"output {k}:\n{g}\n{exe.plan}")
    return exe


def test_a_bucket_is_held_part_by_part():
    """g1 is made first, then u and v (each dying at the next dot), then g2 over v, and
    both are joined: u dies before g2's part is written, so it lives there. v is read
    while g2 is written, and dies before the output is written: it lives in the output's
    buffer. The arena is g1 and g2, not the bucket from g1 on plus u and v."""
    n = 16
    g = Graph()
    x, w = g.add_input((n, n), "float64"), g.add_input((n, n), "float64")
    g1 = dot(g, x, w)
    u = g.emit(EXP, dot(g, w, x))
    v = dot(g, u, w)
    g2 = dot(g, v, x)
    c, r = bucket(g, g1, g2)
    g.outputs = [g.emit(SUBTRACT, g.emit(SLICE, r, start=(0,), limit=(n * n,), stride=(1,)),
                        g.emit(SLICE, r, start=(n * n,), limit=(2 * n * n,), stride=(1,)))]
    rng = np.random.default_rng(0)
    exe = check(g, [rng.standard_normal((n, n)) / 4 for _ in range(2)])
    mem = exe.memory
    assert mem.joined.get(c) == {0, 1}, mem.joined
    block = n * n * F8
    assert mem.offset_of[g1] == mem.offset_of[c] and mem.offset_of[g2] == mem.offset_of[c] + block
    assert mem.peak_bytes == mem.arena_bytes == 2 * block, mem
    assert mem.offset_of[u] == mem.offset_of[g2], mem.offset_of
    assert mem.in_outputs == {v: (g.outputs[0], 0)}, mem.in_outputs
    # the profile holds each part from its own write too: the bucket is not live before g1
    # (besides what the native schedule holds: its scratch, mailboxes, argument blocks)
    prof = exe.memory_profile()
    assert prof.temporary_bytes - prof.scratch_bytes == 2 * block, prof.report()


def test_a_part_is_never_shared_with_what_its_step_reads():
    """v is read by the dot writing g2's part: v must not sit in that part."""
    n = 8
    g = Graph()
    x, w = g.add_input((n, n), "float64"), g.add_input((n, n), "float64")
    g1 = dot(g, x, w)
    v = g.emit(TANH, dot(g, w, w))
    g2 = dot(g, v, x)
    c, r = bucket(g, g1, g2)
    g.outputs = [g.emit(TANH, r)]
    rng = np.random.default_rng(1)
    exe = check(g, [rng.standard_normal((n, n)) for _ in range(2)])
    (hv, ov), (hg, og), block = exe.memory.place(v), exe.memory.place(g2), n * n * F8
    assert hv is not hg or not (ov < og + block and og < ov + block), (exe.memory.place(v), exe.memory.place(g2))


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2 ** 31 - 1))
def test_random_buckets_over_a_backward_pass_match_numpy(seed):
    """Random chains of dots and elementwise ops, with 'gradients' (dots) taken at random
    points and joined at the end, some of them (or an input, or a value read later) as
    operands the join copies; outputs read the join whole and in slices."""
    rng = np.random.default_rng(seed)
    n = int(rng.choice([3, 8, 16]))
    g = Graph()
    x, w = g.add_input((n, n), "float64"), g.add_input((n, n), "float64")
    pool, grads = [dot(g, x, w)], []
    for _ in range(int(rng.integers(2, 12))):
        a = pool[rng.integers(len(pool))]
        r = rng.random()
        if r < 0.3:
            pool.append(dot(g, a, pool[rng.integers(len(pool))] if rng.random() < 0.5 else w))
        elif r < 0.55:
            pool.append(g.emit(str(rng.choice(["tanh", "negate", "sin"])), a))
        elif r < 0.75:
            pool.append(g.emit(str(rng.choice(["add", "multiply", "maximum"])), a, pool[rng.integers(len(pool))]))
        else:
            grads.append(dot(g, x if rng.random() < 0.5 else a, a))
    grads.append(dot(g, pool[-1], x))
    parts = list(grads)
    if rng.random() < 0.3:
        parts.insert(int(rng.integers(len(parts) + 1)), w)
    later = pool[rng.integers(len(pool))] if rng.random() < 0.3 else None
    if later is not None:
        parts.insert(int(rng.integers(len(parts) + 1)), later)
    c, red = bucket(g, *parts)
    outs = []
    at = 0
    for p in parts:
        s = g.emit(SLICE, red, start=(at,), limit=(at + p.size,), stride=(1,))
        outs.append(g.emit(TANH, g.emit(RESHAPE, s, shape=p.shape)))
        at += p.size
    if later is not None:
        outs.append(g.emit(EXP, later))
    g.outputs = outs
    check(g, [rng.standard_normal((n, n)) / 4 for _ in range(2)], tol=1e-10)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 12), st.integers(0, 12),
                          st.lists(st.tuples(st.integers(0, 300), st.integers(0, 12)), min_size=1, max_size=4)),
                min_size=1, max_size=12))
def test_first_fit_never_overlaps_parts_live_together(groups):
    """Groups of parts (offset in the group, bytes, live range) placed by first_fit: no two
    parts of different groups live at the same step share a byte; offsets are aligned."""
    temps = []
    for gid, (s, e, raw) in enumerate(groups):
        s, e = min(s, e), max(s, e)
        parts, at = [], 0
        for size, start in raw:
            ps = min(max(s, start), e)
            parts.append((at, size, ps, e))
            at += size
        temps.append((gid, min(p[2] for p in parts), e, at, parts))
    placed = {gid: off for _, _, off, _, gid in first_fit(temps)}
    spans = [(gid, placed[gid] + o, placed[gid] + o + n, ps, pe)
             for gid, *_, parts in temps for o, n, ps, pe in parts if n]
    for i, (g1, lo1, hi1, s1, e1) in enumerate(spans):
        assert placed[g1] % ALIGN == 0
        for g2, lo2, hi2, s2, e2 in spans[i + 1:]:
            if g1 != g2 and not (e1 < s2 or e2 < s1):
                assert hi1 <= lo2 or hi2 <= lo1, (spans, placed)


def test_empty_temporaries_are_placed():
    """A temporary of no elements is a group of no bytes: it still gets a place."""
    g = Graph()
    x = g.add_input((0,), "float32")
    d = dot(g, g.emit(RESHAPE, x, shape=(0, 1)), g.emit(RESHAPE, x, shape=(1, 0)))
    t = g.emit(TANH, g.emit(RESHAPE, d, shape=(0,)))
    g.outputs = [g.emit(EXP, t), g.emit(NEGATE, t), g.emit(REDUCE, t, axes=(0,), kind="sum")]
    exe = compile_llvm(g)
    args = [np.zeros((0,), np.float32)]
    for w, r in zip(compile_graph(g, "numpy")(args), exe(args)):
        np.testing.assert_array_equal(r, w)


def test_an_mlp_steps_bucket_takes_its_bytes_as_its_gradients_are_made():
    """The SGD step of a 2-layer MLP on a (data, model) mesh: both weight gradients (and
    the loss) go in one bucket, reduced over data. The arena is the two gradients and the
    one value the last gradient's dot reads (the hidden layer's gradient): the backward
    pass's other activations live in the second gradient's place until it is made."""
    import spmd
    B, din, dh, dout = 64, 64, 256, 64
    rng = np.random.default_rng(0)
    p = {"w1": (rng.standard_normal((din, dh)) / 8).astype(np.float32),
         "w2": (rng.standard_normal((dh, dout)) / 16).astype(np.float32)}
    x, y = (rng.standard_normal((B, n)).astype(np.float32) for n in (din, dout))

    def loss(p, x, y):
        return np.mean((np.maximum(x @ p["w1"], 0) @ p["w2"] - y) ** 2)

    def step(p, x, y):
        value, g = spmd.value_and_grad(loss)(p, x, y)
        return value, {k: p[k] - np.float32(0.01) * g[k] for k in p}

    mesh = spmd.Mesh((2, 2), ("data", "model"))
    rows = mesh.sharding("data", None)
    specs = ({"w1": mesh.sharding(None, "model"), "w2": mesh.sharding("model", None)}, rows, rows)
    low = spmd.jit(step, in_shardings=specs).lower(p, x, y)
    assert len(low.compile().memory.joined) == 1
    grad, dhidden = din * dh // 2 * 4, B // 2 * dh // 2 * 4
    # (the arena: temporary_bytes adds what the native schedule holds besides, its
    # all-reduce mailboxes and the buffers a segment makes when it starts)
    assert low.memory()["temp_bytes"] <= 2 * grad + dhidden + 64, low.memory()
    got = [np.asarray(a) for a in spmd.tree.tree_flatten(spmd.jit(step, in_shardings=specs)(p, x, y))[0]]
    want = [np.asarray(a) for a in spmd.tree.tree_flatten(
        spmd.jit(step, in_shardings=specs, backend="numpy")(p, x, y))[0]]
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
