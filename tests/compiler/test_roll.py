"""passes/roll.py: a Python loop of identical iterations traced into many copies of its
body is rolled back into one scan op, with the same results, bit for bit, as plain numpy;
so is a loop over an index (`for i in range(n): y[i] = f(x[i])`), whose iterations differ
only by positions that step evenly; loops whose iterations differ otherwise, or whose
inner values are read after the loop, are left as they are (and still right)."""
import re

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import spmd
from spmd.compiler.passes.roll import roll_loops
from spmd.ir.text import print_graph


def sweeps(p, b, nit):
    """The pressure Poisson sweeps of the cavity-flow lesson, as people write them."""
    for _ in range(nit):
        pn = p.copy()
        p[1:-1, 1:-1] = 0.25 * (pn[1:-1, 2:] + pn[1:-1, :-2] + pn[2:, 1:-1] + pn[:-2, 1:-1]) - b[1:-1, 1:-1]
        p[:, -1] = p[:, -2]
        p[0, :] = p[1, :]
        p[:, 0] = p[:, 1]
        p[-1, :] = 0
    return p


MESHES = [None, spmd.Mesh((2,), ("x",)), spmd.Mesh((2, 2), ("x", "y"))]


def _jit(fn, mesh, n_in, **kw):
    if mesh is None:
        return spmd.jit(fn, **kw)
    sh = mesh.sharding(*mesh.axis_names, *([None] * (2 - mesh.ndim)))
    return spmd.jit(fn, in_shardings=(sh,) * n_in, **kw)


def _scans(g):
    return [op for op in g.ops if op.name == "scan"]


@pytest.mark.parametrize("mesh", MESHES, ids=["1", "2", "2x2"])
@pytest.mark.parametrize("n", [32, 31])
def test_a_loop_of_sweeps_is_one_scan_with_numpy_bits(mesh, n):
    rng = np.random.default_rng(n)
    p0, b = rng.random((n, n)), rng.random((n, n))
    f = _jit(sweeps, mesh, 2, static_argnums=(2,))
    low = f.lower(p0, b, 50)
    assert [op.name for op in low.stages["roll"].ops] == ["scan"]
    assert _scans(low.stages["roll"])[0].attrs["length"] == 50
    got = np.asarray(f(p0.copy(), b, 50))
    assert np.array_equal(got, sweeps(p0.copy(), b, 50))


def test_the_program_does_not_grow_with_the_trip_count():
    p0 = np.zeros((16, 16))
    f = spmd.jit(sweeps, static_argnums=(2,), in_shardings=(MESHES[2].sharding("x", "y"),) * 2)
    texts = {}
    for nit in (50, 500):
        low = f.lower(p0, p0.copy(), nit)
        texts[nit] = print_graph(low.stages["optimized"]).replace("length=500", "length=50")
    assert texts[50] == texts[500]


def test_a_value_computed_each_iteration_and_read_after_the_loop():
    def f(x, nit):
        for _ in range(nit):
            y = np.tanh(x)
            err = np.abs(y - x).max()        # read after the loop: the last iteration's
            x = y * 0.5 + 0.25
        return x, err

    x0 = np.linspace(-2, 2, 64)
    low = spmd.jit(f, static_argnums=(1,)).lower(x0, 40)
    assert [op.name for op in low.stages["roll"].ops] == ["constant", "broadcast_in_dim", "scan"]
    got = spmd.jit(f, static_argnums=(1,))(x0, 40)
    want = f(x0, 40)
    for g, w in zip(got, want):                # (tanh: the LLVM kernels' may be 1 ulp from numpy's)
        np.testing.assert_allclose(np.asarray(g), w, rtol=1e-15, atol=1e-16)


def test_iterations_that_differ_are_not_rolled_and_stay_right():
    def by_index(x):
        out = spmd.numpy.zeros((64, 8))
        for i in range(64):                    # i*i % 64: an index that does not step evenly
            out[i * i % 64] = np.tanh(x[i * i % 64]) * 2.0 + x[i] ** 2 - 1.0
        return out

    def kept(x):
        xs = []
        for _ in range(64):                    # every iteration's value is read afterwards
            x = np.tanh(x) * 2.0 - x * 0.5 + 0.1
            xs.append(x)
        return np.stack(xs)

    x0 = np.random.default_rng(0).random((64, 8))
    for fn in (by_index, kept):
        low = spmd.jit(fn).lower(x0)
        assert not _scans(low.stages["roll"]), fn.__name__
        np.testing.assert_allclose(np.asarray(spmd.jit(fn)(x0)), fn(x0), rtol=1e-14, atol=1e-14, err_msg=fn.__name__)


def by_rows(x):
    out = spmd.numpy.zeros(x.shape)
    for i in range(x.shape[0]):
        out[i] = np.tanh(x[i]) * 2.0 + x[i] ** 2 - 1.0
    return out


def neighbours(x, theta):
    """The active-matter lesson's loop: each bird's heading is the mean of its neighbours'
    (a mask read), written back into the array the next bird reads."""
    mean = theta
    for b in range(x.shape[0]):
        near = (x[:, 0] - x[b, 0]) ** 2 + (x[:, 1] - x[b, 1]) ** 2 < 0.3
        mean[b] = np.arctan2(np.sum(np.sin(theta[near])), np.sum(np.cos(theta[near])))
    return mean


def windows(x):
    out = spmd.numpy.zeros((x.shape[0] - 2, x.shape[1]))
    for i in range(x.shape[0] - 2):           # a moving sum: slices of 3 rows at i
        out[i] = x[i:i + 3].sum(0) / 3
    return out


def evens_backwards(x):
    out = x.copy()
    for i in range(x.shape[0] - 2, 0, -2):    # a step of -2, a strided slice
        out[i, ::2] = out[i + 1, ::2] * 0.5 + x[i - 1, 1::2]
    return out


def diagonal(x):
    out = x * 1.0
    for i in range(x.shape[0]):               # both dims step
        out[i, i] = x[i, x.shape[0] - 1 - i] + i
    return out


INDEX_LOOPS = [by_rows, neighbours, windows, evens_backwards, diagonal]


@pytest.mark.parametrize("mesh", MESHES[:2], ids=["1", "2"])
@pytest.mark.parametrize("fn", INDEX_LOOPS, ids=lambda f: f.__name__)
def test_a_loop_over_an_index_is_one_scan_with_numpy_values(fn, mesh, compiler):
    rng = np.random.default_rng(3)
    x = rng.random((48, 48))
    args = (x, rng.random((48, 1)) * 6) if fn is neighbours else (x,)
    f = _jit(fn, mesh, len(args), backend=compiler)
    roll = f.lower(*args).stages["roll"]
    assert [op.attrs["length"] for op in _scans(roll)] in ([48], [46], [23]), fn.__name__
    assert len(roll.ops) < 40
    want = fn(*[a.copy() for a in args])
    np.testing.assert_allclose(np.asarray(f(*[a.copy() for a in args])), want, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("fn", INDEX_LOOPS, ids=lambda f: f.__name__)
def test_a_loop_over_an_index_does_not_grow_with_its_length(fn):
    texts = {}
    for n in (48, 96):
        rng = np.random.default_rng(n)
        args = (rng.random((n, n)), rng.random((n, 1))) if fn is neighbours else (rng.random((n, n)),)
        text = print_graph(spmd.jit(fn).lower(*args).stages["optimized"])
        texts[n] = re.sub(r"\b\d+\b", "N", text)          # the sizes differ, the program not
    assert texts[48] == texts[96]


def test_positions_that_step_unevenly_end_the_loop():
    """Iterations 0-9 step by 1, then the index jumps: the first ten are one scan; the rest
    stay as they are (too few to roll) and the values are numpy's."""
    def f(x):
        out = x * 0.0
        for i in list(range(10)) + [20, 13, 17]:
            out[i] = np.sqrt(x[i]) + 1.0
        return out

    x = np.random.default_rng(4).random((32, 32))
    import os
    os.environ["SPMD_ROLL_MIN_OPS"] = "8"
    try:
        roll = spmd.jit(f).lower(x).stages["roll"]
    finally:
        del os.environ["SPMD_ROLL_MIN_OPS"]
    assert [op.attrs["length"] for op in _scans(roll)] == [10]
    np.testing.assert_array_equal(np.asarray(spmd.jit(f)(x)), f(x))


def test_nested_loops_become_nested_scans():
    def f(p, b):
        for _ in range(6):                     # time steps
            p = sweeps(p, b, 30)
            b = b * 0.9 + p * 0.01
        return p, b

    rng = np.random.default_rng(1)
    p0, b0 = rng.random((12, 12)), rng.random((12, 12))
    low = spmd.jit(f).lower(p0, b0)
    # the first time step writes into the argument p, the others into a new array: it
    # stays out of the outer loop (its sweeps rolled on their own)
    outer = [op for op in _scans(low.stages["roll"]) if op.attrs["length"] == 5]
    assert len(outer) == 1 and len(low.stages["roll"].ops) < 20
    (inner,) = _scans(outer[0].attrs["body"])
    assert inner.attrs["length"] == 30
    got = spmd.jit(f)(p0.copy(), b0.copy())
    want = f(p0.copy(), b0.copy())
    assert all(np.array_equal(g, w) for g, w in zip(got, want))


def test_rolling_can_be_turned_off(monkeypatch):
    monkeypatch.setenv("SPMD_ROLL", "0")
    low = spmd.jit(sweeps, static_argnums=(2,)).lower(np.zeros((8, 8)), np.ones((8, 8)), 50)
    assert not _scans(low.stages["roll"])


def test_a_gradient_through_a_python_loop_is_right():
    """The backward pass reads every iteration's values: not a repeat, left unrolled."""
    def loss(w, x):
        for _ in range(40):
            x = np.tanh(x @ w) + x
        return (x ** 2).sum()

    rng = np.random.default_rng(2)
    w, x = rng.standard_normal((4, 4)) * 0.1, rng.standard_normal((3, 4))
    g = spmd.jit(spmd.grad(loss))(w, x)
    eps = 1e-6
    num = np.zeros_like(w)
    for i in np.ndindex(w.shape):
        d = np.zeros_like(w)
        d[i] = eps
        num[i] = (loss(w + d, x) - loss(w - d, x)) / (2 * eps)
    assert np.allclose(np.asarray(g), num, rtol=1e-5, atol=1e-7)


# ---------------------------------------------------------------- random loop bodies
UNARY = [lambda x: np.tanh(x), lambda x: x * 0.75, lambda x: np.sqrt(np.abs(x) + 1.0),
         lambda x: np.roll(x, 1, axis=0), lambda x: x[::-1] * 1.0, lambda x: x - x.mean(0)]
BINARY = [lambda x, y: x + y, lambda x, y: x * y, lambda x, y: np.maximum(x, y), lambda x, y: x - 0.5 * y]


@st.composite
def loop_bodies(draw):
    """A random loop body over two carried arrays and one captured array."""
    steps = draw(st.lists(st.tuples(st.integers(0, len(UNARY) - 1), st.integers(0, len(BINARY) - 1),
                                    st.integers(0, 2), st.integers(0, 2)), min_size=1, max_size=5))

    def body(a, b, c):
        vals = [a, b, c]
        for u, bi, i, j in steps:
            vals.append(BINARY[bi](UNARY[u](vals[i]), vals[j]))
        return np.tanh(vals[-1]), vals[-2] * 0.5
    return body


@settings(max_examples=25, deadline=None)
@given(loop_bodies(), st.integers(4, 12), st.sampled_from([0, 1, 2]))
def test_random_loops_roll_and_agree_with_numpy(body, nit, m):
    import os
    os.environ["SPMD_ROLL_MIN_OPS"] = "1"
    try:
        def f(a, b, c):
            for _ in range(nit):
                a, b = body(a, b, c)
            return a, b

        rng = np.random.default_rng(nit)
        a, b, c = (rng.standard_normal((6, 4)) for _ in range(3))
        fj = _jit(f, MESHES[m], 3)
        assert _scans(fj.lower(a, b, c).stages["roll"])
        got = fj(a, b, c)
        want = f(a, b, c)
        for g, w in zip(got, want):
            np.testing.assert_allclose(np.asarray(g), w, rtol=1e-12, atol=1e-12)
    finally:
        del os.environ["SPMD_ROLL_MIN_OPS"]


def test_the_pass_leaves_short_loops_alone():
    def f(x):
        for _ in range(3):
            x = np.tanh(x) + 1.0
        return x
    g = spmd.jit(f).lower(np.zeros(4)).stages["traced"]
    assert roll_loops(g) is g
