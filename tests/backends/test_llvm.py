"""The LLVM backend against the numpy backend (the reference): every op of the registry,
random elementwise/reduce chains (hypothesis), the fusion patterns that matter (softmax,
layernorm, GELU, sum(x+y*z)), dot_general with folded transposes, threads, the compile
cache, collectives between kernels and ops that fall back to numpy."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import spmd
from opinfo import expected, ops_to_test, samples, seed_of, tolerance
from spmd.backends import compile_graph
from spmd.backends.llvm import compile_llvm
from spmd.backends.llvm.executable import KernelStep
from spmd.ir import REGISTRY, Graph
from spmd.ir.ops import names as opnames
from spmd.ir.ops.names import (
    ADD, CONSTANT, CONVERT, EXP, PAD, REVERSE, ROLL, SLICE, TANH, TRANSPOSE
)


def close(got, want, what=""):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, (what, got.dtype, got.shape, want.dtype, want.shape)
    rtol, atol = tolerance(got.dtype)
    if rtol == 0:
        assert np.array_equal(got, want), f"{what}\n got {got}\nwant {want}"
    else:
        np.testing.assert_allclose(got, want, rtol=4 * rtol, atol=4 * atol, equal_nan=True, err_msg=what)


def both(fn, *args, **kw):
    """fn run by spmd.jit on both backends: (llvm outputs, numpy outputs)."""
    a = spmd.jit(fn, backend="llvm", **kw)(*args)
    b = spmd.jit(fn, backend="numpy", **kw)(*args)
    return a, b


def kernels(fn, *args):
    exe = spmd.jit(fn, backend="llvm").lower(*args).compile()
    return exe, [s for s in exe.steps if isinstance(s, KernelStep)]


# -------------------------------------------------------------------------- every op
VIEW_OPS = ("broadcast_in_dim", "transpose", "slice", "reshape", "iota", "constant")


@pytest.mark.parametrize("name", ops_to_test())
def test_every_op(name):
    """Each sample of the OpInfo table as a one-op program. Data-movement ops are followed
    by a convert, so they are compiled into a kernel rather than run as numpy views."""
    rng = np.random.default_rng(seed_of(name))
    for operands, attrs in samples(name, rng):
        g = Graph(name)
        ins = [g.add_input(x.shape, x.dtype) for x in operands]
        out = g.emit(name, *ins, **attrs)
        if name in VIEW_OPS:
            out = g.emit(CONVERT, out, dtype=out.dtype)
        g.outputs = [out]
        (got,) = compile_llvm(g)([np.asarray(x) for x in operands])
        close(got, expected(name, operands, attrs), f"{name} {[x.shape for x in operands]} {attrs}")


def test_elementwise_ops_are_compiled_natively():
    """The ops with a scalar lowering become kernels (not numpy fallbacks) for floats."""
    for name, op in REGISTRY.items():
        if op.family != "elementwise" or op.scalar is None or "float32" not in op.dtypes:
            continue
        g = Graph(name)
        n = 2 if name not in ("select",) else 3
        ins = [g.add_input((5,), "float32") for _ in range(n)]
        if name == "select":
            ins[0] = g.add_input((5,), "bool")
            out = g.emit(name, ins[0], ins[1], ins[2])
        elif name in ("compare",):
            out = g.emit(name, ins[0], ins[1], direction="LT")
        elif name == "convert":
            out = g.emit(name, ins[0], dtype="int32")
        elif name == "bitcast":
            out = g.emit(name, ins[0], dtype="uint32")
        else:
            try:
                out = g.emit(name, *ins[:2])
            except Exception:
                out = g.emit(name, ins[0])
        g.outputs = [out]
        exe = compile_llvm(g)
        assert [type(s) for s in exe.steps] == [KernelStep], name


FLOAT_EDGES = np.array([0.0, -0.0, 1e-30, -1e-30, 1e-6, 0.5, -0.5, 3.0, -20.0, 20.0, 87.0, -87.0,
                        88.5, 89.0, -90.0, -104.0, 100.0, 1e30, -1e30, np.inf, -np.inf, np.nan], np.float32)


@pytest.mark.parametrize("fn", [np.exp, np.log, np.log1p, np.tanh, np.sqrt, lambda x: 1 / (1 + np.exp(-x))])
def test_float32_math_edges(fn):
    """The inline float32 polynomials: accurate over the range and right at inf, nan, 0,
    denormals and where exp overflows or underflows."""
    x = np.concatenate([FLOAT_EDGES, np.linspace(-10, 10, 1001, dtype=np.float32),
                        np.geomspace(1e-38, 1e38, 301).astype(np.float32)])
    got, want = both(fn, x)
    with np.errstate(all="ignore"):
        ref = fn(x.astype(np.float64)).astype(np.float32)
    np.testing.assert_allclose(got, ref, rtol=3e-6, atol=1e-37, equal_nan=True)
    assert np.array_equal(np.isnan(got), np.isnan(want))


# --------------------------------------------------------- random elementwise/reduce chains
SHAPES = [(), (0,), (1,), (7,), (9,), (3, 5), (2, 0, 3), (17, 9), (4, 1, 33)]
UNARY = [np.negative, np.abs, np.tanh, lambda x: np.exp(np.clip(x, -5, 5)), lambda x: np.log(np.abs(x) + 1),
         lambda x: np.sqrt(np.abs(x)), lambda x: np.maximum(x, 0), np.floor]
BINARY = [np.add, np.subtract, np.multiply, np.maximum, np.minimum, lambda x, y: x / (np.abs(y) + 1),
          lambda x, y: np.where(x > y, x, y * 2)]
REDUCE = [np.sum, np.max, np.min, np.mean]


@st.composite
def chains(draw):
    shape = draw(st.sampled_from(SHAPES))
    dtype = draw(st.sampled_from(["float32", "float64"]))
    steps = []
    for _ in range(draw(st.integers(1, 7))):
        kind = draw(st.sampled_from(["u", "b", "b", "r", "c"]))
        if kind == "r":
            axis = draw(st.integers(-1, len(shape) - 1)) if shape else -1
            k = 0 if 0 in shape else draw(st.integers(0, len(REDUCE) - 1))   # only sum has an identity
            steps.append(("r", k, axis))
        elif kind == "c":
            steps.append(("c", draw(st.floats(-2, 2, allow_nan=False, width=32))))
        else:
            k = draw(st.integers(0, (len(UNARY) if kind == "u" else len(BINARY)) - 1))
            steps.append((kind, k, draw(st.integers(0, 10))))
    seed = draw(st.integers(0, 2**16))
    return shape, dtype, steps, seed


def run_chain(steps):
    def fn(x, y):
        vals = [x, y]
        for s in steps:
            if s[0] == "u":
                vals.append(UNARY[s[1]](vals[s[2] % len(vals)]))
            elif s[0] == "b":
                vals.append(BINARY[s[1]](vals[-1], vals[s[2] % len(vals)]))
            elif s[0] == "c":
                vals.append(vals[-1] * s[1] + 1)
            else:
                v = vals[-1]
                if v.ndim == 0:
                    vals.append(REDUCE[s[1]](v))
                else:
                    # reduce, then broadcast back (the epilogue pattern of softmax)
                    vals.append(v - REDUCE[s[1]](v, axis=s[2], keepdims=True))
        return vals[-1], vals[len(vals) // 2]
    return fn


@settings(max_examples=40, deadline=None)
@given(chains())
def test_random_chains_match_numpy(chain):
    shape, dtype, steps, seed = chain
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(dtype)
    y = rng.standard_normal(shape).astype(dtype)
    fn = run_chain(steps)
    got, want = both(fn, x, y)
    for a, b in zip(got, want):
        close(a, b, str(steps))


# ------------------------------------------------------------------------ fusion patterns
def softmax(x):
    m = np.max(x, axis=-1, keepdims=True)
    e = np.exp(x - m)
    return e / np.sum(e, axis=-1, keepdims=True)


def layernorm(x, g, b):
    mu = np.mean(x, axis=-1, keepdims=True)
    xc = x - mu
    var = np.mean(xc * xc, axis=-1, keepdims=True)
    return xc / np.sqrt(var + 1e-5) * g + b


def gelu(x):
    return 0.5 * x * (1 + np.tanh(0.7978845608 * (x + 0.044715 * x ** 3)))


def sum_fma(x, y, z):
    return np.sum(x + y * z)


@pytest.mark.parametrize("shape", [(3, 7), (64, 1000), (1, 1), (0, 5), (130, 33)])
def test_softmax_and_layernorm_fuse_into_one_kernel(shape):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(shape) * 4).astype(np.float32)
    g, b = rng.standard_normal(shape[-1:]).astype(np.float32), rng.standard_normal(shape[-1:]).astype(np.float32)
    for fn, args in ((softmax, (x,)), (layernorm, (x, g, b))):
        got, want = both(fn, *args)
        close(got, want, fn.__name__)
        exe, ks = kernels(fn, *args)
        assert len(exe.steps) == 1 and len(ks) == 1, [getattr(s, "name", s) for s in exe.steps]


@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 1000, 70001])
def test_gelu_and_sum_fma_fuse(n):
    rng = np.random.default_rng(n)
    x, y, z = (rng.standard_normal(n).astype(np.float32) for _ in range(3))
    close(*both(gelu, x), "gelu")
    got, want = both(sum_fma, x, y, z)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    for fn, args in ((gelu, (x,)), (sum_fma, (x, y, z))):
        exe, ks = kernels(fn, *args)
        assert len(ks) == 1 and len(exe.steps) == 1


def test_reductions_over_leading_and_several_axes():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((6, 5, 4)).astype(np.float64)
    xi = rng.integers(-5, 5, (6, 5, 4)).astype(np.int32)
    xb = x > 0

    def f(x, xi, xb):
        return (x.sum(0), x.max((0, 2)), x.min(), np.prod(x[:2], 1), xi.sum(1), xi.max(0), np.any(xb, 0),
                np.all(xb, (1, 2)), x.transpose(2, 0, 1).sum(-1) + x.mean(1).T)
    for a, b in zip(*both(f, x, xi, xb)):
        close(a, b)


def test_views_inside_kernels():
    """Transposes, slices, reshapes and broadcasts become index arithmetic in the kernel."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((6, 8)).astype(np.float32)
    v = rng.standard_normal(8).astype(np.float32)

    def f(x, v):
        a = np.exp(x).T[::2, 1:5] * 2                  # transpose + strided slice of a computed value
        b = (x + v).reshape(2, 3, 8).sum(1)            # reshape of a computed value (split dims)
        c = np.arange(8, dtype=np.float32) * v         # iota
        d = x.reshape(48)[5:20] + 1                    # reshape of an input
        return a, b, c, d, np.exp(x).reshape(1, 6, 1, 8)
    for a, b in zip(*both(f, x, v)):
        close(a, b)


def test_outputs_inside_a_kernel_are_stored():
    """A value that is both a program output and used further in the kernel."""
    x = np.linspace(-3, 3, 60, dtype=np.float32).reshape(6, 10)

    def f(x):
        e = np.exp(x)
        return e, e / np.sum(e, axis=1, keepdims=True), np.tanh(e).T
    for a, b in zip(*both(f, x)):
        close(a, b)


def test_integer_and_bool_kernels():
    rng = np.random.default_rng(3)
    a = rng.integers(-50, 50, (9, 7)).astype(np.int64)
    b = rng.integers(-5, 5, (9, 7)).astype(np.int64)

    def f(a, b):
        return (a * b - 3, np.maximum(a, b), a > b, (a > 0) & (b < 0), np.abs(a) % 7,
                np.where(a > b, a, -b), (a + 0.5).astype(np.int32), a.astype(np.float32) / 3)
    for x, y in zip(*both(f, a, b)):
        close(x, y)


# ----------------------------------------------------------------------------- dot_general
def test_dot_general_with_transposes():
    rng = np.random.default_rng(4)
    a = rng.standard_normal((5, 7)).astype(np.float32)
    b = rng.standard_normal((7, 3)).astype(np.float32)
    c = rng.standard_normal((2, 5, 7)).astype(np.float64)
    d = rng.standard_normal((2, 7, 4)).astype(np.float64)
    i = rng.integers(-3, 3, (4, 4)).astype(np.int32)

    def f(a, b, c, d, i):
        return (a @ b, a.T.T @ b, (a @ b).T, b.T @ a.T, np.exp(a) @ b, c @ d, np.einsum("bij,bjk->bki", c, d),
                i @ i.T, a[:0] @ b, a[:, :0] @ b[:0])
    for x, y in zip(*both(f, a, b, c, d, i)):
        close(x, y)


def test_transposed_dot_is_folded():
    """(a @ b).T is emitted as b.T @ a.T: no transpose op is left to copy data."""
    a, b = np.ones((4, 3), np.float32), np.ones((3, 5), np.float32)
    low = spmd.jit(lambda a, b: (a @ b).T, backend="llvm").lower(a, b)
    names = [op.name for op in low.graph.ops]
    assert names == ["dot_general"], names


# -------------------------------------------------------------------------------- threads
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_threads_split_rows_and_reductions(threads):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((300, 257)).astype(np.float32)
    v = rng.standard_normal(300 * 257).astype(np.float64)

    def f(x, v):
        return softmax(x), np.sum(v * v), x.sum(0), np.max(v)
    low = spmd.jit(f, backend="llvm").lower(x, v)
    exe = compile_llvm(low.graph, threads=threads)
    pars = sorted(s.par or "-" for s in exe.steps if isinstance(s, KernelStep))
    assert "rows" in pars and "reduction" in pars, pars
    got = exe([x, v])
    want = compile_graph(low.graph, "numpy")([x, v])
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


# -------------------------------------------------------------------------- compile cache
def test_disk_cache_is_used_by_a_new_process(tmp_path):
    script = textwrap.dedent("""
        import numpy as np, spmd
        f = spmd.jit(lambda x: np.tanh(x) * 2 + np.sum(x), backend="llvm")
        x = np.arange(10, dtype=np.float32)
        exe = f.lower(x).compile()
        print(exe.stats["cache"], float(f(x)[3]))
    """)
    env = dict(os.environ, SPMD_CACHE_DIR=str(tmp_path))
    runs = [subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
            for _ in range(2)]
    for r in runs:
        assert r.returncode == 0, r.stderr
    (first, v1), (second, v2) = (r.stdout.split() for r in runs)
    assert (first, second) == ("miss", "disk")
    assert v1 == v2 and abs(float(v1) - (np.tanh(3) * 2 + 45)) < 1e-4
    assert len(list(tmp_path.glob("*.o"))) == 2       # the program, and the native schedule helpers


def test_memory_cache_within_a_process():
    f = lambda x: np.exp(x) + 1  # noqa: E731
    x = np.zeros(3, np.float32)
    spmd.jit(f, backend="llvm").lower(x).compile()
    exe = spmd.jit(f, backend="llvm").lower(x).compile()
    assert exe.stats["cache"] == "memory"


# ----------------------------------------------------- collectives and numpy fallbacks
def test_collectives_run_between_kernels():
    mesh = spmd.Mesh((2,), ("x",))
    rng = np.random.default_rng(6)
    x = rng.standard_normal((8, 6)).astype(np.float32)
    w = rng.standard_normal((6, 4)).astype(np.float32)

    def f(x, w):
        h = np.tanh(x @ w)
        return np.sum(h * h), softmax(h)
    kw = dict(in_shardings=(mesh.sharding("x", None), mesh.sharding(None, None)))
    got, want = both(f, x, w, **kw)
    for a, b in zip(got, want):
        np.testing.assert_allclose(np.asarray(a.numpy()), np.asarray(b.numpy()), rtol=1e-5, atol=1e-5)
    low = spmd.jit(f, backend="llvm", **kw).lower(x, w)
    assert any(op.opdef.needs_comm for op in low.graph.ops)


def test_fallback_ops_between_kernels():
    rng = np.random.default_rng(7)
    x = rng.standard_normal((5, 4)).astype(np.float32)
    idx = np.array([4, 0, 2, 2], np.int64)

    def f(x, idx):
        a = np.concatenate([np.exp(x), x * 2], axis=0)
        c = np.take(x * 3, idx, axis=0) ** 1.5
        return a.sum(1), c
    for a, b in zip(*both(f, x, idx)):
        close(a, b)
    # pad (no numpy spelling in the tracer) between two kernels, as a graph
    g = Graph("pad")
    xv = g.add_input(x.shape, "float32")
    t = g.emit(TANH, xv)
    p = g.emit(PAD, t, g.emit(CONSTANT, value=np.array(0.5, np.float32)), low=(1, 0), high=(0, 2),
               interior=(1, 0))
    g.outputs = [g.emit(opnames.REDUCE, g.emit(EXP, p), kind="sum", axes=(1,))]
    close(compile_llvm(g)([x])[0], compile_graph(g, "numpy")([x])[0])


def test_bad_input_is_a_clear_error():
    exe = spmd.jit(lambda x: x + 1, backend="llvm").lower(np.zeros(3, np.float32)).compile()
    with pytest.raises(spmd.SpmdError, match="input 0 is float64"):
        exe([np.zeros(3)])


def test_complex_elementwise_ops_compile_into_kernels():
    """add, subtract, multiply, negate, conj, real, imag, select, ==, != and converts are
    lowered on complex values (a pair of floats) and fuse into one kernel; divide, exp,
    abs and the reductions of complex values run through numpy."""
    rng = np.random.default_rng(0)
    edges = np.array([0, -0.0, 1, np.nan, 0.5, 3.0, -1.0, -2.5])      # (overflow: numpy may use FMA)
    for dt, ft in (("complex64", "float32"), ("complex128", "float64")):
        z = (rng.standard_normal((6, 8)) + 1j * rng.standard_normal((6, 8))).astype(dt)
        z[0, :] = (edges + 1j * np.roll(edges, 3)).astype(dt)
        w = (rng.standard_normal((6, 8)) + 1j * rng.standard_normal((6, 8))).astype(dt)
        x = rng.standard_normal((6, 8)).astype(ft)

        def f(z, w, x):
            y = np.conj(z * w - w) + (-z) * x + (2 - 1j)
            y = np.where(z == w, y, y * y) + np.where(z != z, 1j, 0)
            return y.real + np.imag(y) * x, y, y.astype(np.complex128 if dt == "complex64" else np.complex64)

        exe, ks = kernels(f, z, w, x)
        assert ks and all(type(s) is KernelStep for s in exe.steps), [type(s).__name__ for s in exe.steps]
        with np.errstate(all="ignore"):
            want = f(z, w, x)
        got = spmd.jit(f, backend="llvm")(z, w, x)
        for g, wv in zip(got, want):      # compared in the precision it was computed in
            close(np.asarray(g).astype(np.result_type(ft, dt) if np.iscomplexobj(wv) else ft),
                  np.asarray(wv).astype(np.result_type(ft, dt) if np.iscomplexobj(wv) else ft), f"complex kernel {dt}")


def test_reversed_dims_inside_kernels():
    """reverse is index arithmetic in a fused kernel (a coefficient of -1): reversed
    inputs and computed values, composed with transposes and slices, one kernel."""
    from spmd.backends.llvm.fuse import fuse
    from spmd.backends.llvm.lowering_table import fusible
    from spmd.ir import Graph
    rng = np.random.default_rng(3)
    x = rng.standard_normal((5, 7))
    g = Graph("f")
    a = g.add_input((5, 7), "float64")
    e = g.emit(EXP, a)
    r = g.emit(REVERSE, e, dimensions=(0, 1))
    t = g.emit(TRANSPOSE, g.emit(REVERSE, a, dimensions=(1,)), permutation=(1, 0))
    s = g.emit(SLICE, g.emit(REVERSE, t, dimensions=(0,)), start=(1, 0), limit=(6, 5), stride=(2, 1))
    out = g.emit(ADD, r, g.emit(REVERSE, a, dimensions=(0,)))
    g.outputs = [out, s]
    want = [np.flip(np.exp(x)) + x[::-1], x[:, ::-1].T[::-1][1:6:2]]
    from spmd.backends import compile_graph
    got = compile_graph(g, "llvm")([x])
    for gv, w in zip(got, want):
        np.testing.assert_array_equal(gv, w)
    (k,) = fuse(g, fusible).kernels()            # (the output made only of views is a view)
    assert sum(op.name == "reverse" for op in k.ops) == 2 and k.root is out


def test_rolled_dims_inside_kernels():
    """roll is two guarded stretches of its operand in a fused kernel: the Game of Life's
    neighbour count by np.roll is one kernel, numpy's integers bit for bit."""
    from spmd.backends.llvm.fuse import fuse
    from spmd.backends.llvm.lowering_table import fusible
    from spmd.ir import Graph
    rng = np.random.default_rng(4)
    x = rng.integers(0, 2, (9, 7)).astype(np.int64)
    g = Graph("f")
    a = g.add_input((9, 7), "int64")
    total = None
    for i in (-1, 0, 1):
        for j in (-1, 0, 1):
            t = a
            if i:
                t = g.emit(ROLL, t, shift=i % 9, dimension=0)
            if j:
                t = g.emit(ROLL, t, shift=j % 7, dimension=1)
            total = t if total is None else g.emit(ADD, total, t)
    g.outputs = [total]
    want = sum(np.roll(np.roll(x, i, 0), j, 1) for i in (-1, 0, 1) for j in (-1, 0, 1))
    from spmd.backends import compile_graph
    np.testing.assert_array_equal(compile_graph(g, "llvm")([x])[0], want)
    (k,) = fuse(g, fusible).kernels()
    assert sum(op.name == "roll" for op in k.ops) == 12 and k.root is total


# ------------------------------------------------------------ slice writes, verified modules
def _hpsi(H, psi, phi):
    phi[..., 2] = psi[..., 0] - psi[..., 1]
    H[:3] -= 0.7 * phi
    return H, phi


@pytest.mark.parametrize("devices", [1, 2, 4])
def test_a_column_write_then_a_sliced_update_compiles(devices):
    """A region where a select is decided stores an output computed outside the innermost
    loop: the store still goes inside that loop (LLVM rejected the module: "Instruction
    does not dominate all uses!")."""
    rng = np.random.default_rng(0)
    H, psi, phi = rng.normal(size=(16, 5, 3)), rng.normal(size=(3, 5, 2)), rng.normal(size=(3, 5, 3))
    want = _hpsi(H.copy(), psi.copy(), phi.copy())
    mesh = spmd.Mesh((devices,), ("d",))
    args = H.copy(), psi.copy(), phi.copy()
    got = spmd.jit(_hpsi, in_shardings=(mesh.sharding("d", None, None), None, None), backend="llvm")(*args)
    # both results are arguments the function wrote: handed back as themselves, as numpy does
    assert got[0] is args[0] and got[1] is args[2]
    for g, w in zip(got, want):
        close(g, w)


def test_a_module_llvm_rejects_names_the_kernel_and_the_lines(monkeypatch):
    """A code generator bug is an InvalidModule naming the kernel, its ops and the user's
    lines, not llvmlite's RuntimeError."""
    from spmd.backends.llvm import codegen
    from spmd.backends.llvm.jit import InvalidModule

    def old_store(self, scope, v, x, amap):      # the bug fixed above: the store where x is
        loops = [terms[0][0] if terms else None for terms, _ in amap]
        part = tuple(self.ranges[var] if var else None for var in loops)
        family = tuple(self.loop_key.get(var) if var else None for var in loops)
        if self.store_family.setdefault(v, family) != family or (v, part) in self.stored:
            return
        self.stored.add((v, part))
        self.store(scope, v, x, amap)
    monkeypatch.setattr(codegen.KernelCodegen, "store_escaping", old_store)
    mesh = spmd.Mesh((4,), ("d",))
    f = spmd.jit(_hpsi, in_shardings=(mesh.sharding("d", None, None), None, None), backend="llvm")
    with pytest.raises(InvalidModule, match=r"kernel k\d+ \(.*subtract.*, from test_llvm\.py:\d+.*\): "
                                            r"Instruction does not dominate"):
        f(np.ones((16, 5, 3)), np.ones((3, 5, 2)), np.ones((3, 5, 3)))


def test_verified_names_the_function_llvm_rejects():
    from spmd.backends.llvm.jit import InvalidModule, verified
    good = "define void @fine(ptr %p) {\nentry:\n  store i64 1, ptr %p\n  ret void\n}"
    bad = "define void @broken(ptr %p) {\nentry:\n  br label %b\nb:\n  store i64 %x, ptr %p\n  ret void\n" \
          "c:\n  %x = add i64 1, 2\n  br label %b\n}"
    verified(good)
    with pytest.raises(InvalidModule, match="broken") as e:
        verified(good + "\n" + bad)
    assert e.value.function == "broken"


_EXPRS = {"a - b": lambda a, b: a - b, "0.7 * a": lambda a, b: 0.7 * a,
          "np.tanh(a) + b": lambda a, b: np.tanh(a) + b, "np.maximum(a, b)": np.maximum,
          "a * b + 1.5": lambda a, b: a * b + 1.5}


@st.composite
def _write_programs(draw):
    """(devices, split dim of H, shapes, steps): writes `T[key] op= expr(A[ka], B[kb])` on
    H (split) and P (replicated) whose keys are ints, windows or whole dims, of one length
    per dim."""
    devices = draw(st.sampled_from([1, 2, 4]))
    n1, n2 = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    n0 = devices * draw(st.integers(1, 3)) + draw(st.sampled_from([0, 1]))
    shapes = {"H": (n0, n1, n2), "P": (draw(st.integers(1, n0)), n1, n2)}
    steps = []
    # a partial write of P, then a write of H reading P (the pattern of the regression
    # above), then any writes
    for target in ["P", "H"] + draw(st.lists(st.sampled_from(["H", "P"]), max_size=2)):
        kinds = [draw(st.sampled_from(["int", "window", "all"])) for _ in range(3)]
        lens = [draw(st.integers(1, shapes[target][d])) if k == "window" else shapes[target][d]
                for d, k in enumerate(kinds)]
        if target == "H" and len(steps) == 1 and draw(st.booleans()):
            kinds, lens = ["window"] * 3, list(shapes["P"])          # H[a:b] op= f(P, ...)

        def key(name):
            out = []
            for d, (kind, n) in enumerate(zip(kinds, lens)):
                size = shapes[name][d]
                if kind == "int":
                    out.append(draw(st.integers(-size, size - 1)))
                elif n > size:
                    return None
                elif kind == "all" and n == size:
                    out.append(slice(None))
                else:
                    lo = draw(st.integers(0, size - n))
                    out.append(slice(lo, lo + n))
            return tuple(out)
        tkey = key(target)
        srcs = []
        first = "P" if target == "H" and len(steps) == 1 else draw(st.sampled_from(["H", "P"]))
        for name in (first, draw(st.sampled_from(["H", "P"]))):
            k = key(name)
            srcs.append((name, k) if k is not None else (target, tkey))
        op = draw(st.sampled_from(["=", "+=", "-=", "*="]))
        steps.append((target, tkey, op, draw(st.sampled_from(sorted(_EXPRS))), srcs))
    return devices, draw(st.sampled_from([0, 1])), shapes, steps


def _run_writes(steps):
    def f(H, P):
        arrays = {"H": H, "P": P}
        for target, tkey, op, expr, ((na, ka), (nb, kb)) in steps:
            r = _EXPRS[expr](arrays[na][ka], arrays[nb][kb])
            t = arrays[target]
            if op == "=":
                t[tkey] = r
            elif op == "+=":
                t[tkey] += r
            elif op == "-=":
                t[tkey] -= r
            else:
                t[tkey] *= r
        return H, P
    return f


@pytest.mark.slow
@settings(max_examples=80, deadline=None)
@given(_write_programs())
def test_random_slice_writes_compile_to_valid_modules(program):
    """Random elementwise programs of slice writes and in-place updates, over several
    shapes and splits (uneven too): every module LLVM verifies (jit.verified), and the
    results are numpy's."""
    devices, dim, shapes, steps = program
    rng = np.random.default_rng(1)
    H, P = rng.normal(size=shapes["H"]), rng.normal(size=shapes["P"])
    f = _run_writes(steps)
    want = f(H.copy(), P.copy())
    mesh = spmd.Mesh((devices,), ("d",))
    spec = [None, None, None]
    spec[dim] = "d"
    got = spmd.jit(f, in_shardings=(mesh.sharding(*spec), None), backend="llvm")(H.copy(), P.copy())
    for g, w in zip(got, want):
        close(np.asarray(g), w, str(steps))
