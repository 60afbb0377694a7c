"""np.fft on traced and eager arrays, against numpy: every function with its numpy
arguments (n / s / axes / norm, odd and even lengths, float32 / float64 / complex / int
inputs) under jit on meshes of 1, 2, 4 and 2x2 devices with every input sharding; the
pencil decomposition's communication (all_to_all of a shard, never an all_gather);
gradients against finite differences; eager mode; MPI; programs written as users
write them (FFT convolution, a spectral Poisson solve)."""
from __future__ import annotations

import itertools
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import spmd
from partition_util import specs
from spmd.ir import Graph
from spmd.ir import parse_graph
from spmd.ir.ops.names import CONJ, CONSTANT, FFT, MULTIPLY, REAL
from spmd.ir.text import print_graph
from spmd.sharding import Mesh
from spmd.sharding.reshard import ReshardWarning
from paths import SCRIPTS, TESTS

MESHES = [Mesh((1,), ("x",)), Mesh((2,), ("x",)), Mesh((4,), ("x",)), Mesh((2, 2), ("a", "b"))]


def data(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    if dt.kind == "c":
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dt)
    if dt.kind in "iu":
        return rng.integers(-5, 6, size=shape).astype(dt)
    return rng.standard_normal(shape).astype(dt)


def close(got, want, what):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != {want.dtype}"
    single = want.dtype in (np.float32, np.complex64)
    scale = max(1.0, float(np.max(np.abs(want)))) if want.size else 1.0
    np.testing.assert_allclose(got, want, rtol=1e-4 if single else 1e-10,
                               atol=(1e-4 if single else 1e-10) * scale, err_msg=what)


# (description, function of the array, input shape, input dtype)
CALLS = [
    ("fft", lambda x: np.fft.fft(x), (6, 5), "float64"),
    ("fft n pad axis0 ortho", lambda x: np.fft.fft(x, n=8, axis=0, norm="ortho"), (6, 5), "complex128"),
    ("fft n trunc forward", lambda x: np.fft.fft(x, 3, -1, "forward"), (4, 5), "float32"),
    ("ifft", lambda x: np.fft.ifft(x, axis=0), (7, 4), "complex64"),
    ("rfft odd", lambda x: np.fft.rfft(x), (4, 7), "float64"),
    ("rfft n axis0", lambda x: np.fft.rfft(x, n=6, axis=0, norm="ortho"), (5, 3), "float32"),
    ("irfft", lambda x: np.fft.irfft(x), (4, 5), "complex128"),
    ("irfft odd n", lambda x: np.fft.irfft(x, n=7, axis=0, norm="forward"), (4, 3), "complex64"),
    ("fft2", lambda x: np.fft.fft2(x), (8, 6), "float64"),
    ("fft2 s", lambda x: np.fft.fft2(x, s=(5, 8)), (6, 6), "complex128"),
    ("ifft2 ortho", lambda x: np.fft.ifft2(x, norm="ortho"), (4, 6), "complex128"),
    ("fftn 3d", lambda x: np.fft.fftn(x), (4, 3, 4), "float64"),
    ("fftn axes", lambda x: np.fft.fftn(x, axes=(2, 0), norm="forward"), (4, 3, 5), "complex64"),
    ("ifftn s", lambda x: np.fft.ifftn(x, s=(3, 4), axes=(0, 1)), (4, 4, 2), "complex128"),
    ("rfft2", lambda x: np.fft.rfft2(x), (6, 8), "float64"),
    ("rfftn", lambda x: np.fft.rfftn(x, axes=(1, 0)), (5, 6, 2), "float32"),
    ("rfftn s", lambda x: np.fft.rfftn(x, s=(4, 5), axes=(0, 2), norm="ortho"), (3, 2, 6), "float64"),
    ("irfft2", lambda x: np.fft.irfft2(x), (6, 4), "complex128"),
    ("irfftn s", lambda x: np.fft.irfftn(x, s=(4, 5), axes=(0, 1)), (4, 3, 2), "complex128"),
    ("fftn repeated axes", lambda x: np.fft.fftn(x, axes=(0, 1, 0)), (4, 4), "complex128"),
    ("hfft", lambda x: np.fft.hfft(x, n=6), (3, 4), "complex128"),
    ("ihfft", lambda x: np.fft.ihfft(x, axis=0), (5, 3), "float64"),
    ("fft int", lambda x: np.fft.fft(x), (4, 4), "int32"),
    ("fftshift", lambda x: np.fft.fftshift(x), (5, 4), "float64"),
    ("ifftshift axes", lambda x: np.fft.ifftshift(x, axes=0), (5, 4), "complex128"),
    ("fft 1-d", lambda x: np.fft.fft(x), (8,), "float64"),
]


@pytest.mark.slow
@pytest.mark.parametrize("desc,fn,shape,dtype", CALLS, ids=[c[0] for c in CALLS])
def test_every_function_every_sharding(desc, fn, shape, dtype):
    x = data(shape, dtype)
    want = fn(x)
    for mesh in MESHES:
        for spec in specs(mesh, len(shape)):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ReshardWarning)
                got = spmd.jit(fn, in_shardings=(mesh.sharding(*spec),))(x)
            close(got.numpy(), want, f"{desc} on {mesh} split {spec}")


FUNCS = {
    "fft": (np.fft.fft, 1, False), "ifft": (np.fft.ifft, 1, False), "rfft": (np.fft.rfft, 1, True),
    "irfft": (np.fft.irfft, 1, False), "fft2": (np.fft.fft2, 2, False), "ifft2": (np.fft.ifft2, 2, False),
    "rfft2": (np.fft.rfft2, 2, True), "irfft2": (np.fft.irfft2, 2, False), "fftn": (np.fft.fftn, 0, False),
    "ifftn": (np.fft.ifftn, 0, False), "rfftn": (np.fft.rfftn, 0, True), "irfftn": (np.fft.irfftn, 0, False),
}


@st.composite
def fft_calls(draw):
    name = draw(st.sampled_from(sorted(FUNCS)))
    f, kind, real_only = FUNCS[name]
    ndim = draw(st.integers(1 if kind == 1 else 2, 3))
    shape = tuple(draw(st.lists(st.integers(1, 7), min_size=ndim, max_size=ndim)))
    dtypes = ["float32", "float64", "int64"] + ([] if real_only else ["complex64", "complex128"])
    dtype = draw(st.sampled_from(dtypes))
    kw = {"norm": draw(st.sampled_from([None, "backward", "ortho", "forward"]))}
    if kind == 1:
        kw["axis"] = draw(st.integers(-ndim, ndim - 1))
        if draw(st.booleans()):
            kw["n"] = draw(st.integers(1, 9))
    else:
        k = 2 if kind == 2 else draw(st.integers(1, ndim))
        axes = draw(st.permutations(range(ndim)))[:k]
        if kind == 2 or draw(st.booleans()):
            kw["axes"] = tuple(axes)
        if draw(st.booleans()):
            kw["s"] = tuple(draw(st.integers(1, 8)) for _ in axes)
            kw["axes"] = tuple(axes)
    # the real-signal axis of irfft needs n >= 1 (numpy's default is 2 (m - 1))
    last = kw.get("axis", (kw.get("axes") or (-1,))[-1])
    if name.startswith("irfft") and shape[last] == 1 and "n" not in kw and "s" not in kw:
        shape = shape[:last % ndim] + (2,) + shape[last % ndim + 1:]
    mesh = draw(st.sampled_from(MESHES))
    spec = draw(st.sampled_from(specs(mesh, ndim)))
    return name, f, shape, dtype, kw, mesh, spec


@settings(max_examples=60, deadline=None)
@given(fft_calls())
def test_random_calls_match_numpy(call):
    name, f, shape, dtype, kw, mesh, spec = call
    x = data(shape, dtype)
    want = f(x, **kw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ReshardWarning)
        got = spmd.jit(lambda a: f(a, **kw), in_shardings=(mesh.sharding(*spec),))(x)
    close(got.numpy(), want, f"np.fft.{name}({dtype}{list(shape)}, {kw}) on {mesh} split {spec}")


# -- communication: the pencil decomposition -----------------------------------------------------
@pytest.mark.parametrize("mesh,spec", [(Mesh((4,), ("x",)), ("x", None)),
                                       (Mesh((2, 2), ("a", "b")), ("a", None)),
                                       (Mesh((2, 2), ("a", "b")), (("a", "b"), None))])
def test_fft2_of_a_row_split_matrix_moves_shards_never_gathers(mesh, spec):
    x = data((8, 8), "float64")
    row = mesh.sharding(*spec)
    k = mesh.axes_size(spec[0] if isinstance(spec[0], tuple) else (spec[0],))
    shard_bytes = 8 * 8 * 16 // k                      # complex128
    with warnings.catch_warnings():
        warnings.simplefilter("error", ReshardWarning)
        f = spmd.jit(lambda a: np.fft.fft2(a), in_shardings=(row,))
        cs = f.lower(x).report()["collectives"]
        ops = [c["op"] for c in cs]
        assert "all_to_all" in ops and "all_gather" not in ops, cs
        assert all(c["op"] == "all_to_all" and c["bytes"] == shard_bytes for c in cs), cs
        close(f(x).numpy(), np.fft.fft2(x), "fft2")
        # asked for the split the transform ends with: one all_to_all, no way back
        moved = mesh.sharding(None, spec[0])
        g = spmd.jit(lambda a: np.fft.fft2(a), in_shardings=(row,), out_shardings=moved)
        cs = g.lower(x).report()["collectives"]
        assert [c["op"] for c in cs] == ["all_to_all"] and cs[0]["bytes"] == shard_bytes, cs
        close(g(x).numpy(), np.fft.fft2(x), "fft2 -> moved split")


def test_partitioned_text_shows_the_pencil_steps():
    mesh = Mesh((4,), ("x",))
    f = spmd.jit(lambda a: np.fft.fft2(a), in_shardings=(mesh.sharding("x", None),))
    text = f.lower(data((8, 8), "float64")).as_text("partitioned")
    lines = [ln.split("=", 1)[1].split("(")[0].strip() for ln in text.splitlines() if " = " in ln]
    assert lines == ["convert", "fft", "all_to_all", "fft", "all_to_all"], text


def test_batched_fft_over_a_split_batch_dim_is_local():
    for mesh, spec in [(Mesh((4,), ("x",)), ("x", None)), (Mesh((2, 2), ("a", "b")), (("a", "b"), None, None))]:
        x = data((8, 6) if len(spec) == 2 else (8, 6, 4), "complex128")
        for fn in (lambda a: np.fft.fft(a), lambda a: np.fft.irfft(a), lambda a: np.fft.rfft(a.real)):
            f = spmd.jit(fn, in_shardings=(mesh.sharding(*spec),))
            assert f.lower(x).report()["collectives"] == []
            close(f(x).numpy(), fn(x), "batched")
        if len(spec) == 3:
            f = spmd.jit(lambda a: np.fft.fft2(a), in_shardings=(mesh.sharding(*spec),))
            assert f.lower(x).report()["collectives"] == []


def test_split_moves_to_a_dim_long_enough_to_hold_it():
    """A size-1 batch dim cannot hold a 4-way split: the split moves to a transformed dim
    already done instead (moving it to the batch dim would replicate the array)."""
    mesh = Mesh((4,), ("x",))
    x = data((1, 8, 8), "float64")
    f = spmd.jit(lambda a: np.fft.fft2(a, axes=(1, 2)), in_shardings=(mesh.sharding(None, "x", None),))
    cs = f.lower(x).report()["collectives"]
    assert [c["op"] for c in cs] == ["all_to_all", "all_to_all"] and all(c["bytes"] == 256 for c in cs), cs
    close(f(x).numpy(), np.fft.fft2(x), "fft2 with a size-1 batch dim")


def test_1d_fft_along_the_split_axis():
    mesh = Mesh((4,), ("x",))
    x = data((8, 6), "complex128")
    # another dim can hold the split: all_to_all there and back, no gather
    f = spmd.jit(lambda a: np.fft.fft(a, axis=0), in_shardings=(mesh.sharding("x", None),))
    with warnings.catch_warnings():
        warnings.simplefilter("error", ReshardWarning)
        ops = [c["op"] for c in f.lower(x).report()["collectives"]]
    assert ops == ["all_to_all", "all_to_all"], ops
    close(f(x).numpy(), np.fft.fft(x, axis=0), "fft axis 0")
    # a 1-d array has no other dim: gathered, with a warning naming the line
    v = data((8,), "complex128")
    g = spmd.jit(lambda a: np.fft.fft(a), in_shardings=(mesh.sharding("x"),))
    with pytest.warns(ReshardWarning, match=r"fft at .*test_fft.py:\d+ gathers dim 0"):
        low = g.lower(v)
    assert [c["op"] for c in low.report()["collectives"]] == ["all_gather"]
    close(g(v).numpy(), np.fft.fft(v), "1-d fft")


def test_real_transforms_along_a_split_axis_keep_the_split():
    """rfft / irfft change the real axis' length; its split still carries over (as pad's)."""
    mesh = Mesh((2, 2), ("a", "b"))
    x = data((8, 8, 4), "float64")
    for spec in [(None, None, "a"), (None, "a", "b"), ("a", "b", None)]:
        for fn in (lambda v: np.fft.rfft(v), lambda v: np.fft.rfftn(v),
                   lambda v: np.fft.irfftn(np.fft.rfftn(v, axes=(0, 1)), axes=(0, 1), s=(8, 8))):
            f = spmd.jit(fn, in_shardings=(mesh.sharding(*spec),))
            with warnings.catch_warnings():
                warnings.simplefilter("error", ReshardWarning)
                rep = f.lower(x).report()
            assert {c["op"] for c in rep["collectives"]} <= {"all_to_all"}, (spec, rep["collectives"])
            assert rep["out_shardings"][0].spec == mesh.sharding(*spec).spec
            close(f(x).numpy(), fn(x), f"real transform split {spec}")


def test_fft_convolution_chain_stays_distributed():
    """irfft2(rfft2(a) * rfft2(k)) on row-split inputs: all_to_alls only."""
    mesh = Mesh((4,), ("x",))
    a, k = data((8, 8), "float64", 1), data((8, 8), "float64", 2)
    row = mesh.sharding("x", None)
    f = spmd.jit(lambda a, k: np.fft.irfft2(np.fft.rfft2(a) * np.fft.rfft2(k), s=a.shape),
                 in_shardings=(row, row), out_shardings=row)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ReshardWarning)
        cs = f.lower(a, k).report()["collectives"]
    assert cs and {c["op"] for c in cs} == {"all_to_all"}, cs
    want = np.real(np.fft.ifft2(np.fft.fft2(a) * np.fft.fft2(k)))
    close(f(a, k).numpy(), want, "convolution")


# -- programs as users write them ----------------------------------------------------------------
def circular_convolution(a, k):
    """Direct sum, no FFT: out[i, j] = sum_{p, q} a[p, q] k[(i - p) % n, (j - q) % m]."""
    n, m = a.shape
    out = np.zeros_like(a)
    for p in range(n):
        for q in range(m):
            out += a[p, q] * np.roll(np.roll(k, p, axis=0), q, axis=1)
    return out


@pytest.mark.parametrize("mesh,spec", [(Mesh((2,), ("x",)), ("x", None)), (Mesh((2, 2), ("a", "b")), ("a", "b"))])
def test_fft_convolution_program(mesh, spec):
    a, k = data((6, 8), "float64", 3), data((6, 8), "float64", 4)

    def conv(a, k):
        return np.fft.irfft2(np.fft.rfft2(a) * np.fft.rfft2(k), s=a.shape)

    sh = mesh.sharding(*spec)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ReshardWarning)
        got = spmd.jit(conv, in_shardings=(sh, sh))(a, k)
    close(got.numpy(), circular_convolution(a, k), "FFT convolution")


def test_spectral_poisson_solve():
    """-lap u = f on a periodic grid: divide by |k|^2 in Fourier space."""
    n = 16
    xs = np.arange(n) * 2 * np.pi / n
    X, Y = np.meshgrid(xs, xs, indexing="ij")
    u_true = np.sin(X) * np.cos(2 * Y) + 0.5 * np.cos(3 * X)
    f = 5 * np.sin(X) * np.cos(2 * Y) + 4.5 * np.cos(3 * X)        # -lap u_true

    def solve(f):
        k = np.fft.fftfreq(n, d=1.0 / n)
        k2 = k[:, None] ** 2 + k[None, :] ** 2
        k2[0, 0] = 1.0
        fh = np.fft.fft2(f) / k2
        fh = fh * (k2 != 1.0) + fh * (k2 == 1.0) * (np.abs(k[:, None]) + np.abs(k[None, :]) > 0)
        return np.real(np.fft.ifft2(fh))

    mesh = Mesh((4,), ("x",))
    got = spmd.jit(solve, in_shardings=(mesh.sharding("x", None),))(f)
    close(got.numpy(), solve(f), "spectral solve vs numpy")
    np.testing.assert_allclose(got.numpy(), u_true - u_true.mean(), atol=1e-10)


# -- gradients ----------------------------------------------------------------------------------
def fd_grad(loss, x, eps=1e-6):
    """Central differences; a complex x's gradient is d/d re - i d/d im (JAX's convention)."""
    g = np.zeros(x.shape, x.dtype)
    steps = ((1.0, 1.0), (1j, -1j)) if x.dtype.kind == "c" else ((1.0, 1.0),)
    for step, w in steps:
        for idx in np.ndindex(*x.shape):
            hi, lo = x.copy(), x.copy()
            hi[idx] += eps * step
            lo[idx] -= eps * step
            g[idx] += (loss(hi) - loss(lo)) / (2 * eps) * w
    return g


LOSSES = [
    ("rfft2 power", lambda x: np.sum(np.abs(np.fft.rfft2(x)) ** 2), "float64"),
    ("fft ortho real part", lambda x: np.sum(np.real(np.fft.fft(x, axis=0, norm="ortho")) * np.arange(5.0)), "float64"),
    ("irfft n odd", lambda x: np.sum(np.fft.irfft(x, n=7) ** 3), "complex128"),
    ("irfft2 forward", lambda x: np.sum(np.sin(np.fft.irfft2(x, norm="forward"))), "complex128"),
    ("ifftn imag", lambda x: np.sum(np.imag(np.fft.ifftn(x)) * np.cos(np.abs(x))), "complex128"),
    ("padded rfft", lambda x: np.sum(np.abs(np.fft.rfft(x, n=9, axis=0))), "float64"),
    ("conv", lambda x: np.sum(np.fft.irfft2(np.fft.rfft2(x) * np.fft.rfft2(x[::-1]), s=x.shape) ** 2), "float64"),
    ("conj mul", lambda x: np.sum(np.real(np.conj(x) * x * (2 + 1j))), "complex128"),
]


@pytest.mark.parametrize("desc,loss,dtype", LOSSES, ids=[c[0] for c in LOSSES])
def test_grad_matches_finite_differences(desc, loss, dtype):
    x = data((4, 5), dtype, 7)
    want = fd_grad(loss, x)
    for mesh, spec in [(Mesh((1,), ("x",)), (None, None)), (Mesh((2,), ("x",)), ("x", None)),
                       (Mesh((2, 2), ("a", "b")), ("a", "b"))]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ReshardWarning)
            g = spmd.jit(spmd.grad(loss), in_shardings=(mesh.sharding(*spec),))(x).numpy()
        assert g.dtype == x.dtype
        np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-5, err_msg=f"{desc} on {mesh} {spec}")


# -- eager, runtime, text ------------------------------------------------------------------------
def test_eager_fft_on_spmd_arrays():
    mesh = Mesh((2, 2), ("a", "b"))
    x = data((8, 6), "float32")
    X = spmd.device_put(x, mesh.sharding("a", None))
    F = np.fft.rfft2(X)
    assert isinstance(F, spmd.Array) and F.dtype == np.complex64
    close(F.numpy(), np.fft.rfft2(x), "eager rfft2")
    Z = F * (1 + 2j)
    assert isinstance(Z, spmd.Array)
    close(np.fft.irfft2(Z, s=x.shape).numpy(), np.fft.irfft2(np.fft.rfft2(x) * (1 + 2j), s=x.shape), "eager irfft2")
    close(np.abs(Z).numpy(), np.abs(np.fft.rfft2(x) * (1 + 2j)), "eager abs")
    with warnings.catch_warnings():
        warnings.simplefilter("error")           # no gather, no fallback to numpy
        re, im, cj = Z.real, np.imag(Z), Z.conj()
    for got, want in ((re, np.real), (im, np.imag), (cj, np.conj)):
        assert isinstance(got, spmd.Array)
        close(got.numpy(), want(np.fft.rfft2(x) * (1 + 2j)), f"eager {want.__name__}")


def test_complex_arrays_through_jit_arguments_and_results():
    mesh = Mesh((4,), ("x",))
    z = data((8, 3), "complex64")
    Z = spmd.device_put(z, mesh.sharding("x", None))
    assert Z.dtype == np.complex64 and np.array_equal(Z.numpy(), z)
    f = spmd.jit(lambda z, w: (z * w, np.sum(z, axis=0), z @ z.T.conj(), np.mean(z)))
    got = f(Z, 2 - 1j)
    want = (z * (2 - 1j), np.sum(z, axis=0), z @ z.T.conj(), np.mean(z))
    for gv, wv in zip(got, want):
        close(gv.numpy(), np.asarray(wv), "complex jit")


def test_complex_promotion_follows_numpy():
    x32 = np.ones(3, np.float32)
    cases = [lambda x: x + 1j, lambda x: x + np.complex128(1j), lambda x: x.astype(np.complex64) + 2.0,
             lambda x: x.astype(np.complex64) * np.ones(3), lambda x: x.astype(np.int32) + 1j]
    for fn in cases:
        got = np.asarray(spmd.jit(fn)(x32))
        assert got.dtype == fn(x32).dtype, (got.dtype, fn(x32).dtype)


def test_complex_collectives_on_local_threads():
    import collective_checks
    from spmd.transports.local.local_runtime import LocalRuntime
    rt = LocalRuntime()
    for mesh in (Mesh((2,), ("x",)), Mesh((2, 2), ("a", "b"))):
        devices = sorted(mesh.devices.reshape(-1).tolist())
        out = rt.run(collective_checks.CheckCollectives(dtypes=("complex128", "complex64")), mesh,
                     {d: [] for d in devices})
        counts = {int(np.asarray(rt.get({d: h})[d])) for d in devices for h in out[d]}
        assert len(counts) == 1 and counts.pop() > 10


def test_complex_constants_round_trip_as_text():
    g = Graph("c")
    x = g.add_input((3,), "complex64")
    c = g.emit(CONSTANT, value=np.array([1 + 2j, -0.5j, 3], np.complex64))
    y = g.emit(FFT, g.emit(MULTIPLY, x, c), kind="fft", axes=(0,), n=3, norm="ortho")
    g.outputs = [g.emit(REAL, y), g.emit(CONJ, y)]
    text = print_graph(g)
    assert "c64[3]" in text and "fft(" in text
    assert print_graph(parse_graph(text)) == text


def test_errors_name_the_line():
    x = data((4, 4), "float64")
    with pytest.raises(ValueError, match="invalid norm"):
        spmd.jit(lambda a: np.fft.fft(a, norm="sideways"))(x)
    with pytest.raises(ValueError, match=r"invalid number of .*\(0\)"):
        spmd.jit(lambda a: np.fft.fft(a, n=0))(x)
    with pytest.raises(TypeError, match=r"np.fft.rfft takes real input.*test_fft.py"):
        spmd.jit(lambda a: np.fft.rfft(a * 1j))(x)
    with pytest.raises(TypeError, match=r"np.maximum of complex.*test_fft.py"):
        spmd.jit(lambda a: np.maximum(a * 1j, 0))(x)
    with pytest.raises(TypeError, match=r"np.max of complex.*test_fft.py"):
        spmd.jit(lambda a: np.max(a * 1j))(x)
    with pytest.raises(np.exceptions.AxisError):
        spmd.jit(lambda a: np.fft.fft(a, axis=2))(x)


@pytest.mark.mpi
@pytest.mark.timeout(180)
def test_distributed_fft2_under_mpiexec():
    from spmd.transports.mpi.mpi_launch import find_mpiexec
    mpiexec = find_mpiexec()
    if mpiexec is None:
        pytest.skip("no mpiexec")
    env = dict(os.environ, PYTHONPATH=os.path.dirname(TESTS) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("SPMD_BACKEND", None)
    p = subprocess.run([mpiexec, "-n", "4", sys.executable, os.path.join(SCRIPTS, "fft.py")],
                       capture_output=True, text=True, timeout=170, env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.count("FFT OK") == 4, p.stdout


def test_complex_program_on_both_backends(compiler):
    """Complex values are kept out of the LLVM backend's fused kernels (they run through
    the ops' numpy references) and the float parts around them still fuse."""
    mesh = Mesh((2,), ("x",))
    z, x = data((16, 8), "complex128", 1), data((16, 8), "float32", 2)

    def f(z, x):
        w = np.exp(z) * x + np.conj(z) - 2j
        return np.abs(w) + x, np.sum(w * w, axis=1), np.fft.fft(w).real * 2, np.where(np.abs(z) > 1, z, -z)

    got = spmd.jit(f, backend=compiler, in_shardings=(mesh.sharding("x", None),) * 2)(z, x)
    for g, w in zip(got, f(z, x)):
        close(g.numpy(), np.asarray(w), f"complex program on {compiler}")


def test_complex_arrays_in_checkpoints(tmp_path):
    mesh = Mesh((2, 2), ("a", "b"))
    z = data((6, 5), "complex64")
    Z = np.fft.fft2(spmd.device_put(data((8, 4), "float64"), mesh.sharding("a", "b")))
    spmd.save(tmp_path / "ck", {"z": spmd.device_put(z, mesh.sharding("a", None)), "Z": Z, "s": 1 - 2j})
    back = spmd.load(tmp_path / "ck", {"z": mesh.sharding(None, "b"), "Z": mesh.sharding("b", None), "s": None})
    assert back["z"].dtype == np.complex64 and np.array_equal(back["z"].numpy(), z)
    assert back["Z"].dtype == np.complex128 and np.array_equal(back["Z"].numpy(), Z.numpy())
    assert back["s"] == 1 - 2j


# -- complex values through the rest of the numpy API ---------------------------------------------
COMPLEX_FUNCS = {
    "arith": lambda a: (a * 2 - 1j) / (a + 3) + a ** 2 - (-a),
    "power": lambda a: a ** (0.5 + 1j), "exp log sqrt": lambda a: np.exp(a) + np.log(a) + np.sqrt(a),
    "sinh cosh": lambda a: np.sinh(a) * np.cosh(a), "log2 log10 expm1": lambda a: np.log2(a) + np.log10(a) + np.expm1(a),
    "abs angle": lambda a: np.abs(a) + np.angle(a, deg=True), "real imag conj": lambda a: a.real * np.imag(a) + np.conj(a),
    "sum mean prod": lambda a: np.sum(a, axis=0) + np.mean(a, axis=0) + np.prod(a, axis=0),
    "var std": lambda a: np.var(a, axis=1) + np.std(a, axis=1, ddof=1), "nansum nanmean": lambda a: np.nansum(a) + np.nanmean(a),
    "cumsum cumprod": lambda a: np.cumsum(a, axis=1) + np.cumprod(a, axis=0),
    "matmul vdot einsum": lambda a: (a @ a.T)[0] + np.vdot(a, a) + np.einsum("ij,ij->i", a, a),
    "norm": lambda a: np.linalg.norm(a) + np.linalg.norm(a, 1) + np.linalg.vector_norm(a, ord=3, axis=0)[0],
    "isnan isfinite eq": lambda a: np.isnan(a) | ~np.isfinite(a) | (a == a[0]) | (a != 1j),
    "where": lambda a: np.where(np.abs(a) > 1, a, 1j * a), "sort median": lambda a: np.sort(a, axis=1)[:, 0] + np.median(a),
    "shape funcs": lambda a: np.roll(np.pad(a, 1), 1, 0)[1:-1, :3] + np.diff(a, axis=0, append=0j)[:, :3] + np.tril(a)[:, :3],
    "gradient": lambda a: np.gradient(a, axis=1), "nan_to_num": lambda a: np.nan_to_num(a * np.inf),
    "astype": lambda a: a.astype(np.complex64).astype(np.complex128) + a.astype(np.float32),
}


@pytest.mark.parametrize("name", sorted(COMPLEX_FUNCS))
def test_complex_numpy_functions_match_numpy(name):
    fn = COMPLEX_FUNCS[name]
    for i, (mesh, shape) in enumerate(itertools.product(MESHES, [(4, 6), (5, 3)])):
        z = data(shape, "complex128", i)
        all_specs = specs(mesh, 2)
        spec = all_specs[(7 * i + len(name)) % len(all_specs)]
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            want = np.asarray(fn(z))
            got = np.asarray(spmd.jit(fn, in_shardings=(mesh.sharding(*spec),))(z))
        assert got.shape == want.shape and got.dtype == want.dtype, (name, got.dtype, want.dtype)
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9, err_msg=f"{name} on {mesh} split {spec}")


def test_complex_functions_spmd_does_not_order_raise():
    z = data((4, 4), "complex128")
    for fn in (lambda a: np.sort(a) < 1, lambda a: np.argmax(a), lambda a: np.clip(a, 0, 1),
               lambda a: np.nanmedian(a), lambda a: np.isposinf(a)):
        with pytest.raises((TypeError, spmd.errors.ShapeError), match="complex"):
            spmd.jit(fn)(z)


def test_spectral_heat_steps_in_a_loop():
    """Heat-equation steps in Fourier space inside spmd.fori_loop, on a row-split grid."""
    n = 8
    k = np.fft.fftfreq(n) * n
    decay = np.exp(-0.01 * (k[:, None] ** 2 + k[None, :] ** 2))[:, : n // 2 + 1]

    def steps(u):
        return spmd.fori_loop(0, 3, lambda i, u: np.fft.irfft2(np.fft.rfft2(u) * decay, s=(n, n)), u)

    u0 = data((n, n), "float64", 5)
    want = u0
    for _ in range(3):
        want = np.fft.irfft2(np.fft.rfft2(want) * decay, s=(n, n))
    mesh = Mesh((4,), ("x",))
    got = spmd.jit(steps, in_shardings=(mesh.sharding("x", None),))(u0)
    close(got.numpy(), want, "heat steps")
