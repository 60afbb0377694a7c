"""Fused kernels at the machine's limit (issue 34): transposed reads run in tiles
(codegen.nest_tiled), row reductions fused with the work around them (softmax, layernorm,
logsumexp: the row's costly values kept in a row buffer, codegen.keep_row; max and min
vectorised with llvm.maximum/minimum). Each against plain numpy over shapes that are not
multiples of the tile, one row, empty; float and int dtypes; 1, 2 and 4 devices; threads.
Every module the backend compiles is checked by LLVM's verifier (jit.verified); the
tests also verify the module texts themselves and look in them for the tiles and rows."""
import contextlib
import re
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import spmd
import spmd.backends.llvm.codegen as codegen
from spmd.backends import compile_graph
from spmd.backends.llvm import compile_llvm
from spmd.backends.llvm.executable import KernelStep
from spmd.backends.llvm.jit import verified

SMALL_TILE = 8


@contextlib.contextmanager
def small_tiles():
    """Tiles of 8 from 8x8 on, whatever the stride: small programs take the tiled path
    (the defaults tile only large operands, where it pays)."""
    saved = codegen.TILE, codegen.TILE_MIN, codegen.TILE_ROWS
    codegen.TILE, codegen.TILE_MIN, codegen.TILE_ROWS = SMALL_TILE, SMALL_TILE, 1
    try:
        yield
    finally:
        codegen.TILE, codegen.TILE_MIN, codegen.TILE_ROWS = saved


def module_texts(exe):
    texts = list(exe.ir.values())
    for t in texts:
        verified(t)
    return "\n".join(texts)


def tiled(text, tile=SMALL_TILE) -> bool:
    """Does a loop of the module step by the tile?"""
    return re.search(rf"%i\d+\.n = add i64 %i\d+, {tile}\n", text) is not None


def check(got, want, dtype):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, got.dtype, want.shape, want.dtype)
    if np.dtype(dtype).kind in "iub":
        np.testing.assert_array_equal(got, want)
    else:
        tol = 2e-5 if np.dtype(dtype) == np.float32 else 1e-12
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol, equal_nan=True)


def data(rng, shape, dtype):
    if np.dtype(dtype).kind in "iu":
        return rng.integers(-50, 50, shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


# ----------------------------------------------------------------------------- transposes
TRANSPOSED = {
    "b + a.T": (lambda a, b: b + a.T, lambda a, b: b + a.T),
    "a.T * 3 - b, and a.T": (lambda a, b: (a.T * 3 - b, a.T + 0), lambda a, b: (a.T * 3 - b, a.T + 0)),
    "maximum(a.T, b) + b": (lambda a, b: np.maximum(a.T, b) + b, lambda a, b: np.maximum(a.T, b) + b),
    "(a.T + b).T + a": (lambda a, b: (a.T + b).T + a, lambda a, b: (a.T + b).T + a),
}


@settings(max_examples=40, deadline=None)
@given(rows=st.one_of(st.sampled_from([0, 1, 8, 9, 16, 17]), st.integers(0, 40)), cols=st.integers(1, 40),
       dtype=st.sampled_from(["float32", "float64", "int32", "int64"]), expr=st.sampled_from(sorted(TRANSPOSED)),
       threads=st.sampled_from([1, 2]), seed=st.integers(0, 99))
def test_transposed_reads_in_tiles_match_numpy(rows, cols, dtype, expr, threads, seed):
    rng = np.random.default_rng(seed)
    a, b = data(rng, (cols, rows), dtype), data(rng, (rows, cols), dtype)
    fn, ref = TRANSPOSED[expr]
    with small_tiles():
        low = spmd.jit(fn, backend="llvm").lower(a, b)
        exe = compile_llvm(low.graph, threads=threads)
        text = module_texts(exe)
        got = exe([a, b])
    want = ref(a, b)
    want = want if isinstance(want, tuple) else (want,)
    for g, w in zip(got, want):
        check(g, w, dtype)
    if min(rows, cols) >= SMALL_TILE:
        assert tiled(text), expr


@settings(max_examples=25, deadline=None)
@given(shape=st.tuples(st.integers(1, 3), st.integers(1, 20), st.integers(1, 20)),
       perm=st.sampled_from([(0, 2, 1), (2, 1, 0), (1, 2, 0), (2, 0, 1)]),
       dtype=st.sampled_from(["float32", "int64"]), seed=st.integers(0, 99))
def test_transposes_of_three_dims_inside_expressions(shape, perm, dtype, seed):
    rng = np.random.default_rng(seed)
    x = data(rng, shape, dtype)
    y = data(rng, tuple(shape[p] for p in perm), dtype)

    def f(x, y):
        t = np.transpose(x, perm)
        return t * 2 + y, np.abs(t - y).sum(axis=-1)
    with small_tiles():
        got = spmd.jit(f, backend="llvm")(x, y)
    for g, w in zip(got, f(x, y)):
        check(g, w, dtype)


@pytest.mark.parametrize("devices", [1, 2, 4])
@pytest.mark.parametrize("n", [9, 24, 37])
def test_sharded_transpose_add_matches_numpy(devices, n):
    """B + A.T with A and B both split by rows (the PRK transpose), uneven splits too."""
    rng = np.random.default_rng(n)
    a, b = rng.standard_normal((n, n)), rng.standard_normal((n, n))
    mesh = spmd.Mesh((devices,), ("d",))
    rows = mesh.sharding("d", None)

    def f(a, b):
        return b + a.T, a + 1.0
    with small_tiles():
        got = spmd.jit(f, in_shardings=(rows, rows), out_shardings=(rows, rows), backend="llvm")(a, b)
    for g, w in zip(got, f(a, b)):
        np.testing.assert_array_equal(g.numpy(), w)


def test_large_transposes_are_tiled_by_default():
    """Operands whose columns do not stay in cache (a row stride of 4 KiB here) are read in
    tiles of codegen.TILE, with no constant changed; small ones are not."""
    rng = np.random.default_rng(0)
    big_a, big_b = rng.standard_normal((130, 512)), rng.standard_normal((512, 130))
    small_a, small_b = rng.standard_normal((100, 90)), rng.standard_normal((90, 100))
    for a, b, want in ((big_a, big_b, True), (small_a, small_b, False)):
        low = spmd.jit(lambda a, b: b + a.T, backend="llvm").lower(a, b)
        exe = compile_llvm(low.graph)
        assert tiled(module_texts(exe), codegen.TILE) == want, a.shape
        np.testing.assert_array_equal(exe([a, b])[0], b + a.T)


# -------------------------------------------------------------------------- row reductions
def softmax(xp):
    def f(x):
        e = xp.exp(x - xp.max(x, axis=-1, keepdims=True))
        return e / xp.sum(e, axis=-1, keepdims=True)
    return f


def layernorm(xp):
    def f(x):
        mu = xp.mean(x, axis=-1, keepdims=True)
        xc = x - mu
        return xc / xp.sqrt(xp.mean(xc * xc, axis=-1, keepdims=True) + 1e-5)
    return f


def logsumexp(xp):
    def f(x):
        m = xp.max(x, axis=-1, keepdims=True)
        return m[..., 0] + xp.log(xp.sum(xp.exp(x - m), axis=-1))
    return f


ROWS = {"softmax": softmax, "layernorm": layernorm, "logsumexp": logsumexp}


@settings(max_examples=40, deadline=None)
@given(shape=st.sampled_from([(1, 1), (1, 9), (5, 1), (3, 17), (0, 4), (4, 0), (2, 3, 33), (7, 64), (2, 130)]),
       dtype=st.sampled_from(["float32", "float64"]), name=st.sampled_from(sorted(ROWS)),
       scale=st.sampled_from([1.0, 30.0]), seed=st.integers(0, 99))
def test_row_reductions_fused_match_numpy(shape, dtype, name, scale, seed):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * scale).astype(dtype)
    fn = ROWS[name](np)
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)       # (the mean of an empty row)
            want = fn(x)
    except ValueError:                      # a max over an empty row: an error in spmd too
        with pytest.raises(ValueError):
            spmd.jit(fn, backend="llvm")(x)
        return
    exe = compile_llvm(spmd.jit(fn, backend="llvm").lower(x).graph)
    module_texts(exe)
    check(exe([x])[0], want, dtype)


@pytest.mark.parametrize("name", sorted(ROWS))
def test_row_reductions_are_one_kernel_and_softmax_computes_exp_once(name):
    x = np.random.default_rng(1).standard_normal((6, 300)).astype(np.float32)
    exe = compile_llvm(spmd.jit(ROWS[name](np), backend="llvm").lower(x).graph)
    steps = [s for s in exe.steps if isinstance(s, KernelStep)]
    assert len(exe.steps) == 1 and len(steps) == 1, exe.steps
    text = module_texts(exe)
    if name == "softmax":
        # one exp per element (its floor), kept in a row buffer for the division
        assert len(re.findall(r"call float @llvm\.floor\.f32", text)) == 1
        assert re.search(r"%row\d+ = alloca \[300 x float\]", text)
    np.testing.assert_allclose(exe([x])[0], ROWS[name](np)(x), rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_row_max_and_min_propagate_nan_and_keep_infinities(dtype):
    x = np.random.default_rng(2).standard_normal((6, 40)).astype(dtype)
    x[1, 7] = np.nan
    x[2, 0] = np.inf
    x[3, 39] = -np.inf
    x[4, :] = -np.inf
    x[5, 5] = np.nan
    x[5, 6] = np.inf

    def f(x):
        return x.max(axis=-1), x.min(axis=-1), x.max(), x.min(axis=0), softmax(np)(x)
    got = spmd.jit(f, backend="llvm")(x)
    with np.errstate(all="ignore"):
        want = f(x)
    for g, w in zip(got[:-1], want[:-1]):
        np.testing.assert_array_equal(np.asarray(g), w)     # (NaN where numpy has NaN)
    np.testing.assert_allclose(np.asarray(got[-1]), want[-1], rtol=2e-6, atol=1e-7, equal_nan=True)


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_integer_row_max_and_min(dtype):
    x = np.random.default_rng(3).integers(-1000, 1000, (5, 77)).astype(dtype)

    def f(x):
        return x.max(axis=-1), x.min(axis=-1) - x.max(axis=-1, keepdims=True)[:, 0], x - x.max(axis=-1, keepdims=True)
    for g, w in zip(spmd.jit(f, backend="llvm")(x), f(x)):
        np.testing.assert_array_equal(np.asarray(g), w)


@pytest.mark.parametrize("devices", [1, 2, 4])
@pytest.mark.parametrize("split", [0, 1])
def test_sharded_row_reductions_match_numpy(devices, split):
    """Rows split (each device its own rows) or the reduced axis split (a max and a sum
    across devices), uneven sizes."""
    x = (np.random.default_rng(devices).standard_normal((11, 45)) * 5).astype(np.float32)
    mesh = spmd.Mesh((devices,), ("d",))
    spec = [None, None]
    spec[split] = "d"
    for name, mk in ROWS.items():
        got = spmd.jit(mk(np), in_shardings=(mesh.sharding(*spec),), backend="llvm")(x)
        np.testing.assert_allclose(got.numpy(), mk(np)(x), rtol=2e-5, atol=2e-6, err_msg=name)


def test_threads_share_rows_of_a_softmax():
    """The row buffer is per call of the kernel (each thread its own stack)."""
    x = np.random.default_rng(4).standard_normal((301, 257)).astype(np.float32)
    low = spmd.jit(softmax(np), backend="llvm").lower(x)
    for threads in (1, 2, 3):
        exe = compile_llvm(low.graph, threads=threads)
        got = exe([x])[0]
        want = compile_graph(low.graph, "numpy")([x])[0]
        np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-7)


def test_sharded_transpose_packs_exchanges_and_adds_from_the_receive_buffer():
    """B + A.T, both split by rows over 2 devices: the transpose is a kernel that writes
    the buffer the all_to_all sends, the all_to_all lays the blocks it receives along rows
    (its receive buffer is its result), and the add reads each block there: no step
    copies a whole block on its own."""
    n = 128
    rng = np.random.default_rng(7)
    a, b = rng.standard_normal((n, n)), rng.standard_normal((n, n))
    mesh = spmd.Mesh((2,), ("d",))
    rows = mesh.sharding("d", None)
    f = spmd.jit(lambda a, b: b + a.T, in_shardings=(rows, rows), out_shardings=rows, backend="llvm")
    g = f.lower(a, b).graph
    (a2a,) = [op for op in g.ops if op.name == "all_to_all"]
    assert a2a.attrs["concat_dimension"] == 0
    exe = compile_llvm(g)
    steps = exe.steps
    kinds = [("kernel", [op.name for op in s.kernel.ops]) if isinstance(s, KernelStep) else s.name for s in steps]
    assert kinds == [("kernel", ["transpose"]), "all_to_all", ("kernel", ["slice", "slice", "concatenate", "add"])], kinds
    np.testing.assert_array_equal(f(a, b).numpy(), b + a.T)
