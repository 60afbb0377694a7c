"""Compiled control flow inside jit (spmd.while_loop, fori_loop, cond, scan; the IR ops
while / cond / scan with sub-graph bodies): results equal plain Python loops, on one
device and partitioned (carried shardings kept, predicates replicated), gradients equal
the unrolled program's, the text form round-trips, and tracing errors point here."""
import numpy as np
import pytest

import spmd
from spmd.errors import TraceError
from spmd.ir import parse_graph
from spmd.ir.text import print_graph
from eager_programs import cg, spd_problem

MESH = spmd.Mesh((4,), ("x",))
MESH2 = spmd.Mesh((2, 2), ("a", "b"))


def program(x, k):
    def body(i, c):
        return c * 0.5 + np.sum(x) * i + k
    y = spmd.fori_loop(0, 5, body, x)
    z, n = spmd.while_loop(lambda c: c[1] < 10, lambda c: (c[0] + 1.0, c[1] + 3), (y, 0))
    w = spmd.cond(np.sum(z) > 0, lambda a: a * 2, lambda a: a - 1, z)
    carry, ys = spmd.scan(lambda c, r: (c + r, np.max(c * r)), np.zeros_like(x[0]), x)
    return w, n, carry, ys


def program_ref(x, k):
    y = x
    for i in range(5):
        y = y * 0.5 + np.sum(x) * i + k
    z, n = y, 0
    while n < 10:
        z, n = z + 1.0, n + 3
    w = z * 2 if np.sum(z) > 0 else z - 1
    carry, ys = np.zeros_like(x[0]), []
    for r in x:
        ys.append(np.max(carry * r))
        carry = carry + r
    return w, n, carry, np.array(ys)


@pytest.mark.parametrize("spec", [None, ("x", None), (None, "x"), (("a", "b"), None), ("a", "b")])
def test_loops_and_branches_match_python(compiler, spec):
    x = np.random.default_rng(0).standard_normal((8, 6))
    want = program_ref(x, 0.25)
    if spec is None:
        got = spmd.jit(program, backend=compiler)(x, 0.25)
    else:
        mesh = MESH if "x" in spec else MESH2
        got = spmd.jit(program, backend=compiler, in_shardings=(mesh.sharding(*spec), None))(x, 0.25)
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), w, rtol=1e-12, atol=1e-12)


def test_carried_values_keep_their_sharding_and_predicates_are_replicated():
    x = np.arange(32.0).reshape(8, 4)

    def f(x):
        return spmd.while_loop(lambda c: np.sum(c) < 1e4, lambda c: c * 2.0, x)
    jf = spmd.jit(f, in_shardings=MESH.sharding("x", None))
    out = jf(x)
    want = x.copy()
    while want.sum() < 1e4:
        want = want * 2.0
    assert isinstance(out, spmd.Array) and out.sharding == MESH.sharding("x", None)
    np.testing.assert_array_equal(out.numpy(), want)
    low = jf.lower(x)
    colls = low.report()["collectives"]
    # the body is local; the predicate's sum is one all_reduce of a scalar, an iteration
    assert [(c["op"], c["in_shape"]) for c in colls] == [("all_reduce", ())], colls
    assert colls[0]["inside"].startswith("while.cond")
    text = low.as_text("partitioned")
    assert "while(" in text and "func @while_body" in text and "f64[2,4]" in text


def test_conjugate_gradient_with_while_loop_gives_the_eager_iterates():
    A, b = spd_problem(32)
    M = 40

    def solve(A, b, tol):
        x = np.zeros_like(b)
        r = b - A @ x
        rs = r @ r
        norms = np.zeros(M) + np.sqrt(rs) * (np.arange(M) == 0)

        def body(c):
            x, r, p, rs, k, norms = c
            Ap = A @ p
            alpha = rs / (p @ Ap)
            x = x + alpha * p
            r = r - alpha * Ap
            rs_new = r @ r
            p = r + (rs_new / rs) * p
            norms = np.where(np.arange(M) == k + 1, np.sqrt(rs_new), norms)
            return x, r, p, rs_new, k + 1, norms
        x, r, p, rs, k, norms = spmd.while_loop(lambda c: (np.sqrt(c[3]) > tol) & (c[4] < M - 1), body,
                                                (x, r, r, rs, 0, norms))
        return x, k, norms

    f = spmd.jit(solve, in_shardings=(MESH.sharding("x", None), MESH.sharding("x"), None))
    x, k, norms = f(A, b, 1e-8)
    xe, ne = cg(spmd.device_put(A, MESH.sharding("x", None)), spmd.device_put(b, MESH.sharding("x")))
    assert int(k) == len(ne) - 1 and x.sharding == MESH.sharding("x")
    np.testing.assert_allclose(norms.numpy()[:len(ne)], ne, rtol=1e-9)
    np.testing.assert_allclose(x.numpy(), xe.numpy(), rtol=1e-9, atol=1e-12)
    dots = [c for c in f.lower(A, b, 1e-8).report()["collectives"]
            if c["op"] == "all_reduce" and "while.body" in c.get("inside", "")]
    assert len(dots) == 2, dots          # p @ Ap and r @ r: one all_reduce each, per iteration


def test_gradients_through_scan_cond_and_fori_loop(compiler):
    rng = np.random.default_rng(0)
    W = rng.standard_normal((3, 4, 4)) * 0.5
    x = rng.standard_normal((8, 4))

    def loss(W, x, scan=True):
        if scan:
            def layer(h, w):
                h2 = np.tanh(h @ w) + h
                return h2, np.sum(h2 ** 2)
            h, ys = spmd.scan(layer, x, W)
            z = spmd.cond(np.sum(ys) > 0, lambda a: a * 2.0, lambda a: a * 3.0, h)
            h3 = spmd.fori_loop(0, 2, lambda i, c: c * W[i, 0, 0], z)
        else:
            h, ys = x, []
            for i in range(3):
                h = np.tanh(h @ W[i]) + h
                ys.append(np.sum(h ** 2))
            ys = np.stack(ys)
            z = np.where(np.sum(ys) > 0, h * 2.0, h * 3.0)
            h3 = z * W[0, 0, 0] * W[1, 0, 0]
        return np.mean(h3 ** 2) + np.sum(ys) * 0.01

    want = spmd.jit(spmd.grad(lambda W, x: loss(W, x, False), argnums=(0, 1)), backend=compiler)(W, x)
    got = spmd.jit(spmd.grad(loss, argnums=(0, 1)), backend=compiler)(W, x)
    sharded = spmd.jit(spmd.grad(loss, argnums=(0, 1)), backend=compiler,
                       in_shardings=(None, MESH.sharding("x", None)))(W, x)
    for g, s, w in zip(got, sharded, want):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(np.asarray(s), w, rtol=1e-10, atol=1e-12)
    # a while loop has no reverse-mode derivative (as in JAX): a clear error, not a zero
    with pytest.raises(TraceError, match="while.*not supported"):
        spmd.jit(spmd.grad(lambda x: np.sum(spmd.while_loop(lambda c: np.sum(c) < 5, lambda c: c * 2, x))))(
            np.ones(3))


def test_text_form_round_trips_with_nested_bodies():
    x = np.random.default_rng(0).standard_normal((8, 6))
    jf = spmd.jit(program, in_shardings=(MESH.sharding("x", None), None))
    low = jf.lower(x, 0.25)
    for stage in ("traced", "partitioned", "optimized"):
        text = low.as_text(stage)
        assert print_graph(parse_graph(text)) == text
    nested = spmd.jit(lambda x: spmd.fori_loop(0, 3, lambda i, c: spmd.cond(
        i > 0, lambda a: a + spmd.while_loop(lambda d: np.sum(d) < 10, lambda d: d + 1, a), lambda a: a, c), x))
    text = nested.lower(np.ones(2)).as_text("traced")
    # the program, the scan body, both branches, the while's cond and body
    assert text.count("func @") == 6 and print_graph(parse_graph(text)) == text
    np.testing.assert_allclose(nested(np.ones(2)), _nested_ref(np.ones(2)))


def _nested_ref(c):
    for i in range(3):
        if i > 0:
            d = c
            while np.sum(d) < 10:
                d = d + 1
            c = c + d
    return c


def test_control_flow_on_traced_values_says_what_to_use():
    def f(x):
        if np.sum(x) > 0:
            return x
        return -x
    with pytest.raises(TraceError, match=r"test_control.py:\d+.*spmd.while_loop.*spmd.cond.*eagerly"):
        spmd.jit(f, fallback=False)(np.ones(3))
    with pytest.raises(TraceError, match="is float64\\[3\\] on entry but int64"):
        spmd.jit(lambda x: spmd.fori_loop(0, 2, lambda i, c: i + 0 * c.astype(np.int64), x))(np.ones(3))
    with pytest.raises(TraceError, match="same structure"):
        spmd.jit(lambda x: spmd.cond(x[0] > 0, lambda a: a, lambda a: a[0], x))(np.ones(3))


def test_the_same_functions_run_eagerly():
    x = spmd.device_put(np.arange(8.0), MESH.sharding("x"))
    y = spmd.fori_loop(0, 3, lambda i, c: c + i, x)
    z = spmd.while_loop(lambda c: np.max(c) < 100, lambda c: c * 2, y)
    c, ys = spmd.scan(lambda c, r: (c + r, c * r), 0.0, x)
    w = spmd.cond(np.sum(z) > 0, lambda a: a + 1, lambda a: a - 1, z)
    assert isinstance(w, spmd.Array) and w.sharding == MESH.sharding("x")
    ref = np.arange(8.0) + 3
    while ref.max() < 100:
        ref = ref * 2
    np.testing.assert_array_equal(w.numpy(), ref + 1)
    assert float(c) == 28.0 and isinstance(ys, spmd.Array)


def test_jit_inner_step_with_a_python_convergence_loop():
    """Mixing: jit the step, keep the loop in Python on eager arrays; results stay on the mesh."""
    A, b = spd_problem(16)
    A_, b_ = spmd.device_put(A, MESH.sharding("x", None)), spmd.device_put(b, MESH.sharding("x"))

    omega = 1.0 / np.linalg.eigvalsh(A).max()      # Richardson iteration converges

    @spmd.jit
    def step(A, b, x):
        r = b - A @ x
        return x + omega * r, np.sqrt(r @ r)

    x = spmd.device_put(np.zeros(16), MESH.sharding("x"))
    n = 0
    res = np.inf
    while res > 1e-6 and n < 2000:
        x, res = step(A_, b_, x)
        n += 1
    # an Array closed over is a constant of the program (its value is read once)
    closed = spmd.jit(lambda x: b_ - A_ @ x)(x)
    np.testing.assert_allclose(np.asarray(closed), b - A @ x.numpy(), atol=1e-12)
    assert isinstance(x, spmd.Array) and x.sharding == MESH.sharding("x") and res <= 1e-6
    np.testing.assert_allclose(A @ x.numpy(), b, atol=1e-5)
    assert len(step._cache) == 1
