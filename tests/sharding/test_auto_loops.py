"""spmd.AUTO on loops (sharding/auto/problem.py's loop_seconds, strategies.loop_strategies):
a while's or scan's body is planned once per layout of its carries, its cost times the
trip count; a loop-carried value keeps one sharding; numpy's values."""
import numpy as np
import pytest

import spmd
from spmd.sharding.auto import problem
from spmd.sharding.auto.problem import build
from spmd.sharding.auto.strategies import loop_strategies
from spmd.sharding.cost_model import Machine, Network

pytestmark = pytest.mark.filterwarnings("ignore::spmd.ReshardWarning")

MESH = spmd.Mesh((2, 2), ("data", "model"))


def _laplace(u):
    out = 4.0 * u
    out[1:, :] -= u[:-1, :]
    out[:-1, :] -= u[1:, :]
    out[:, 1:] -= u[:, :-1]
    out[:, :-1] -= u[:, 1:]
    return out


def _cg_step(state):
    x, r, p, rs = state
    ap = _laplace(p)
    alpha = rs / np.sum(p * ap)
    x = x + alpha * p
    r = r - alpha * ap
    rs_new = np.sum(r * r)
    p = r + (rs_new / rs) * p
    return x, r, p, rs_new


def _cg_numpy(x, r, p, rs, steps):
    state = (x, r, p, rs)
    for _ in range(steps):
        state = _cg_step(state)
    return state


def _cg_state(n):
    b = np.random.default_rng(1).random((n, n))
    return np.zeros((n, n)), b.copy(), b.copy(), np.float64(np.sum(b * b))


@pytest.mark.parametrize("bounds", ["static", "traced"])
def test_cg_loop_under_auto_gives_numpys_values_and_one_layout_for_its_carries(bounds):
    """fori_loop with int bounds is a scan, with traced bounds a while; either way CG's
    carries x, r, p take one layout, split over the whole mesh (the hand plan's 4 ways),
    and the values are numpy's."""
    def cg(x, r, p, rs, steps):
        hi = 6 if bounds == "static" else steps
        return spmd.fori_loop(0, hi, lambda i, s: _cg_step(s), (x, r, p, rs))

    x, r, p, rs = _cg_state(256)
    want = _cg_numpy(x, r, p, rs, 6)
    f = spmd.jit(cg, mesh=MESH, in_shardings=spmd.AUTO)
    steps = np.int64(6)
    got = f(x, r, p, rs, steps)
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), w, rtol=1e-9, atol=1e-12)
    low = f.lower(x, r, p, rs, steps)
    loop = next(op for op in low.stages["scalar_reads"].ops if op.name in ("scan", "while"))
    assert loop.name == ("scan" if bounds == "static" else "while")
    ins = low.in_shardings
    assert ins[0] == ins[1] == ins[2]
    split = [a for d in range(2) for a in ins[0].dim_axes(d)]
    assert sorted(split) == ["data", "model"]
    # and inside the partitioned loop, each carry is laid out as it came in
    part = next(op for op in low.stages["propagated"].ops if op.name in ("scan", "while"))
    for k in range(3):
        assert part.operands[k].sharding.replace(partial=()) == part.results[k].sharding


def test_loop_strategies_share_one_layout_per_shape():
    def f(a, b, c):
        return spmd.fori_loop(0, 3, lambda i, s: (s[0] * 2.0, s[1] + s[0].sum(), s[2] + 1.0), (a, b, c))
    g = spmd.jit(f, mesh=MESH).lower(np.ones((8, 8)), np.ones(()), np.ones((8, 8))).stages["scalar_reads"]
    loop = next(op for op in g.ops if op.name == "scan")
    sts = loop_strategies(loop, MESH)
    assert sts[0].operands[1] == MESH.sharding(None, None)          # replicated first
    for st in sts:
        by = {}
        for t, s in zip(list(loop.operands) + list(loop.results), st.operands + st.results):
            assert by.setdefault(t.shape, s) == s
    assert len(sts) == 9            # (8, 8) on 2x2: each axis on dim 0, dim 1 or none


def _scan_program(length):
    def f(x, w):
        def body(h, _):
            return np.tanh(h @ w), None
        h, _ = spmd.scan(body, x, None, length=length)
        return h
    args = (np.ones((16, 16), np.float32), np.ones((16, 16), np.float32))
    return spmd.jit(f, mesh=MESH).lower(*args).stages["scalar_reads"]


def test_scan_body_is_planned_once_per_carry_layout(monkeypatch):
    """The body is planned once per strategy of the loop, however long the scan; its cost
    is that plan's times the length."""
    bodies, real = [], problem.build

    def counting(graph, *a, **k):
        bodies.append(graph)
        return real(graph, *a, **k)
    monkeypatch.setattr(problem, "build", counting)
    costs = {}
    for length in (2, 20):
        bodies.clear()
        g = _scan_program(length)
        pb = counting(g, MESH, [None, None], [None], Machine(), Network())
        loop = next(op for op in g.ops if op.name == "scan")
        planned = [b for b in bodies if b is loop.attrs["body"]]
        assert len(planned) == len(loop_strategies(loop, MESH))
        node = next(n for n in pb.nodes if n.what == "op" and n.ops[0] is loop)
        costs[length] = node.cost
    assert costs[2].min() > 1e-6
    # (atol: the few nanoseconds of _minor's tie-breaker, added once)
    np.testing.assert_allclose(costs[20], 10 * costs[2], rtol=1e-6, atol=1e-7)
