"""A scan whose body runs natively is one native instruction (backends/llvm/loops.py
scan_instrs): its iterations read and write the buffers the Python loop (run_scan) would,
so the results equal the Python loop's (SPMD_NATIVE=0) and numpy's bit for bit, for every
length (0, 1, 2, odd, even), forwards and reversed, with scanned inputs and outputs,
carried values that swap or start as one array, and a carried value the memory plan
writes over its initial buffer."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import spmd
from spmd.backends.llvm import native
from spmd.backends.llvm.schedule import Segment


def stencil(c, x, w):
    """neighbour reads of the carried grid: an iteration must not write what it reads"""
    u, = c
    new = u.copy()
    new[1:-1] = 0.5 * u[1:-1] + 0.25 * (u[2:] + u[:-2]) + x[1:-1] * w[1:-1]
    return (new,), new * 2


def swap(c, x, w):
    a, b = c
    return (b + x, a * 3 - w), a - b


def matvec(c, x, w):
    """a dot in the body (BLAS called natively, once an iteration) of a captured matrix"""
    v, = c
    return (np.outer(w, w) @ v / len(w) + x,), v * 2


BODIES = {"stencil": stencil, "swap": swap, "matvec": matvec}


def init(name, n, dtype, rng):
    if name == "swap":
        return (rng.random(n).astype(dtype), rng.random(n).astype(dtype))
    return (rng.random(n).astype(dtype),)


def program(body, reverse):
    def f(c, xs, w):
        c2, ys = spmd.scan(lambda c, x: body(c, x, w), c, xs, reverse=reverse)
        return c2, ys
    return f


def leaves(t):
    return [y for x in t for y in leaves(x)] if isinstance(t, (tuple, list)) else [t]


def loop_instrs(f, *args) -> int:
    """spmd_loop instructions in the program's native schedule"""
    low = f.lower(*args)
    assert any(op.name == "scan" for op in low.graph.ops)
    exe = low.compile()
    loop = native.helpers()["spmd_loop"]
    return sum(fn == loop for it in exe.schedule(1).items if isinstance(it, Segment) for fn, _ in it.instrs)


def check(name, length, reverse, n, dtype, seed, monkeypatch):
    rng = np.random.default_rng(seed)
    c = init(name, n, dtype, rng)
    xs = rng.random((length, n)).astype(dtype)
    w = rng.random(n).astype(dtype)
    f = program(BODIES[name], reverse)
    want = f(tuple(a.copy() for a in c), xs.copy(), w)           # numpy: spmd.scan outside a trace
    jf = spmd.jit(f)
    got = jf(tuple(a.copy() for a in c), xs.copy(), w)
    monkeypatch.setenv("SPMD_NATIVE", "0")
    stepwise = spmd.jit(f)(tuple(a.copy() for a in c), xs.copy(), w)
    monkeypatch.delenv("SPMD_NATIVE")
    for g, s, e in zip(leaves(got), leaves(stepwise), leaves(want)):
        if e is None:           # (no ys from spmd.scan run in Python for length 0)
            continue
        if name == "matvec":    # (BLAS's gemm against numpy's gemv: other sums' order)
            np.testing.assert_allclose(np.asarray(g), e, rtol=1e-5)
            np.testing.assert_allclose(np.asarray(s), e, rtol=1e-5)
        else:
            np.testing.assert_array_equal(np.asarray(g), e)
            np.testing.assert_array_equal(np.asarray(s), e)
    if length > 1:
        assert loop_instrs(jf, c, xs, w) == 1, "the scan should run as one native instruction"


@pytest.mark.parametrize("length", [0, 1, 2, 3, 4, 7])
@pytest.mark.parametrize("reverse", [False, True])
def test_a_stencil_scan_runs_natively_with_numpys_bits(length, reverse, monkeypatch):
    check("stencil", length, reverse, 9, np.float64, length, monkeypatch)


@settings(max_examples=20, deadline=None)
@given(name=st.sampled_from(sorted(BODIES)), length=st.integers(0, 6), reverse=st.booleans(),
       n=st.integers(3, 7), dtype=st.sampled_from([np.float32, np.float64]), seed=st.integers(0, 99))
def test_random_scans_natively_equal_the_python_loop_and_numpy(name, length, reverse, n, dtype, seed):
    with pytest.MonkeyPatch.context() as mp:
        check(name, length, reverse, n, dtype, seed, mp)


def test_carried_values_that_start_as_one_array():
    a = np.arange(6.0)

    def f(a):
        (x, y), _ = spmd.scan(lambda c, _: ((c[1] + 1, c[0] * 2), None), (a, a), length=5)
        return x, y
    got = spmd.jit(f)(a.copy())
    want = f(a.copy())
    for g, w in zip(got, want):
        np.testing.assert_array_equal(np.asarray(g), w)


@pytest.mark.parametrize("length", [2, 3, 4, 5])
def test_a_carried_temporary_written_over_in_place(length, monkeypatch):
    """The carried grid is a temporary of the arena that dies at the loop: its result may
    take the same slot, so the first iteration writes elsewhere (odd lengths: a second spare)."""
    u0 = np.random.default_rng(length).random(16)

    def f(u):
        t = u * 2.0

        def body(c, _):
            new = c.copy()
            new[1:-1] = 0.5 * (c[2:] + c[:-2])
            return new, None
        r, _ = spmd.scan(body, t, length=length)
        return r + 1.0
    want = f(u0.copy())
    for flag in ("1", "0"):
        monkeypatch.setenv("SPMD_NATIVE", flag)
        np.testing.assert_array_equal(np.asarray(spmd.jit(f)(u0.copy())), want)


def test_a_body_needing_python_keeps_the_python_loop(monkeypatch):
    """np.sort has no native lowering: the loop runs from Python, with the same result."""
    a = np.random.default_rng(1).random(8)

    def f(a):
        r, _ = spmd.scan(lambda c, _: (np.sort(c) * 0.5 + c, None), a, length=3)
        return r
    jf = spmd.jit(f)
    np.testing.assert_array_equal(np.asarray(jf(a.copy())), f(a.copy()))
    assert loop_instrs(jf, a) == 0
