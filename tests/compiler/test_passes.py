"""The Graph -> Graph passes (DCE, CSE, simplify), fusion planning and memory planning:
each preserves what the program computes (run by the numpy backend) and shrinks or
plans the graph as expected."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import spmd
from spmd.backends import compile_graph
from spmd.backends.llvm.lowering_table import fusible
from spmd.compiler.passes import cse, dce, optimize, simplify
from spmd.backends.llvm.fuse import Kernel, fuse
from spmd.backends.llvm.memory import plan_memory
from spmd.ir import Graph
from spmd.ir.ops.names import (
    ADD, BROADCAST_IN_DIM, CONSTANT, CONVERT, DIVIDE, DOT_GENERAL, EXP, IOTA, LOG, MULTIPLY,
    NEGATE, POWER, REDUCE, RESHAPE, SLICE, SUBTRACT, TANH, TRANSPOSE
)


def run(g, *args):
    return compile_graph(g, "numpy")([np.asarray(a) for a in args])


def names(g):
    return [op.name for op in g.ops]


def same_results(g1, g2, *args):
    """The optimised program gives the same bits (the passes keep numpy's rounding)."""
    for a, b in zip(run(g1, *args), run(g2, *args)):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)


def splat(g, c, like):
    s = g.emit(CONSTANT, value=np.array(c, like.dtype))
    return g.emit(BROADCAST_IN_DIM, s, shape=like.shape, broadcast_dimensions=())


# ----------------------------------------------------------------------------------- DCE
def test_dce_drops_unused_ops_only():
    g = Graph()
    x = g.add_input((3,), "float32")
    used = g.emit(EXP, x)
    g.emit(TANH, g.emit(LOG, x))               # dead chain
    g.outputs = [g.emit(NEGATE, used)]
    d = dce(g)
    assert names(d) == ["exp", "negate"]
    same_results(g, d, np.arange(3, dtype=np.float32))
    assert dce(d) is d                               # nothing left to do: the same graph


# ----------------------------------------------------------------------------------- CSE
def test_cse_merges_equal_ops_and_constants():
    g = Graph()
    x = g.add_input((4,), "float64")
    a1, a2 = g.emit(EXP, x), g.emit(EXP, x)
    c1, c2 = splat(g, 2.0, x), splat(g, 2.0, x)
    c3 = splat(g, 3.0, x)                            # a different value: kept
    s1 = g.emit(MULTIPLY, a1, c1)
    s2 = g.emit(MULTIPLY, a2, c2)
    g.outputs = [g.emit(ADD, s1, s2), g.emit(ADD, a1, c3)]
    c = dce(cse(g))
    assert names(c).count("exp") == 1 and names(c).count("multiply") == 1
    assert names(c).count("constant") == 2
    same_results(g, c, np.linspace(-1, 1, 4))


def test_cse_keeps_ops_that_differ_in_attributes():
    g = Graph()
    x = g.add_input((2, 3), "float32")
    g.outputs = [g.emit(REDUCE, x, kind="sum", axes=(0,)), g.emit(REDUCE, x, kind="max", axes=(0,)),
                 g.emit(REDUCE, x, kind="sum", axes=(1,))]
    assert len(cse(g).ops) == 3


# ------------------------------------------------------------------------------ simplify
def test_simplify_keeps_adds_that_change_a_zeros_sign():
    """numpy: -0.0 + 0.0 is +0.0 and -0.0 - -0.0 is +0.0, so neither is an identity on
    floats (they are on integers); constants mixing both zeros are not a splat."""
    for dt, c, op, kept in (("float64", 0.0, "add", True), ("float32", -0.0, "subtract", True),
                            ("int64", 0, "add", False), ("int32", 0, "subtract", False)):
        g = Graph()
        x = g.add_input((3,), dt)
        g.outputs = [g.emit(op, x, splat(g, c, x))]
        s = optimize(g)
        assert (names(s) != []) == kept, (dt, c, op, names(s))
        a = np.array([-0.0, 0.0, 2.0], dtype=dt)
        assert np.array_equal(np.signbit(run(s, a)[0]), np.signbit(run(g, a)[0]))
    g = Graph()
    x = g.add_input((2,), "float64")
    g.outputs = [g.emit(SUBTRACT, x, g.emit(CONSTANT, value=np.array([0.0, -0.0])))]
    s = optimize(g)
    assert "subtract" in names(s)
    got = run(s, np.array([-0.0, -0.0]))[0]
    assert list(np.signbit(got)) == [True, False]


def test_simplify_identities():
    g = Graph()
    x = g.add_input((2, 3), "float32")
    y = g.emit(ADD, x, splat(g, -0.0, x))        # -0.0 is the float add's unit (not +0.0)
    y = g.emit(SUBTRACT, y, splat(g, 0.0, x))     # and +0.0 subtract's
    y = g.emit(MULTIPLY, splat(g, 1.0, x), y)
    y = g.emit(DIVIDE, y, splat(g, 1.0, x))
    y = g.emit(NEGATE, g.emit(NEGATE, y))
    y = g.emit(CONVERT, y, dtype="float32")
    y = g.emit(RESHAPE, g.emit(RESHAPE, y, shape=(3, 2)), shape=(6,))
    y = g.emit(RESHAPE, y, shape=(2, 3))
    t = g.emit(TRANSPOSE, g.emit(TRANSPOSE, y, permutation=(1, 0)), permutation=(1, 0))
    t = g.emit(BROADCAST_IN_DIM, t, shape=(2, 3), broadcast_dimensions=(0, 1))
    t = g.emit(SLICE, t, start=(0, 0), limit=(2, 3), stride=(1, 1))
    t = g.emit(REDUCE, t, kind="sum", axes=())
    g.outputs = [t]
    s = optimize(g)
    assert names(s) == [], names(s)
    assert s.outputs[0] is s.inputs[0]
    same_results(g, s, np.arange(6, dtype=np.float32).reshape(2, 3))


def test_simplify_powers_and_folding():
    g = Graph()
    x = g.add_input((5,), "float64")
    sq = g.emit(POWER, x, splat(g, 2.0, x))
    cu = g.emit(POWER, x, splat(g, 3.0, x))
    inv = g.emit(POWER, x, splat(g, -1.0, x))
    k = g.emit(EXP, g.emit(ADD, g.emit(CONSTANT, value=np.array([1.0, 2.0])),
                             g.emit(CONSTANT, value=np.array([3.0, 4.0]))))    # folds to a constant
    g.outputs = [sq, cu, inv, k]
    s = optimize(g)
    # x**3 stays a power: x*x*x would round twice where numpy's pow rounds once
    assert names(s).count("power") == 1 and "exp" not in names(s)
    assert names(s).count("constant") >= 1
    same_results(g, s, np.array([0.5, -2.0, 3.0, 1.1, -7.3]))


def test_simplify_folds_transpose_into_dot():
    g = Graph()
    a, b = g.add_input((4, 3), "float32"), g.add_input((3, 5), "float32")
    d = g.emit(DOT_GENERAL, a, b, lhs_batch=(), rhs_batch=(), lhs_contract=(1,), rhs_contract=(0,))
    g.outputs = [g.emit(TRANSPOSE, d, permutation=(1, 0))]
    s = optimize(g)
    assert names(s) == ["dot_general"]
    rng = np.random.default_rng(0)
    same_results(g, s, rng.standard_normal((4, 3)).astype(np.float32), rng.standard_normal((3, 5)).astype(np.float32))


def test_simplify_keeps_a_transposed_dot_that_is_used_twice():
    g = Graph()
    a, b = g.add_input((4, 3), "float32"), g.add_input((3, 5), "float32")
    d = g.emit(DOT_GENERAL, a, b, lhs_batch=(), rhs_batch=(), lhs_contract=(1,), rhs_contract=(0,))
    g.outputs = [g.emit(TRANSPOSE, d, permutation=(1, 0)), d]
    assert names(optimize(g)) == ["dot_general", "transpose"]


def test_simplify_does_not_fold_large_constants():
    g = Graph()
    c = g.emit(IOTA, shape=(1000,), dtype="float32", dimension=0)
    g.outputs = [g.emit(EXP, c)]
    assert names(simplify(g)) == ["iota", "exp"]


# random programs: the optimised graph computes what the traced one does
OPS = [lambda x: x + 0, lambda x: x * 1, lambda x: (x * 2) / 1, lambda x: -(-x), lambda x: x ** 2,
       lambda x: x ** 3, lambda x: x.T.T, lambda x: x.reshape(-1).reshape(x.shape), np.exp,
       lambda x: np.tanh(x) + np.tanh(x), lambda x: x.astype(np.float32), lambda x: np.where(x > 0, x, x),
       lambda x: x - x.sum(0, keepdims=True), lambda x: (x @ x.T)[:, :x.shape[1]] * 0.1]


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(0, len(OPS) - 1), min_size=1, max_size=6), st.sampled_from([(3, 4), (1, 1), (5, 2)]))
def test_optimize_preserves_random_programs(ops, shape):
    def f(x):
        for k in ops:
            x = OPS[k](x)
        return x
    x = np.linspace(-1, 1, int(np.prod(shape)), dtype=np.float32).reshape(shape)
    low = spmd.jit(f, backend="numpy").lower(x)
    traced, opt = low.stages["traced"], low.stages["optimized"]
    assert len(opt.ops) <= len(traced.ops)
    same_results(traced, opt, x)


# ---------------------------------------------------------------------------------- fuse
def plan_of(fn, *args):
    low = spmd.jit(fn, backend="numpy").lower(*args)
    return fuse(low.graph, fusible)


def test_fuse_softmax_is_one_kernel():
    x = np.ones((4, 8), np.float32)
    p = plan_of(lambda x: np.exp(x - x.max(1, keepdims=True)) / np.exp(x - x.max(1, keepdims=True)).sum(1, keepdims=True), x)
    assert len(p.steps) == 1 and isinstance(p.steps[0], Kernel)
    assert sum(op.name == "reduce" for op in p.steps[0].ops) == 2
    assert "kernel" in str(p)


def test_fuse_stops_at_dots_and_shares_views():
    x, w = np.ones((4, 8), np.float32), np.ones((8, 3), np.float32)

    def f(x, w):
        h = np.tanh(x * 2)                 # one kernel before the dot
        y = h @ w
        return np.exp(y) + y.sum()         # one kernel after (the sum is its own root: used twice)
    p = plan_of(f, x, w)
    kinds = [s.name if not isinstance(s, Kernel) else "kernel" for s in p.steps]
    assert kinds.count("dot_general") == 1
    assert kinds.index("dot_general") == 1 and kinds[0] == "kernel"


def test_fuse_program_outputs_leave_the_kernel():
    x = np.ones((3, 5), np.float32)
    p = plan_of(lambda x: (np.exp(x), np.exp(x).sum(1)), x)
    ks = p.kernels()
    assert len(ks) == 1 and len(ks[0].outputs) == 2


def test_fuse_respects_forced_roots():
    x = np.ones((3, 5), np.float32)
    low = spmd.jit(lambda x: np.tanh(np.exp(x)), backend="numpy").lower(x)
    g = low.graph
    e = g.ops[0].result
    assert len(fuse(g, fusible).kernels()) == 1
    assert len(fuse(g, fusible, frozenset([e])).kernels()) == 2


# -------------------------------------------------------------------------------- memory
def test_memory_plan_reuses_dead_buffers():
    g = Graph()
    x = g.add_input((64, 64), "float32")
    w = g.add_input((64, 64), "float32")
    v = x
    for _ in range(4):                 # kernel, dot, kernel, dot, ...: temporaries die as they go
        v = g.emit(TANH, v)
        v = g.emit(DOT_GENERAL, v, w, lhs_batch=(), rhs_batch=(), lhs_contract=(1,), rhs_contract=(0,))
    g.outputs = [g.emit(EXP, v)]
    exe = spmd.backends.llvm.compile_llvm(g)
    mem = exe.memory
    # each tanh after a dot runs in place in the dot's buffer; the last dot is computed in
    # the output's buffer (exp in place there), so 7 temporaries share 2 buffers' bytes:
    # the output's (the first 3, dead before the last dot) and the arena's (the other 4)
    assert len(mem.in_place) == 4 and len(mem.slot_of) == 4 and len(mem.in_outputs) == 3, mem
    assert mem.arena_bytes == mem.peak_bytes == 64 * 64 * 4, mem
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((64, 64)).astype(np.float32), rng.standard_normal((64, 64)).astype(np.float32) / 8
    for _ in range(2):                 # buffers kept between calls stay correct
        np.testing.assert_allclose(exe([a, b])[0], run(g, a, b)[0], rtol=1e-4, atol=1e-5)


def test_memory_plan_keeps_buffers_alive_while_a_view_needs_them():
    g = Graph()
    x = g.add_input((8, 6), "float32")
    e = g.emit(EXP, x)                                           # planned temporary
    t = g.emit(TRANSPOSE, e, permutation=(1, 0))                  # a numpy view of it...
    d = g.emit(DOT_GENERAL, t, x, lhs_batch=(), rhs_batch=(), lhs_contract=(1,), rhs_contract=(0,))
    f = g.emit(TANH, d)                                           # ...must outlive this kernel
    g.outputs = [g.emit(ADD, f, f), t]
    exe = spmd.backends.llvm.compile_llvm(g)
    mem = plan_memory(g, exe.steps)
    xs = np.linspace(-1, 1, 48, dtype=np.float32).reshape(8, 6)
    for a, b in zip(exe([xs]), run(g, xs)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert e not in mem.slot_of or all(mem.slot_of.get(v) != mem.slot_of[e] for v in mem.slot_of if v is not e)


@pytest.mark.parametrize("n", [1, 3])
def test_optimize_dumps_every_pass(tmp_path, monkeypatch, n):
    monkeypatch.setenv("SPMD_DUMP", str(tmp_path))
    spmd.jit(lambda x: np.exp(x) * n + 0, backend="llvm")(np.ones(3, np.float32))
    files = sorted(p.name for p in tmp_path.iterdir())
    dumps = sorted((f for f in files if f.endswith(".txt") and ".llvm." not in f), key=lambda f: int(f.split(".")[-3]))
    stages = [f.split(".")[-2] for f in dumps]
    assert stages == ["traced", "inline", "roll", "simplify_global", "dce", "simplify", "cse", "dce", "blocks_late",
                      "hoist",
                      "regather", "late_reads", "frees_first", "combine", "schedule", "exchanges",
                      "barriers"], files
    assert any(f.endswith(".llvm.fusion.txt") for f in files) and any(f.endswith(".llvm.ll") for f in files)
