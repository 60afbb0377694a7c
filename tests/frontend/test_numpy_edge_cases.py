"""Differential edge cases (issue #13: a silent wrong answer is the worst bug): each form
runs on special values -- NaN, +-inf, -0.0, denormals, huge values, integer minimum and
maximum, bool -- under spmd.jit with the numpy backend, with the LLVM backend (fused
native kernels), split over a 4-device mesh and a 2x2 mesh (uneven: 2 rows over 4
devices), and eagerly on a sharded spmd.Array, and must equal numpy exactly: values
(NaN where numpy has NaN, the sign of every zero, ints bit for bit), dtype and shape.
Forms numpy computes in int8 (powers and squares of bools) give numpy's int8.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import spmd

MESH4 = spmd.Mesh((4,), ("x",))
MESH22 = spmd.Mesh((2, 2), ("a", "b"))

F64 = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1.5, -2.5, 2.5,
                3e10, -3e10, 1e300, 5e-324, 0.5, -0.5, 7.0, -1.0]).reshape(2, 8)
I64 = np.array([np.iinfo(np.int64).min, np.iinfo(np.int64).max, -1, 0, 1, 7, -7, 3,
                -3, 2, 5, -8, 100, -100, 64, 63], np.int64).reshape(2, 8)
I32 = np.array([np.iinfo(np.int32).min, np.iinfo(np.int32).max, -1, 0, 1, 7, -7, 3,
                -3, 2, 5, -8, 100, -100, 32, 31], np.int32).reshape(2, 8)
with np.errstate(over="ignore"):
    F32 = F64.astype(np.float32)
INPUTS = {"float64": F64, "float32": F32, "int64": I64, "int32": I32,
          "bool": np.array([True, False, False, True] * 4).reshape(2, 8)}
FLOATS = ("float64", "float32")
INTS = ("int64", "int32")
ALL = FLOATS + INTS + ("bool",)


def rev(x):
    return x[::-1, ::-1]


# (name, function, dtypes); every function takes the (2, 8) input
CASES = [
    # floor division and remainder: numpy's npy_divmod (signed zeros, inf, nan, 0 divisors)
    ("floordiv", lambda x: x // rev(x), FLOATS + INTS),
    ("mod", lambda x: x % rev(x), FLOATS + INTS),
    ("divmod", lambda x: np.divmod(x, rev(x)), FLOATS + INTS),
    ("floordiv_m1", lambda x: x // -1, FLOATS + INTS),
    ("mod_m1", lambda x: x % -1, FLOATS + INTS),
    ("floordiv_0", lambda x: x // 0, FLOATS + INTS),
    ("fmod", lambda x: np.fmod(x, rev(x)), FLOATS + INTS),
    ("truediv", lambda x: x / rev(x), ALL),
    # a reversed (gathered) -0.0 keeps its sign on a split axis
    ("reverse", lambda x: rev(x), ALL),
    ("take", lambda x: np.take(x, [7, 0, 3, 3], axis=1), ALL),
    ("add_zero", lambda x: x + 0, FLOATS + INTS),
    ("add_neg_zero", lambda x: x + np.float64(-0.0) - 0.0, FLOATS),
    ("sub_neg_zero", lambda x: x - (-0.0), FLOATS),
    ("maximum", lambda x: np.maximum(x, rev(x)), ALL),
    ("minimum", lambda x: np.minimum(x, rev(x)), ALL),
    ("fmax_fmin", lambda x: np.fmax(x, rev(x)) - np.fmin(x, 0.5), FLOATS),
    ("sign", np.sign, FLOATS + INTS),
    ("abs_neg", lambda x: (np.abs(x), -x), FLOATS + INTS),
    ("compare", lambda x: (x == rev(x), x != rev(x), x < rev(x), x >= rev(x)), ALL),
    # conversions: float -> int of NaN / inf / out of range is the integer minimum (x86)
    ("astype_int64", lambda x: x.astype(np.int64), FLOATS + INTS + ("bool",)),
    ("astype_int32", lambda x: x.astype(np.int32), FLOATS + INTS + ("bool",)),
    ("astype_bool", lambda x: x.astype(bool), ALL),
    ("astype_float32", lambda x: x.astype(np.float32), ALL),
    # powers: x ** 0.5 is np.sqrt for float arrays (numpy's ndarray.__pow__), np.power is pow
    ("pow_half_operator", lambda x: x ** 0.5, FLOATS),
    ("power_half", lambda x: np.power(x, 0.5), FLOATS),
    ("pow_small", lambda x: (x ** 2, x ** 3, x ** -1.0, x ** 0), FLOATS),
    ("pow_int", lambda x: (x ** 2, x ** 3, x ** 0), INTS),
    ("pow_arrays", lambda x: (x % 7 - 3) ** (rev(x) % 5), INTS),
    ("bool_pow", lambda x: (np.power(x, 2), np.power(x, 3), x ** 3, 2 ** x, x ** 0.5), ("bool",)),
    # transcendental: accurate at 0, tiny and huge arguments; bool computes in float16
    ("exp_log", lambda x: (np.exp(x), np.log(x), np.log1p(x)), ALL),
    ("expm1", np.expm1, ALL),
    ("sinh_cosh", lambda x: (np.sinh(x), np.cosh(x)), ALL),
    ("tanh", np.tanh, ALL),
    ("sqrt", np.sqrt, ALL),
    ("inverse_hyperbolic", lambda x: (np.arccosh(x), np.arcsinh(x), np.arctanh(x)), FLOATS + INTS),
    ("rint", np.rint, FLOATS + INTS),
    ("round", lambda x: (np.round(x), np.round(x, 1), np.round(x, -1)), FLOATS + INTS),
    ("floor_ceil_trunc", lambda x: (np.floor(x), np.ceil(x), np.trunc(x)), FLOATS + INTS),
    ("isnan_isinf", lambda x: (np.isnan(x), np.isinf(x), np.isfinite(x), np.signbit(x)), ALL),
    ("nan_to_num", np.nan_to_num, FLOATS + INTS),
    ("clip", lambda x: np.clip(x, -1, 2), FLOATS + INTS),
    ("copysign", lambda x: np.copysign(1.0, x), FLOATS),
    # reductions with special values
    # (numpy's own max/min reductions give either zero for a -0.0 / 0.0 tie: signs not compared)
    ("max_min", lambda x: (np.max(x, axis=1), np.min(x, axis=0), np.argmax(x, axis=1), np.argmin(x)), ALL,
     False),
    ("sum_prod", lambda x: (np.sum(x, axis=1), np.prod(x, axis=0)), FLOATS + INTS),
    ("cumsum", lambda x: np.cumsum(x, axis=1), FLOATS + INTS),
    ("sort_stable", lambda x: (np.sort(x, axis=1, kind="stable"), np.argsort(x, axis=1, kind="stable")),
     FLOATS + INTS),
    ("nan_reductions", lambda x: (np.nanmax(x, axis=0), np.nansum(x, axis=1)), FLOATS),
    ("any_all", lambda x: (np.any(x, axis=1), np.all(x, axis=0), np.count_nonzero(x, axis=1)), ALL),
]

# forms numpy computes in int8
INT8_FORMS = [
    ("bool_pow_int", lambda x: x ** 2),
    ("bool_power_bool", lambda x: np.power(x, x)),
    ("bool_square", np.square),
    ("bool_pow_bool", lambda x: x ** x),
    ("bool_floordiv_mod", lambda x: (x // rev(x), x % rev(x), np.left_shift(x, rev(x)))),
]


def _same(got, want, what, zsign=True):
    if isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want), what
        for k, (g, w) in enumerate(zip(got, want)):
            _same(g, w, f"{what}[{k}]", zsign)
        return
    got = np.asarray(got.numpy() if hasattr(got, "numpy") else got)
    want = np.asarray(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != numpy's {want.shape}"
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != numpy's {want.dtype}"
    if want.dtype.kind != "f":
        assert np.array_equal(got, want), f"{what}:\n got {got}\nwant {want}"
        return
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan), f"{what}: NaNs differ\n got {got}\nwant {want}"
    g, w = got[~nan].astype(np.float64), want[~nan].astype(np.float64)
    tol = {np.dtype(np.float64): 1e-13, np.dtype(np.float32): 2e-6}.get(want.dtype, 1e-3)
    assert np.array_equal(np.isinf(g), np.isinf(w)) and np.array_equal(g[np.isinf(g)], w[np.isinf(w)]), \
        f"{what}: infs differ\n got {got}\nwant {want}"
    fin = ~np.isinf(w)
    # relative to the value: a denormal result (expm1(5e-324)) must not round to 0
    assert np.all(np.abs(g[fin] - w[fin]) <= tol * np.abs(w[fin])), f"{what}: values\n got {got}\nwant {want}"
    assert not zsign or np.array_equal(np.signbit(g[w == 0]), np.signbit(w[w == 0])), \
        f"{what}: the sign of a zero differs\n got {got}\nwant {want}"


def _numpy(fn, x):
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return fn(x)


def _run(fn, x, mode):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if mode == "numpy":
            return spmd.jit(fn, backend="numpy")(x)
        if mode == "llvm":
            return spmd.jit(fn)(x)
        if mode == "mesh4":
            return spmd.jit(fn, in_shardings=(MESH4.sharding("x", None),))(x)
        if mode == "mesh4_cols":
            return spmd.jit(fn, in_shardings=(MESH4.sharding(None, "x"),), backend="numpy")(x)
        if mode == "mesh22":
            return spmd.jit(fn, in_shardings=(MESH22.sharding("a", "b"),))(x)
        if mode == "eager":
            return fn(spmd.device_put(x, MESH4.sharding(None, "x")))
    raise AssertionError(mode)


def _params(modes):
    return [pytest.param(c[0], c[1], dt, mode, c[3] if len(c) > 3 else True, id=f"{c[0]}-{dt}-{mode}")
            for c in CASES for dt in c[2] for mode in modes]


@pytest.mark.parametrize("name,fn,dt,mode,zsign", _params(("numpy", "llvm")))
def test_edge_values_match_numpy(name, fn, dt, mode, zsign):
    x = INPUTS[dt]
    _same(_run(fn, x, mode), _numpy(fn, x), f"{name} of {dt} ({mode})", zsign)


@pytest.mark.slow
@pytest.mark.parametrize("name,fn,dt,mode,zsign", _params(("mesh4", "mesh4_cols", "mesh22", "eager")))
def test_edge_values_match_numpy_sharded(name, fn, dt, mode, zsign):
    x = INPUTS[dt]
    _same(_run(fn, x, mode), _numpy(fn, x), f"{name} of {dt} ({mode})", zsign)


@pytest.mark.parametrize("name,fn", INT8_FORMS, ids=[r[0] for r in INT8_FORMS])
@pytest.mark.parametrize("mode", ("numpy", "llvm", "eager"))
def test_int8_results_of_bools_are_numpys(name, fn, mode):
    x = INPUTS["bool"]
    want = _numpy(fn, x)
    assert all(w.dtype == np.int8 for w in (want if isinstance(want, tuple) else (want,)))   # what numpy does
    _same(_run(fn, x, mode), want, f"{name} ({mode})")


def test_tiny_arguments_keep_their_digits():
    """expm1 / sinh of tiny x is x (exp(x) - 1 would be 0), in every float dtype."""
    for dt in ("float64", "float32", "float16"):
        x = np.array([1e-30, -1e-30, 1e-7, -0.0, 3e-5], dtype=dt)
        for f in (np.expm1, np.sinh):
            _same(spmd.jit(f)(x), _numpy(f, x), f"{f.__name__} of {dt}")


def test_float_to_int_conversion_in_a_fused_kernel():
    """fptosi is poison for NaN / inf / out of range in LLVM: a fused kernel must give
    numpy's integer minimum, also when the operand is computed in the same kernel."""
    x = np.array([1e10, -1e10, 1.0, np.inf, 2.5, -2.5, 3e9, -2147483648.0])
    for dt in ("int32", "int64"):
        f = lambda x: (x * 2.0 + np.log(x * 0 + 1)).astype(dt) + 1   # noqa: E731
        _same(spmd.jit(f)(x), _numpy(f, x), dt)


# -- order= of ravel / flatten (was silently C order), and the views ravel returns ----------------
def _rw(f, k, v):
    def g(x):
        y = x.copy()
        f(y)[k] = v                      # a view writes through to y; a copy does not
        return y
    return g


ORDERS = [
    ("ravel_F", lambda x: x.ravel(order="F")), ("np_ravel_F", lambda x: np.ravel(x, "F")),
    ("flatten_F", lambda x: x.flatten("F")), ("T_ravel_K", lambda x: x.T.ravel(order="K")),
    ("T_ravel_A", lambda x: x.T.ravel("A")), ("T_ravel_F", lambda x: x.T.ravel("F")),
    ("swap_slice_K", lambda x: np.swapaxes(x, 0, 2)[:, 1:].ravel("K")),
    ("transpose_flatten_K", lambda x: x.transpose(1, 0, 2).flatten("K")),
    ("T_ravel_F_writes_through", _rw(lambda y: y.T.ravel("F"), slice(0, 3), -1.0)),
    ("ravel_F_is_a_copy", _rw(lambda y: y.ravel("F"), slice(0, 3), -1.0)),
    ("T_ravel_K_writes_through", _rw(lambda y: y.T.ravel("K"), slice(0, 5), -1.0)),
    ("flatten_is_a_copy", _rw(lambda y: y.T.flatten("K"), slice(0, 5), -1.0)),
]


@pytest.mark.parametrize("name,fn", ORDERS, ids=[o[0] for o in ORDERS])
@pytest.mark.parametrize("mode", ("numpy", "llvm", "mesh4_cols"))
def test_ravel_order_matches_numpy(name, fn, mode):
    x = np.arange(24.0).reshape(2, 3, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if mode == "mesh4_cols":
            got = spmd.jit(fn, in_shardings=(MESH4.sharding(None, None, "x"),), backend="numpy")(x)
        else:
            got = _run(fn, x, mode)
    _same(got, fn(x), f"{name} ({mode})")


def test_eager_ravel_order():
    x = np.arange(24.0).reshape(2, 3, 4)
    a = spmd.device_put(x, MESH4.sharding(None, None, "x"))
    _same(a.ravel(order="F"), x.ravel(order="F"), "ravel F")
    _same(a.flatten("F"), x.flatten("F"), "flatten F")


# -- np.<ufunc>.at on an eager spmd.Array (was an AttributeError from the numpy fallback) ----------
@pytest.mark.parametrize("ufunc", (np.add, np.subtract, np.maximum, np.multiply))
def test_eager_ufunc_at_writes_the_array(ufunc):
    x = np.arange(15.0).reshape(5, 3)
    a = spmd.device_put(x.copy(), MESH4.sharding("x", None))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = ufunc.at(a, [0, 0, 4, -1], 2.5)
    want = x.copy()
    ufunc.at(want, [0, 0, 4, -1], 2.5)
    assert r is None
    _same(a, want, f"np.{ufunc.__name__}.at")
    assert a.sharding == MESH4.sharding("x", None)


def test_eager_ufunc_method_fallback_runs_numpy():
    x = np.arange(15.0).reshape(5, 3)
    a = spmd.device_put(x, MESH4.sharding("x", None))
    with pytest.warns(UserWarning, match="accumulate"):
        got = np.subtract.accumulate(a, axis=1)
    _same(got, np.subtract.accumulate(x, axis=1), "np.subtract.accumulate")


UFUNC_METHODS = {
    "subtract.outer": lambda x: np.subtract.outer(x[:, 0], x[0]),
    "multiply.outer": lambda x: np.multiply.outer(x, x[0]),
    "equal.outer": lambda x: np.equal.outer(x[0], x[1]),
    "add.accumulate": lambda x: np.add.accumulate(x, axis=1),
    "maximum.accumulate": lambda x: np.maximum.accumulate(x),
    "add.accumulate(bool, int8)": lambda x: np.add.accumulate(x > 0, dtype=np.int8),
    "add.reduceat": lambda x: np.add.reduceat(x, [0, 2, 3]),
    "minimum.reduceat": lambda x: np.minimum.reduceat(x, [0, 2, 1], axis=1),
}


@pytest.mark.parametrize("name", list(UFUNC_METHODS))
def test_eager_ufunc_methods_run_sharded(name):
    """outer, accumulate and reduceat run as traced programs on an spmd.Array, as under
    jit (they ran in numpy on the gathered array)."""
    x = np.arange(12.0).reshape(4, 3) - 4
    a = spmd.device_put(x, spmd.Mesh((2,), ("x",)).sharding("x", None))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = UFUNC_METHODS[name](a)
    _same(got, UFUNC_METHODS[name](x), name)


# -- transcendental functions near their limits: within a few ulps of numpy, same inf / nan / 0 ----
LIMITS = {
    "float32": np.array([1e-45, -1e-45, 1e-40, 1.17e-38, -87.5, -88.0, -95.0, -103.0, -103.9, -104.5, 88.7,
                         88.8, 89.0, 89.3, -89.3, 9.05, -9.5, 8.1, 8.3, 8.5, 7.91, -7.91, 1e-4, 3e-4,
                         -0.0, 0.0, 20.0, np.nan, np.inf, -np.inf], np.float32),
    "float64": np.array([5e-324, -5e-324, 1e-310, 2.2e-308, -708.0, -745.0, -746.0, 709.0, 709.9, 710.4,
                         -710.4, 711.0, 19.1, 20.5, -20.5, 1e-9, 1e-300, 36.0, -0.0, 0.0, np.nan, np.inf,
                         -np.inf], np.float64),
}


@pytest.mark.parametrize("f", (np.exp, np.expm1, np.tanh, np.sinh, np.cosh, np.log, np.log1p, np.sqrt),
                         ids=lambda f: f.__name__)
@pytest.mark.parametrize("dt", ("float32", "float64"))
@pytest.mark.parametrize("backend", ("numpy", "llvm"))
def test_transcendental_near_limits(f, dt, backend):
    x = LIMITS[dt]
    got = np.asarray(spmd.jit(f, backend=None if backend == "llvm" else backend)(x))
    want = _numpy(f, x)
    assert got.dtype == want.dtype
    assert np.array_equal(np.isnan(got), np.isnan(want)), (x, got, want)
    assert np.array_equal(np.isinf(got), np.isinf(want)) and np.array_equal(got[np.isinf(got)], want[np.isinf(want)])
    assert np.array_equal(got == 0, want == 0), (x, got, want)            # no denormal flushed to 0
    assert np.array_equal(np.signbit(got[want == 0]), np.signbit(want[want == 0]))
    fin = np.isfinite(want) & (want != 0)
    ulps = np.abs(got[fin].astype(np.float64) - want[fin]) / np.spacing(np.abs(want[fin]))
    assert ulps.max(initial=0) <= 4, dict(zip(x[fin], ulps))



def test_float64_exp_is_within_an_ulp_of_numpy_over_its_range():
    """float64 exp is vector code of its own (a table of 2^(j/128) and a polynomial, not
    libm's call an element): within 1 ulp of numpy's over the whole range, the denormal
    results (x < -708.4) and the limits included."""
    rng = np.random.default_rng(7)
    x = np.concatenate([rng.uniform(-750, 710, 1 << 17), rng.uniform(-746, -708, 1 << 14),
                        rng.uniform(-1e-3, 1e-3, 1 << 12), rng.uniform(700, 709.782712893384, 1 << 12),
                        np.log(2.0) / 128 * np.arange(-300, 300),
                        [709.782712893384, 709.7827128933841, -745.1332191019411, -745.14, -708.3964185322641,
                         5e-324, -5e-324, 0.0, -0.0, np.inf, -np.inf, np.nan, -1e300, 1e300]])
    got, want = np.asarray(spmd.jit(np.exp)(x)), _numpy(np.exp, x)
    assert np.array_equal(np.isnan(got), np.isnan(want)) and np.array_equal(got == 0, want == 0)
    fin = np.isfinite(want)
    assert np.array_equal(got[~fin & ~np.isnan(want)], want[~fin & ~np.isnan(want)])
    ulps = np.abs(got[fin].view(np.int64) - want[fin].view(np.int64))
    assert ulps.max() <= 1, x[fin][ulps > 1][:5]


@pytest.mark.parametrize("name", ["log", "log1p"])
def test_float64_log_is_within_an_ulp_of_numpy_over_its_range(name):
    """float64 log (a table of 1/c and log c, a polynomial) and log1p (log of 1 + x and
    what the rounding of 1 + x lost) are vector code of their own: within 1 ulp of
    numpy's on denormals, near 1 (where the table's interval around 1 meets its
    neighbours), over the whole range, and equal at the limits."""
    rng = np.random.default_rng(11)
    x = np.concatenate([np.exp(rng.uniform(-744, 709, 1 << 17)), rng.uniform(0, 2.3e-308, 1 << 12),
                        1 + rng.uniform(-0.02, 0.02, 1 << 15), 1 + rng.uniform(-1e-9, 1e-9, 1 << 12),
                        rng.uniform(0.5, 2, 1 << 15), 1 + np.arange(-4, 5) / 512,
                        [5e-324, 2.2250738585072014e-308, 1.7976931348623157e308, 1.0, np.nextafter(1.0, 0),
                         np.nextafter(1.0, 2), 0.0, -0.0, -1.0, -1e-300, np.inf, -np.inf, np.nan]])
    if name == "log1p":
        x = np.concatenate([x - 1, -rng.uniform(0, 1, 1 << 14), rng.uniform(-1e-6, 1e-6, 1 << 12), [-2.0, 1e-300]])
    f = getattr(np, name)
    with np.errstate(all="ignore"):
        got, want = np.asarray(spmd.jit(f)(x)), _numpy(f, x)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    assert np.array_equal(np.signbit(got[want == 0]), np.signbit(want[want == 0]))     # log1p(-0.0) is -0.0
    fin = np.isfinite(want)
    assert np.array_equal(got[~fin & ~np.isnan(want)], want[~fin & ~np.isnan(want)])
    ulps = np.abs(got[fin].view(np.int64) - want[fin].view(np.int64))
    assert ulps.max() <= 1, x[fin][ulps > 1][:5]


def test_float64_tanh_is_within_two_ulp_of_the_true_value():
    """float64 tanh is vector code of its own (expm1 from exp's table below |x| = 0.55,
    1 - 2 / (e^2|x| + 1) above): within 2 ulp of the true value (80-bit tanhl; glibc's
    tanh is within 2.2), -0.0 and the limits as numpy's."""
    if np.finfo(np.longdouble).nmant < 63:
        pytest.skip("no extended-precision tanhl for a reference")
    rng = np.random.default_rng(3)
    x = np.concatenate([rng.uniform(-1, 1, 1 << 16), rng.uniform(-25, 25, 1 << 15), rng.uniform(-1e-3, 1e-3, 1 << 13),
                        rng.uniform(0.5, 0.6, 1 << 13), rng.uniform(-1e-9, 1e-9, 1 << 10)])
    got = np.asarray(spmd.jit(np.tanh)(x))
    ref = np.tanh(x.astype(np.longdouble))
    ulps = (np.abs(got - ref) / np.spacing(np.abs(ref).astype(np.float64))).astype(np.float64)
    assert ulps.max() <= 2.0, x[ulps > 2][:5]
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324, -5e-324, 22.0, -400.0, 2.0 ** -28, 1e300])
    got, want = np.asarray(spmd.jit(np.tanh)(special)), np.tanh(special)
    np.testing.assert_array_equal(got, want)
    assert np.array_equal(np.signbit(got), np.signbit(want))


# -- 2-byte floats: numpy computes its float16 loops in float32 and rounds once -------------------
H = np.concatenate([np.linspace(-3, 3, 40), [0.0, -0.0, 1e-5, -1e-5, 60000.0, -60000.0, np.inf, -np.inf,
                                             np.nan, 6e-8]]).astype(np.float16)
HALF_FUNCS = ["exp", "log", "log1p", "expm1", "tanh", "sqrt", "sin", "cos", "tan", "arcsin", "arccos", "arctan",
              "arcsinh", "arccosh", "arctanh", "sinh", "cosh", "cbrt", "exp2", "log2", "log10", "rint", "floor",
              "ceil", "trunc", "sign", "deg2rad", "rad2deg", "hypot", "logaddexp", "logaddexp2", "arctan2",
              "copysign", "fmod", "remainder", "floor_divide", "power", "true_divide"]


@pytest.mark.parametrize("name", HALF_FUNCS)
@pytest.mark.parametrize("backend", ("numpy", "llvm"))
def test_float16_functions_round_once(name, backend):
    f = getattr(np, name)
    fn = (lambda a: f(a, a[::-1])) if f.nin == 2 else f
    got = _run(fn, H, backend)
    _same(got, _numpy(fn, H), f"np.{name} of float16 ({backend})")


def test_float16_power_of_a_huge_python_int():
    """2**40 is inf in float16: the kernel's small-integer-exponent shortcut must not choke."""
    x = np.array([0.5, 1.0, 2.0, -1.0], np.float16)
    fn = lambda a: np.power(a, 2 ** 40)                     # noqa: E731
    _same(_run(fn, x, "llvm"), _numpy(fn, x), "float16 ** 2**40")


@pytest.mark.parametrize("backend", ("numpy", "llvm"))
def test_split_scan_keeps_negative_zeros(backend):
    """A cumsum along a split axis adds each shard the total before it: that offset starts
    at -0.0 (x + -0.0 == x), so a run of -0.0s stays -0.0 as in numpy."""
    x = np.full((9, 2), -0.0)
    x[6, 1] = 2.5
    for f in (lambda v: np.cumsum(v, axis=0), lambda v: np.cumsum(v[::-1], axis=0), lambda v: np.cumsum(v)):
        got = spmd.jit(f, in_shardings=(MESH4.sharding("x", None),),
                       backend=None if backend == "llvm" else backend)(x)
        _same(got, f(x), "cumsum of -0.0s split along the scan")


SIGNED_ZERO_FORMS = {
    "diagonal": lambda v: np.diagonal(v), "diag_k": lambda v: np.diag(v, 1),
    "take": lambda v: np.take(v, [4, 0, 2], axis=0), "take_cols": lambda v: np.take(v, [3, 0], axis=1),
    "fancy2d": lambda v: v[[0, 4, 2]][:, [3, 1]], "reverse": lambda v: v[::-1, ::-1],
    "take_along": lambda v: np.take_along_axis(v, np.zeros((5, 4), np.int64), axis=0),
}


@pytest.mark.parametrize("name", SIGNED_ZERO_FORMS)
@pytest.mark.parametrize("spec", (("x", None), (None, "x"), ("a", "b")), ids=str)
def test_lookups_keep_negative_zeros_on_any_split(name, spec):
    """Lookups on split dims sum one device's value with the others' fillers: the filler
    is -0.0 (and diagonal is not a masked sum), so every -0.0 arrives as -0.0."""
    f = SIGNED_ZERO_FORMS[name]
    x = np.full((5, 4), -0.0)
    x[1, 1] = 3.0
    mesh = MESH22 if spec == ("a", "b") else MESH4
    for backend in ("numpy", None):
        got = spmd.jit(f, in_shardings=(mesh.sharding(*spec),), backend=backend)(x)
        _same(got, f(x), f"{name} split {spec}")


# -- writes: repeated traced indices, -0.0 values, in-place functions on eager Arrays and views -----
def _put_along_view(x, i):
    y = x.copy()
    np.put_along_axis(y[:4], np.stack([i] * 4), 7.0, axis=1)     # a view of y: writes through
    return y


def _set_rows(x, i):
    y = x.copy()
    y[i] = -np.arange(16.0).reshape(4, 4)          # rows -1 and -4 (== 1) ... repeat: the last wins
    return y


def _set_points(x, i):
    y = x.copy()
    y[i % 5, i % 4] = np.array([1.0, 2.0, 3.0, 4.0])
    return y


def _set_neg_zero_twice(x, i):
    y = x.copy()
    y[np.concatenate([i, i])] = -0.0
    return y


WRITES = [_put_along_view, _set_rows, _set_points, _set_neg_zero_twice]


@pytest.mark.parametrize("f", WRITES, ids=lambda f: f.__name__)
@pytest.mark.parametrize("spec", (None, ("x", None), (None, "x")), ids=str)
def test_traced_repeated_indices_last_write_wins(f, spec):
    """numpy keeps one value where an index repeats (the last); a traced index used to add
    the repeated values up."""
    x = np.arange(20.0).reshape(5, 4)
    i = np.array([-1, 0, -4, 2])                   # -4 is 1 along 4 columns, 0 is 0 ... repeats
    for backend in ("numpy", None):
        sh = None if spec is None else (MESH4.sharding(*spec), None)
        g = spmd.jit(f, backend=backend) if sh is None else spmd.jit(f, in_shardings=sh, backend=backend)
        _same(g(x, i), f(x, i), f"{f.__name__} split {spec}")


def test_eager_in_place_functions_write_the_array_and_its_base():
    x = np.arange(20.0).reshape(5, 4)
    mask = (np.arange(20).reshape(5, 4) % 3) == 0
    cases = [("place", lambda z: np.place(z, mask, [3.0, -1.0])),
             ("putmask", lambda z: np.putmask(z, mask, [3.0, -1.0, 4.0])),
             ("put_along_axis", lambda z: np.put_along_axis(z, np.zeros((5, 1), np.int64), 9.0, axis=1)),
             ("fill_diagonal", lambda z: np.fill_diagonal(z, 5.0))]
    for name, f in cases:
        a = spmd.device_put(x.copy(), MESH4.sharding("x", None))
        y = x.copy()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            f(a)
        f(y)
        _same(a, y, name)
    # into a view: numpy writes through to the base
    a = spmd.device_put(x.copy(), MESH4.sharding("x", None))
    v = a[:4]
    y = x.copy()
    np.put_along_axis(v, np.zeros((4, 1), np.int64), 9.0, axis=1)
    np.put_along_axis(y[:4], np.zeros((4, 1), np.int64), 9.0, axis=1)
    _same(v, y[:4], "put_along_axis into a view")
    _same(a, y, "its base")


def test_jit_writing_an_eager_array_reaches_its_views_and_base():
    """A jitted function writing its argument: a view read from that Array before shows the
    write, as after any eager write; a jitted function writing an eager view writes its base."""
    x = np.arange(20.0).reshape(5, 4)
    a = spmd.device_put(x.copy(), MESH4.sharding("x", None))
    v = a[1:3]

    def f(z):
        z[1] = -1.0

    spmd.jit(f)(a)
    y = x.copy()
    y[1] = -1.0
    _same(a, y, "written argument")
    _same(v, y[1:3], "its view")
    spmd.jit(f)(v.T)
    y[1:3].T[1] = -1.0
    _same(a, y, "the base of a written view")
    _same(v, y[1:3], "another view of it")


@pytest.mark.parametrize("dt", FLOATS)
@pytest.mark.parametrize("backend", ("numpy", "llvm"))
def test_maximum_minimum_ties_of_zeros_and_nans(dt, backend):
    """np.maximum / np.minimum propagate NaN and give the second operand on a -0.0 / 0.0 tie
    (numpy's float32 / float64 loops); both backends agree with it. np.fmax / np.fmin ignore
    a NaN beside a number; which zero they give on a tie depends on numpy's SIMD loop for the
    CPU and the array's length (AVX-512 gives +0.0 either way), so only their values count."""
    a = np.array([-0.0, 0.0, np.nan, 1.0, -0.0, np.nan, 2.0, -np.inf], dt)
    b = np.array([0.0, -0.0, 1.0, np.nan, -0.0, np.nan, 3.0, np.inf], dt)
    for f in (np.maximum, np.minimum, np.fmax, np.fmin):
        got = spmd.jit(f, backend=None if backend == "llvm" else backend)(a, b)
        _same(got, f(a, b), f"np.{f.__name__} of {dt}", zsign=f in (np.maximum, np.minimum))


@pytest.mark.parametrize("mode", ("clip", "wrap"))
def test_put_modes(mode):
    """np.put(mode="clip" | "wrap") (was NotImplementedError): constant and traced indices,
    repeated ones after clipping / wrapping keeping the last value, and eagerly."""
    x = np.arange(12.0).reshape(3, 4)
    idx = np.array([[2, 13], [-13, 11], [100, -1]])
    vals = np.arange(6.0) - 10

    def f(x, i):
        y = x.copy()
        np.put(y, i, vals, mode=mode)
        return y

    want = f(x, idx)
    _same(spmd.jit(lambda x: f(x, idx))(x), want, "constant indices")
    _same(spmd.jit(f, backend="numpy")(x, idx), want, "traced indices")
    a = spmd.device_put(x.copy(), MESH4.sharding(None, "x"))
    np.put(a, idx, vals, mode=mode)
    _same(a, want, "eager")


def test_eager_python_int_out_of_range_raises_like_numpy():
    """A Python int an int32 Array cannot hold: numpy raises OverflowError; eagerly it was
    a wrapped program input (x + 2**40 returned x)."""
    x = np.arange(6, dtype=np.int32).reshape(2, 3)
    a = spmd.device_put(x, MESH4.sharding(None, "x"))
    for f in (lambda u: u + 2 ** 40, lambda u: u * 2 ** 31, lambda u: np.maximum(u, -2 ** 33)):
        with pytest.raises(OverflowError):
            f(x)
        with pytest.raises(OverflowError):
            f(a)
    b = spmd.device_put(x.astype(np.int64), MESH4.sharding(None, "x"))
    _same(b + 2 ** 40, x.astype(np.int64) + 2 ** 40, "int64 + 2**40")
    _same(a + 7, x + 7, "int32 + 7")


# -- property: any float values (NaN, inf, -0.0, denormals, huge) through the elementwise forms ----
from hypothesis import given, settings                      # noqa: E402
from hypothesis import strategies as st                     # noqa: E402
from hypothesis.extra import numpy as hnp                    # noqa: E402

PROPERTY_FORMS = [
    lambda x, y: (x // y, x % y), lambda x, y: (np.maximum(x, y), np.minimum(x, y), np.fmax(x, y)),
    lambda x, y: (x / y, x * y - y, np.copysign(x, y)), lambda x, y: (np.sign(x), np.abs(y), -x),
    lambda x, y: (x ** 0.5, np.power(np.abs(x), 1.5), x ** 2, x ** -1.0),
    lambda x, y: (np.floor(x), np.ceil(y), np.trunc(x), np.rint(y)),
    lambda x, y: ((x < y), (x == y), (x >= y), np.isfinite(x / y)),
    lambda x, y: (np.where(x > y, x, y), np.clip(x, -1.0, y)),
]
FLOAT_VALUES = st.one_of(st.floats(allow_nan=True, allow_infinity=True),
                         st.sampled_from([0.0, -0.0, 5e-324, -1e-310, 1e308, -1.0, 0.5, 2.5]))


@settings(max_examples=25, deadline=None)
@given(hnp.arrays(np.float64, (2, 8), elements=FLOAT_VALUES), hnp.arrays(np.float64, (2, 8), elements=FLOAT_VALUES),
       st.sampled_from(range(len(PROPERTY_FORMS))), st.sampled_from(FLOATS))
def test_elementwise_forms_on_any_floats(x, y, k, dt):
    f = PROPERTY_FORMS[k]
    with np.errstate(all="ignore"):
        x, y = x.astype(dt), y.astype(dt)
    want = _numpy(lambda a: f(a, y), x)
    for backend in ("numpy", None):
        _same(spmd.jit(f, backend=backend)(x, y), want, f"form {k} of {dt} ({backend})")


@pytest.mark.parametrize("backend", ("numpy", "llvm"))
def test_small_negative_integer_powers_reach_denormals(backend):
    """x ** -2 is not 1 / (x * x) in a kernel: x * x overflows where x ** -2 is a denormal."""
    x = np.array([1e155, -1e103, 2.0, 1e-80, 3.0, -0.0, np.inf, np.nan])
    for f in (lambda v: v ** -2, lambda v: v ** -3.0, lambda v: v ** -4, lambda v: v ** 4, lambda v: v ** -1.0):
        _same(spmd.jit(f, backend=None if backend == "llvm" else backend)(x), _numpy(f, x), "small powers")


@pytest.mark.parametrize("dt", FLOATS)
def test_gradients_of_the_guarded_compositions_stay_finite(dt):
    """expm1 / sinh / cosh pick between formulas with np.where: the branch not taken runs
    on a harmless input, so its zero cotangent never meets an inf or 0/0 (grad at 0 was NaN)."""
    x = np.array([0.0, 1e-9, 0.5, -2.0, 30.0, -0.0, 800.0, -800.0, 1e-30, 5.0, -25.0, 9.5], dt)
    for f, d in ((np.expm1, np.exp), (np.sinh, np.cosh), (np.cosh, np.sinh)):
        got = np.asarray(spmd.jit(spmd.grad(lambda v: np.sum(f(v))))(x))
        want = _numpy(d, x)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-8, err_msg=f"grad of np.{f.__name__}")


def lists_with_traced_values(a, s):
    """numpy converts a list operand as an array: its elements count by their dtypes (a
    Python number as numpy's default one), nested lists too."""
    return (np.maximum([s, 5], a), np.add([s, 1.5], a), np.maximum([1, 5], a),
            np.minimum([[a[0]], [2]], a.astype(np.float32)), np.multiply([a[1], 2.5], a.astype(np.float32)),
            np.array([[a[0], 1], [2, s]]), np.array([[a[0], 1], [2.5, s]]))


@pytest.mark.parametrize("dt", ["int64", "int32", "float32"])
def test_lists_holding_traced_values_as_operands(dt):
    x = np.array([3, -4]).astype(dt)
    want = lists_with_traced_values(x, 2)
    for mesh in (None, spmd.Mesh((2,), ("x",))):
        sh = (mesh.sharding("x"), mesh.sharding()) if mesh else None
        got = spmd.jit(lists_with_traced_values, in_shardings=sh, fallback=False)(x, 2)
        for g, w in zip(got, want):
            assert np.array_equal(g, w) and g.dtype == w.dtype, (g, w)
    a = spmd.device_put(x, spmd.Mesh((2,), ("x",)).sharding("x"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # no gather: each op runs sharded
        got = lists_with_traced_values(a, 2)[:5]
    for g, w in zip(got, want):
        assert np.array_equal(g.numpy(), w) and g.dtype == w.dtype, (g, w)


@pytest.mark.parametrize("dt", FLOATS)
@pytest.mark.parametrize("backend", ("numpy", "llvm"))
def test_sign_of_a_nan_is_numpys(dt, backend):
    """np.signbit and np.copysign read a NaN's sign bit, as numpy does (-np.nan has it set;
    no comparison can tell)."""
    x = np.array([1.0, 0.0, -0.0, np.inf, -np.inf, 5e-324, np.nan, -np.nan], dt)
    y = np.array([np.nan, -np.nan, -np.nan, np.nan, -np.nan, -0.0, -np.nan, np.nan], dt)
    f = lambda a, b: (np.copysign(a, b), np.signbit(b), np.signbit(a), np.copysign(b, a))  # noqa: E731
    got = spmd.jit(f, backend=None if backend == "llvm" else backend)(x, y)
    for g, w in zip(got, f(x, y)):
        g = np.asarray(g)
        assert g.dtype == w.dtype
        assert np.array_equal(np.signbit(g) if g.dtype.kind == "f" else g, np.signbit(w) if w.dtype.kind == "f" else w)


FORMS_OF_NEGATIVE_POWERS = (lambda v: v ** -1, lambda v: np.power(v, -2), lambda v: v.sum() ** -1,
                            lambda v: v ** np.array([1, -1] * 4), lambda v: (v > 0) ** -1)


@pytest.mark.parametrize("f", FORMS_OF_NEGATIVE_POWERS)
def test_integer_to_a_negative_integer_power_raises_as_numpy(f):
    """numpy raises ValueError for an integer power with a negative integer exponent; an
    exponent known when tracing raises the same under jit and eagerly (it gave 0s and 1s)."""
    x = np.arange(1, 9)
    with pytest.raises(ValueError, match="negative integer powers"):
        f(x)
    with pytest.raises(ValueError, match="negative integer powers"):
        spmd.jit(f)(x)
    if f is not FORMS_OF_NEGATIVE_POWERS[3]:           # eagerly a numpy exponent array is the data's
        with pytest.raises(ValueError, match="negative integer powers"):
            f(spmd.device_put(x, MESH4.sharding("x")))
    _same(spmd.jit(lambda v: v ** 2 + (v * 1.0) ** -1)(x), x ** 2 + (x * 1.0) ** -1, "positive and float powers")


def test_integer_to_a_traced_negative_integer_power_raises_after_the_run():
    """an exponent of the data: the program computes whether any is negative and jit
    raises numpy's ValueError after the run, naming the line; exponents the trace bounds
    at 0 or above (d % 3) carry no check."""
    x = np.arange(1, 9)
    f = spmd.jit(lambda v, d: v ** d)
    _same(f(x, np.arange(8) % 3), x ** (np.arange(8) % 3), "non-negative exponents")
    with pytest.raises(ValueError, match=r"negative integer powers.*test_numpy_edge_cases\.py:\d+"):
        f(x, np.arange(8) - 1)
    assert spmd.jit(lambda v, d: v ** (d % 3)).lower(x, x).errors == []
    assert spmd.jit(lambda v, d: (v * 1.0) ** d).lower(x, x).errors == []
