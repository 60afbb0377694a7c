"""passes/hoist.py: work a loop body does on captured values alone moves out of the loop
(collectives included, in per-device programs); slices and broadcasts stay in; results
do not change."""
import numpy as np

import spmd
from spmd.ir.text import print_graph


def _loops(g):
    return [op for op in g.ops if op.opdef.captured_from]


def _names(g):
    return [op.name for op in g.ops]


def test_invariant_work_leaves_a_scan_body():
    def f(x, b):
        def body(carry, _):
            return carry * 0.5 + np.exp(b) * 2.0, None
        return spmd.scan(body, x, None, length=20)[0]

    x, b = np.linspace(0, 1, 16), np.linspace(-1, 1, 16)
    low = spmd.jit(f, backend="numpy").lower(x, b)
    (loop,) = _loops(low.stages["optimized"])
    assert "exp" not in _names(loop.attrs["body"])
    assert "exp" in _names(low.stages["optimized"])
    want = x.copy()
    for _ in range(20):
        want = want * 0.5 + np.exp(b) * 2.0
    for backend in ("numpy", "llvm"):
        np.testing.assert_allclose(np.asarray(spmd.jit(f, backend=backend)(x, b)), want, rtol=1e-15)


def test_a_while_loop_keeps_its_cond_in_step():
    def f(x, b):
        return spmd.while_loop(lambda c: c[0] < 30, lambda c: (c[0] + 1, c[1] + np.sin(b) * 0.1), (0, x))[1]

    x, b = np.zeros(8), np.linspace(0, 3, 8)
    low = spmd.jit(f).lower(x, b)
    (loop,) = _loops(low.stages["optimized"])
    assert "sin" not in _names(loop.attrs["body"])
    assert len(loop.attrs["cond"].inputs) == len(loop.attrs["body"].inputs) == len(loop.operands)
    want = x.copy()
    for _ in range(30):
        want = want + np.sin(b) * 0.1
    np.testing.assert_allclose(np.asarray(spmd.jit(f)(x, b)), want, rtol=1e-14)


def test_a_halo_exchange_of_a_captured_array_happens_once():
    """Rolled sweeps that read neighbours of an array they never write: the partitioned
    body exchanges the halo of p each sweep, and b's halo only once, before the loop."""
    def f(p, b, nit):
        for _ in range(nit):
            p = p.copy()
            p[1:-1] = 0.5 * (p[2:] + p[:-2]) + (b[2:] - b[:-2]) * 0.1
        return p

    mesh = spmd.Mesh((2,), ("x",))
    sh = mesh.sharding("x")
    jf = spmd.jit(f, in_shardings=(sh, sh), static_argnums=(2,))
    rng = np.random.default_rng(0)
    p, b = rng.random(64), rng.random(64)
    low = jf.lower(p, b, 40)
    g = low.stages["optimized"]
    (loop,) = _loops(g)
    inside = [op for op in loop.attrs["body"].ops if op.name == "collective_permute"]
    before = [op for op in g.ops if op.name == "collective_permute"]
    assert len(inside) == 2 and len(before) == 2, print_graph(g)
    np.testing.assert_allclose(np.asarray(jf(p.copy(), b, 40)), f(p.copy(), b, 40), rtol=1e-13)


def test_slices_and_broadcasts_stay_in_the_body():
    def only_slices(x, b):
        return spmd.scan(lambda c, _: (c + b[::2], None), x, None, length=10)[0]

    def a_sum_of_slices(x, b):
        return spmd.scan(lambda c, _: (c + (b[::2] + b[1::2]), None), x, None, length=10)[0]

    x, b = np.zeros(8), np.arange(16.0)
    g = spmd.jit(only_slices, backend="numpy").lower(x, b).stages["optimized"]
    (loop,) = _loops(g)
    assert _names(g) == ["scan"] and "slice" in _names(loop.attrs["body"])
    g = spmd.jit(a_sum_of_slices, backend="numpy").lower(x, b).stages["optimized"]
    (loop,) = _loops(g)
    assert "add" in _names(g) and _names(g).count("slice") == 2
    assert _names(loop.attrs["body"]) == ["add"]
    np.testing.assert_array_equal(np.asarray(spmd.jit(only_slices)(x, b)), 10 * b[::2])
    np.testing.assert_array_equal(np.asarray(spmd.jit(a_sum_of_slices)(x, b)), 10 * (b[::2] + b[1::2]))


def test_a_carry_given_back_unchanged_is_captured_and_its_work_leaves_the_loop():
    """fori_loop carrying (x, w) and giving w back: w is captured, not carried (the
    native loop runs it; a carry it does not write had kept it in Python, 14x slower),
    the loop's w is the w it was given, and work on w alone leaves the body."""
    def scan_kept(x, w):
        def body(i, c):
            x, w = c
            return x * 0.5 + np.exp(w), w
        return spmd.fori_loop(0, 12, body, (x, w))

    def while_kept(x, w):
        return spmd.while_loop(lambda c: c[0] < 9, lambda c: (c[0] + 1, c[1], c[2] * 0.5 + np.sin(c[1])), (0, w, x))

    x, w = np.linspace(0, 1, 64).reshape(8, 8), np.linspace(-1, 1, 64).reshape(8, 8)
    want_x = x.copy()
    for _ in range(12):
        want_x = want_x * 0.5 + np.exp(w)
    want_x9 = x.copy()
    for _ in range(9):
        want_x9 = want_x9 * 0.5 + np.sin(w)
    mesh = spmd.Mesh((2,), ("x",))
    sh = mesh.sharding("x", None)
    for f, unchanged, work, want in ((scan_kept, 1, "exp", (want_x, w)), (while_kept, 1, "sin", (9, w, want_x9))):
        for kw in ({}, dict(in_shardings=(sh, sh))):
            jf = spmd.jit(f, **kw)
            low = jf.lower(x, w)
            (loop,) = _loops(low.stages["optimized"])
            carried = loop.attrs["num_carry"]
            (traced,) = _loops(low.stages["traced"])
            assert carried == traced.attrs["num_carry"] - unchanged
            body = loop.attrs["body"]
            assert all(body.outputs[j] is not body.inputs[j] for j in range(carried)), print_graph(body)
            assert work not in _names(body)
            got = jf(x, w)
            for g, v in zip(got, want):
                np.testing.assert_allclose(np.asarray(g.numpy() if hasattr(g, "numpy") else g), v, rtol=1e-14)
