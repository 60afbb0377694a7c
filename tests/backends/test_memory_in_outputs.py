"""Temporaries computed in an output's buffer before the output is written (the memory
plan's point 5, backends/llvm/memory.py), as XLA's buffer assignment does: where it
happens, where it must not (the temporary is read at or after the output's first write,
also through a view; the output is an argument's buffer or returned twice; a loop's
body), and random programs against numpy. Each program runs on the two devices of a
local runtime, twice (a second call must not write into the first call's outputs), the
native schedule and step by step from Python."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import spmd
from spmd.backends import compile_graph
from spmd.backends.llvm import compile_llvm
from spmd.backends.llvm.lowering_table import writes_into
from spmd.ir import Graph
from spmd.ir.ops.names import (
    ADD, CONCATENATE, CUMULATIVE, DOT_GENERAL, EXP, MULTIPLY, NEGATE, SUBTRACT, TANH, TRANSPOSE
)
from spmd.transports.local.local_runtime import LocalRuntime
from spmd.sharding import Mesh

F8 = 8
MESH = Mesh((2,), ("x",))
# one runtime for the module: each runtime keeps its device threads
RT = LocalRuntime()


def dot(g, a, b):
    return g.emit(DOT_GENERAL, a, b, lhs_batch=(), rhs_batch=(), lhs_contract=(1,), rhs_contract=(0,))


def nbytes(v):
    return v.size * np.dtype(v.dtype).itemsize


def live_ranges(exe):
    """value -> (the step writing it, the last step reading it or anything that may alias
    it), worked out from the steps alone: a result the plan does not place may be a view
    of every operand (so reading it reads them)."""
    define, last, parents = {}, {}, {}
    for k, step in enumerate(exe.steps):
        kern = getattr(step, "kernel", None)
        reads = list(kern.inputs) if kern is not None else list(step.operands)
        results = list(kern.outputs) if kern is not None else list(step.results)
        for v in reads:
            last[v] = k
        for r in results:
            define[r] = k
            if kern is None and not writes_into(step):
                parents[r] = reads
    n = len(exe.steps)
    for v in exe.graph.outputs:
        last[v] = n

    def ends(v, seen):
        # the last read of v or of anything made from it without a buffer of its own
        e = last.get(v, define.get(v, -1))
        for r, ps in parents.items():
            if v in ps and r not in seen:
                seen.add(r)
                e = max(e, ends(r, seen))
        return e
    return {v: (define[v], ends(v, {v})) for v in define}


def assert_sound(exe):
    """Every temporary in an output's buffer fits it, is dead before the output's buffer is
    first written, and shares no byte with another temporary there live at the same time."""
    mem, g = exe.memory, exe.graph
    rng = live_ranges(exe)
    first_write = {}
    for v in g.outputs:
        u = v
        while u in mem.in_place:
            u = mem.in_place[u]
        first_write[u] = rng[u][0] if u in rng else -1
    spans = []
    for v, (h, off) in mem.in_outputs.items():
        assert h in first_write, (v, h)                     # the buffer is an output's
        assert h not in g.inputs and g.outputs.count(h) <= 1
        assert 0 <= off and off + nbytes(v) <= nbytes(h), (v, h, off)
        s, e = rng[v]
        assert e < first_write[h], (v, h, rng[v], first_write[h])
        spans.append((h, off, off + nbytes(v), s, e, v))
    for i, (h, a, b, s, e, v) in enumerate(spans):
        for h2, a2, b2, s2, e2, v2 in spans[i + 1:]:
            if h is not h2 or mem.in_place.get(v) is v2 or mem.in_place.get(v2) is v:
                continue
            assert b <= a2 or b2 <= a or e < s2 or e2 < s, (v, v2, spans)


def check(g, args, donated=(), monkeypatch=None, tol=1e-12):
    """The LLVM executable on the two devices of MESH against the numpy backend's, each
    device with its own inputs, and bit for bit against the same program planned without
    temporaries in outputs; twice (the first call's outputs unchanged by the second), and
    with monkeypatch step by step from Python too."""
    rng = np.random.default_rng(len(g.ops))
    per = {d: [a * (1 + d) + rng.standard_normal(a.shape) / 8 for a in args] for d in range(MESH.size)}
    copy = lambda: {d: [a.copy() for a in v] for d, v in per.items()}   # noqa: E731
    want = RT.run(compile_graph(g, "numpy"), MESH, copy())
    exact = RT.run(compile_llvm(g, donated=donated, in_outputs=False), MESH, copy())
    exe = compile_llvm(g, donated=donated)
    assert_sound(exe)
    modes = ["1", "0"] if monkeypatch is not None else ["1"]
    for mode in modes:
        if monkeypatch is not None:
            monkeypatch.setenv("SPMD_NATIVE", mode)
        first = RT.run(exe, MESH, copy())
        kept = {d: [np.array(x, copy=True) for x in first[d]] for d in first}
        second = RT.run(exe, MESH, copy())
        for got in (first, second):
            for d in range(MESH.size):
                for k, (w, e, r) in enumerate(zip(want[d], exact[d], got[d])):
                    np.testing.assert_allclose(r, w, rtol=tol, atol=tol, err_msg=f"output {k}:\n{g}\n{exe.plan}")
                    np.testing.assert_array_equal(r, e, err_msg=f"output {k}:\n{g}\n{exe.plan}")
        for d in range(MESH.size):
            for a, b in zip(first[d], kept[d]):
                np.testing.assert_array_equal(a, b)       # each call its own output buffers
    return exe


def rand(*shapes, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s) / 4 for s in shapes]


# ------------------------------------------------------------------ where it happens
def test_a_dead_temporary_is_computed_in_the_output_buffer(monkeypatch):
    """d and its tanh die at the second dot; the output is written last: d lives in the
    output's buffer, and the arena holds only b (read by the output's dot)."""
    n = 16
    g = Graph()
    x, w = g.add_input((n, n), "float64"), g.add_input((n, n), "float64")
    d = dot(g, x, w)
    b = dot(g, g.emit(TANH, d), w)
    out = dot(g, g.emit(EXP, b), w)
    g.outputs = [out]
    exe = check(g, rand((n, n), (n, n)), monkeypatch=monkeypatch)
    mem = exe.memory
    assert mem.in_outputs.get(d) == (out, 0), mem.in_outputs
    assert mem.hosts == (out,)
    assert mem.arena_bytes == mem.peak_bytes == n * n * F8, mem
    prof = exe.memory_profile()
    rep = prof.report()
    assert rep["temporary_bytes"] == n * n * F8, rep
    assert [r["output"] for r in rep["temporaries_in_outputs"]] == [out.name or ""]
    assert rep["temporaries_in_outputs"][0]["op"] == "dot_general"
    assert exe.memory.report()["in_outputs"] == len(mem.in_outputs)
    # the output's buffer is made before the first step: live from there in the profile
    assert next(bf for bf in prof.buffers if bf.values[-1][1] is out).start == 0


@pytest.mark.parametrize("native", ["1", "0"])
def test_a_run_allocates_its_outputs_and_nothing_more(native, monkeypatch):
    """The temporary in the output's buffer is no array of its own: past the first call
    (which makes the arena), a call allocates the output and little else (tracemalloc sees
    numpy's allocations), not the output and the temporary."""
    import tracemalloc
    monkeypatch.setenv("SPMD_NATIVE", native)
    n = 128
    g = Graph()
    x, w = g.add_input((n, n), "float64"), g.add_input((n, n), "float64")
    d = dot(g, x, w)
    b = dot(g, g.emit(TANH, d), w)
    g.outputs = [dot(g, g.emit(EXP, b), w)]
    exe = compile_llvm(g)
    assert d in exe.memory.in_outputs
    args = rand((n, n), (n, n), seed=8)
    exe(args)
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        out = exe(args)
        grew = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    assert n * n * F8 <= grew < 1.25 * n * n * F8, grew
    b_ = np.tanh(args[0] @ args[1]) @ args[1]
    np.testing.assert_allclose(out[0], np.exp(b_) @ args[1], rtol=1e-10)


def test_temporaries_share_an_output_buffer_by_their_live_ranges(monkeypatch):
    """Three activations one after another, each dead before the next is made: all three
    in the one output's buffer, at the same place; two live together (a and b, summed by
    an elementwise kernel): side by side in a buffer big enough for both."""
    n = 8
    g = Graph()
    x, w = g.add_input((n, n), "float64"), g.add_input((n, n), "float64")
    a = dot(g, x, w)
    b = dot(g, w, x)
    c = dot(g, g.emit(ADD, g.emit(TANH, a), b), w)
    d = dot(g, g.emit(TANH, c), w)
    last = dot(g, g.emit(TANH, d), w)
    big = g.emit(CONCATENATE, *[g.emit(EXP, last)] * 2, dimension=0)     # (2n, n): room for two
    g.outputs = [g.emit(TANH, big)]
    exe = check(g, rand((n, n), (n, n), seed=1), monkeypatch=monkeypatch)
    mem, out, block = exe.memory, g.outputs[0], n * n * F8
    assert {mem.in_outputs[a], mem.in_outputs[b]} == {(out, 0), (out, block)}, mem.in_outputs
    assert mem.in_outputs[c][0] is out and mem.in_outputs[d][0] is out, mem.in_outputs
    assert mem.arena_bytes == block and last in mem.offset_of, mem


def test_a_temporary_read_between_segments_is_read_in_the_output_buffer(monkeypatch):
    """a, in the output's buffer, is written by the first native segment and read by a step
    run from Python (a cumulative sum) before the output's own segment: each reads it in
    the buffer made for the output at the start of the run."""
    n = 16
    g = Graph()
    x, w = g.add_input((n, n), "float64"), g.add_input((n, n), "float64")
    a = dot(g, x, w)
    t = g.emit(EXP, g.emit(NEGATE, g.emit(MULTIPLY, a, a)))
    c = g.emit(CUMULATIVE, a, kind="sum", axis=1, reverse=False)
    out = g.emit(TANH, dot(g, dot(g, t, c), w))
    g.outputs = [out]
    exe = check(g, rand((n, n), (n, n), seed=9), monkeypatch=monkeypatch)
    host = exe.memory.in_place.get(out, out)            # (the dot, tanh in place over it)
    assert exe.memory.in_outputs.get(a) == (host, 0), exe.memory.in_outputs
    assert sum(not isinstance(it, int) for it in exe.schedule(1).items) == 2     # two native segments


# ------------------------------------------------------------------ where it must not
def test_not_what_the_step_writing_the_output_reads():
    """t is read by the dot that writes the only output: t stays in the arena."""
    n = 16
    g = Graph()
    x, w = g.add_input((n, n), "float64"), g.add_input((n, n), "float64")
    t = g.emit(TANH, dot(g, x, w))
    out = dot(g, t, w)
    g.outputs = [out]
    exe = check(g, rand((n, n), (n, n), seed=2))
    assert exe.memory.place(t)[0] is None, exe.memory.place(t)


def test_not_what_a_view_reads_after_the_output_is_written():
    """t's transpose (a view, read where t is) is read by a dot after the first output is
    written: t may not live in that output's buffer."""
    n = 16
    g = Graph()
    x, w = g.add_input((n, n), "float64"), g.add_input((n, n), "float64")
    t = dot(g, x, w)
    tt = g.emit(TRANSPOSE, t, permutation=(1, 0))
    o1 = dot(g, x, x)
    o2 = dot(g, tt, w)
    g.outputs = [o1, o2]
    exe = check(g, rand((n, n), (n, n), seed=3))
    assert t not in exe.memory.in_outputs, exe.memory.in_outputs


def test_not_in_an_argument_written_in_place_nor_an_output_returned_twice():
    """The outputs: w updated in its donated buffer (which holds w until then), x as it
    came in, and one value twice: none of their buffers is free before they are written."""
    n = 16
    g = Graph()
    x, w = g.add_input((n, n), "float64"), g.add_input((n, n), "float64")
    t = g.emit(TANH, dot(g, x, w))
    u = dot(g, t, x)
    twice = g.emit(EXP, dot(g, u, x))
    new_w = g.emit(SUBTRACT, w, g.emit(TANH, dot(g, twice, x)))
    g.outputs = [new_w, x, twice, twice]
    exe = check(g, rand((n, n), (n, n), seed=4), donated=(1,))
    mem = exe.memory
    assert mem.in_place.get(new_w) is w
    assert not mem.in_outputs and not mem.hosts, mem.in_outputs


def test_not_in_a_loop_body():
    """A scan's body (an activation dead before its carried result is written) plans no
    temporary in its outputs: the loop gives the body the buffers its results go into."""
    rng = np.random.default_rng(5)
    w = rng.standard_normal((8, 8)) / 4
    c0 = rng.standard_normal((4, 8))
    xs = rng.standard_normal((3, 4, 8))

    def f(c, xs, w):
        def body(c, x):
            h = np.tanh(c @ w)
            return np.exp(-(h @ w) ** 2) + x, h.sum()
        return spmd.scan(body, c, xs)
    want = f(c0.copy(), xs.copy(), w)
    low = spmd.jit(f).lower(c0, xs, w)
    exe = low.compile()
    bodies = list(exe.subprograms.values())
    assert bodies and all(not b.memory.in_outputs and not b.plan.in_outputs for b in bodies)
    got = spmd.jit(f)(c0.copy(), xs.copy(), w)
    for a, b in zip(got, want):
        np.testing.assert_allclose(np.asarray(a), b, rtol=1e-12)


# ------------------------------------------------------------------ random programs
@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2 ** 31 - 1))
def test_random_programs_with_outputs_written_late_match_numpy(seed):
    """Random chains of dots, elementwise ops and views; outputs of several sizes made at
    random points (late ones leave room for the chain's temporaries), some of them an
    input, a view, a value returned twice or an argument updated in its donated buffer."""
    rng = np.random.default_rng(seed)
    n = int(rng.choice([3, 8, 16]))
    g = Graph()
    x, w = g.add_input((n, n), "float64"), g.add_input((n, n), "float64")
    pool, outs = [dot(g, x, w)], []
    for _ in range(int(rng.integers(3, 14))):
        a = pool[rng.integers(len(pool))]
        r = rng.random()
        if r < 0.3:
            pool.append(dot(g, a, pool[rng.integers(len(pool))] if rng.random() < 0.5 else w))
        elif r < 0.55:
            pool.append(g.emit(str(rng.choice(["tanh", "negate", "sin"])), a))
        elif r < 0.7:
            pool.append(g.emit(ADD, a, pool[rng.integers(len(pool))]))
        elif r < 0.8:
            pool.append(g.emit(TRANSPOSE, a, permutation=(1, 0)))
        elif r < 0.9:
            outs.append(g.emit(EXP, dot(g, a, x)))
        else:
            outs.append(g.emit(CONCATENATE, a, g.emit(TANH, a), dimension=0))
    outs.append(g.emit(TANH, dot(g, pool[-1], w)))
    if rng.random() < 0.3:
        outs.append(outs[int(rng.integers(len(outs)))])
    if rng.random() < 0.2:
        outs.append(x)
    if rng.random() < 0.2:
        outs.append(g.emit(TRANSPOSE, pool[int(rng.integers(len(pool)))], permutation=(1, 0)))
    donated = ()
    if rng.random() < 0.4:
        outs.append(g.emit(SUBTRACT, w, g.emit(TANH, dot(g, outs[-1] if outs[-1].shape == (n, n)
                                                               else pool[-1], x))))
        donated = (1,)
    g.outputs = outs
    check(g, rand((n, n), (n, n), seed=seed % 1000), donated=donated, tol=1e-10)


def test_a_training_step_plans_the_arena_without_what_its_new_weights_hold():
    """An MLP step on one device (the benchmark's shape, small): what lives in the new
    weights' buffers before they are written is not in the arena's figures, and the report
    names it; the step equals numpy's."""
    rng = np.random.default_rng(6)
    p = {"w1": rng.standard_normal((32, 64)) / 6, "w2": rng.standard_normal((64, 16)) / 8}
    x, y = rng.standard_normal((48, 32)), rng.standard_normal((48, 16))

    def step(p, x, y):
        def loss(p):
            h = np.maximum(x @ p["w1"], 0)
            return np.mean((h @ p["w2"] - y) ** 2)
        val, gr = spmd.value_and_grad(loss)(p)
        return val, {k: p[k] - 0.1 * gr[k] for k in p}
    low = spmd.jit(step).lower(p, x, y)
    exe = low.compile()
    assert_sound(exe)
    m = low.memory()
    assert exe.memory.in_outputs and m["in_outputs"] == len(exe.memory.in_outputs)
    assert m["temporaries_in_outputs"] and all(r["bytes"] > 0 for r in m["temporaries_in_outputs"])
    assert m["temp_bytes"] == exe.memory.arena_bytes
    val, new = spmd.jit(step)(p, x, y)
    h = np.maximum(x @ p["w1"], 0)
    e = h @ p["w2"] - y
    g2 = h.T @ (2 * e / e.size)
    g1 = x.T @ ((2 * e / e.size) @ p["w2"].T * (h > 0))
    np.testing.assert_allclose(float(np.asarray(val)), np.mean(e ** 2), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(new["w1"]), p["w1"] - 0.1 * g1, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(np.asarray(new["w2"]), p["w2"] - 0.1 * g2, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("native", ["1", "0"])
def test_a_step_run_twice_keeps_each_calls_outputs(native, monkeypatch):
    """spmd.jit end to end on 4 local devices: the outputs of one call are not the buffers
    the next call's temporaries use."""
    monkeypatch.setenv("SPMD_NATIVE", native)
    spmd.init(backend="local", num_devices=4)
    mesh = spmd.Mesh((4,), ("data",))
    rng = np.random.default_rng(7)
    w = rng.standard_normal((16, 16)) / 4
    x = rng.standard_normal((32, 16))

    def step(w, x):
        h = np.tanh(x @ w)
        return w - 0.1 * (x.T @ (np.tanh(h @ w) * h))
    f = spmd.jit(step, in_shardings=(mesh.sharding(), mesh.sharding("data", None)))
    assert f.lower(w, x).compile().memory.in_outputs
    a = f(w, x)
    keep = a.numpy().copy()
    b = f(w + 1, x)
    np.testing.assert_array_equal(a.numpy(), keep)
    for got, ww in ((keep, w), (b.numpy(), w + 1)):
        h = np.tanh(x @ ww)
        np.testing.assert_allclose(got, ww - 0.1 * (x.T @ (np.tanh(h @ ww) * h)), rtol=1e-10, atol=1e-12)
