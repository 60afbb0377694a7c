"""numpy's elementwise functions of complex numbers (spmd/frontend/numpy_lib/complex_math.py):
sin, cos, tan, their hyperbolic and inverse forms, log1p, log2, log10, expm1, exp2 and
sign, under spmd.jit on both backends, split over a mesh, and eagerly, against numpy:
on a grid of special parts (zeros of both signs, tiny, near 1, large enough to overflow a
plain formula, inf, NaN) every part equal to numpy's (NaN where numpy has NaN, infinities
and the sign of every zero exactly, the rest to a few ulps), and on random values of any
magnitude within a few ulps of |numpy's result|.
"""
from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import spmd

FUNCTIONS = ("sin", "cos", "tan", "sinh", "cosh", "tanh", "arcsin", "arccos", "arctan", "arcsinh", "arccosh",
             "arctanh", "log1p", "log2", "log10", "expm1", "exp2", "sign")
PARTS = (0.0, -0.0, 1e-300, 1e-8, 0.5, -0.7, 1.0, -1.0, 2.0, -3.0, 20.0, 25.0, 400.0, -400.0, 720.0, -720.0,
         1e300, np.inf, -np.inf, np.nan)
GRID = np.array([complex(a, b) for a, b in itertools.product(PARTS, PARTS)])
RTOL = {"complex128": 1e-12, "complex64": 1e-5}


def _numpy(f, z):
    with np.errstate(all="ignore"):
        return f(z)


def _part_differs(a, b, rtol):
    if np.isnan(a) or np.isnan(b):
        return not (np.isnan(a) and np.isnan(b))
    if np.isinf(a) or np.isinf(b) or a == 0 or b == 0:
        return a != b or np.signbit(a) != np.signbit(b)
    return abs(a - b) > rtol * max(abs(a), abs(b))


def _check_parts(got, want, what):
    got = np.asarray(got)
    assert got.dtype == want.dtype and got.shape == want.shape, (what, got.dtype, want.dtype)
    rtol = RTOL[want.dtype.name]
    bad = [(i, g, w) for i, (g, w) in enumerate(zip(got.ravel(), want.ravel()))
           if _part_differs(g.real, w.real, rtol) or _part_differs(g.imag, w.imag, rtol)]
    assert not bad, f"{what}: {len(bad)} values differ from numpy's, e.g. " + "; ".join(
        f"z={GRID.ravel()[i % GRID.size]!r}: spmd {g!r}, numpy {w!r}" for i, g, w in bad[:4])


@pytest.mark.parametrize("dtype", ("complex128", "complex64"))
@pytest.mark.parametrize("backend", ("numpy", "llvm"))
@pytest.mark.parametrize("name", FUNCTIONS)
def test_special_values_match_numpy(name, backend, dtype):
    f = getattr(np, name)
    with np.errstate(over="ignore"):
        z = GRID.astype(dtype)
    got = spmd.jit(f, backend=None if backend == "llvm" else backend)(z)
    _check_parts(got, _numpy(f, z), f"np.{name} of {dtype} ({backend})")


@pytest.mark.parametrize("name", FUNCTIONS)
def test_split_and_eager_match_numpy(name):
    f = getattr(np, name)
    z = GRID.reshape(20, 20)
    mesh = spmd.Mesh((2, 2), ("a", "b"))
    got = spmd.jit(f, in_shardings=(mesh.sharding("a", "b"),))(z)
    _check_parts(got, _numpy(f, z), f"np.{name} split over 2x2")
    with warnings.catch_warnings():
        warnings.simplefilter("error")           # no fallback, no gather
        with np.errstate(all="ignore"):
            got = f(spmd.shard(z, mesh.sharding("a", None)))
    assert isinstance(got, spmd.Array)
    _check_parts(got, _numpy(f, z), f"eager np.{name} on a split spmd.Array")


def _magnitudes():
    """A part: zero, or +-10^e for e spread over the dtype's range, or close to +-1."""
    return st.one_of(st.just(0.0), st.floats(-12, 12).map(lambda e: 10.0 ** e),
                     st.floats(-1e-6, 1e-6).map(lambda d: 1.0 + d)).flatmap(
        lambda m: st.sampled_from((m, -m)))


_COMPILED = {name: spmd.jit(getattr(np, name)) for name in FUNCTIONS}


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(_magnitudes(), _magnitudes()), min_size=1, max_size=24), st.sampled_from(FUNCTIONS))
def test_random_values_within_ulps_of_numpy(parts, name):
    z = np.array([complex(a, b) for a, b in parts])
    want = _numpy(getattr(np, name), z)
    got = np.asarray(_COMPILED[name](z))
    ok = np.isfinite(want)
    err = np.abs(got[ok] - want[ok])
    assert np.all(err <= 1e-11 * np.abs(want[ok]) + 1e-300), (name, z[ok][err > 1e-11 * np.abs(want[ok])])
    assert np.array_equal(np.isnan(got), np.isnan(want))
    inf = np.isinf(want)          # (each part alike: exp(1000) * sin(0) makes numpy's inf+nanj)
    assert all(np.array_equal(part(got[inf]), part(want[inf]), equal_nan=True) for part in (np.real, np.imag))


@pytest.mark.parametrize("name", ["arctan", "arctanh"])
def test_a_large_argument_keeps_the_reciprocals_part_beside_pi_over_2(name):
    """atan(1e9) is pi/2 - 1e-9: for |z| past the large threshold the result is 1/z
    plus +-pi/2 in each part, not pi/2 alone (off by 6e-10, found by the test above)."""
    z = np.array([1e9, -1e9, 3e8, 1e12, 1e9 + 1e-3j, 1e9j, -1e9j, 2e8 + 2e8j, 1e300 + 1e300j])
    f = getattr(np, name)
    got, want = np.asarray(spmd.jit(f)(z)), f(z)
    assert np.all(np.abs(got - want) <= 4e-16 * np.abs(want)), (got, want)


def test_masked_complex_updates_trace():
    """The fractal tutorials' step: z[mask] = f(z[mask]) for a complex f, compiled."""
    def newton(z):
        out = np.zeros(z.shape)
        for _ in range(6):
            m = np.abs(z) < 2.0
            z[m] = z[m] - np.tan(z[m]) / np.cos(z[m])
            out[m] += 1
        return out, z
    x, y = np.meshgrid(np.linspace(-1.5, 1.5, 24), np.linspace(-1.5, 1.5, 24))
    z = x + 1j * y
    mesh = spmd.Mesh((2,), ("x",))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = spmd.jit(newton, in_shardings=(mesh.sharding("x", None),))(z.copy())
    with np.errstate(all="ignore"):
        want = newton(z.copy())
    np.testing.assert_array_equal(np.asarray(got[0]), want[0])
    np.testing.assert_allclose(np.asarray(got[1]), want[1], rtol=1e-9, atol=1e-12)


def test_asarray_of_a_selection_keeps_it_traced():
    """np.asarray / np.array / asanyarray of x[mask] in the user's code: the selection still
    (numpy's copy or the same array), so writing back through the mask compiles."""
    def f(z):
        m = np.abs(z) < 1.5
        v = np.asanyarray(z[m])
        w = np.array(z[m], dtype=np.complex128)
        z[m] = v * 2 - w + np.asarray(z[m]).conj()
        return z
    z = np.linspace(-2, 2, 12) + 0.5j
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = spmd.jit(f)(z.copy())
    np.testing.assert_allclose(np.asarray(got), f(z.copy()), rtol=1e-15)
