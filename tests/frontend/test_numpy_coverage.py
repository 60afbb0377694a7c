"""numpy functions with static result shapes (numpy_lib/ranges.py, index_funcs.py,
accumulate.py, int_funcs.py): hypothesis draws shapes, axes and arguments; each function
under spmd.jit on meshes of 2 and 4 (inputs replicated and split) and eagerly must give
numpy's values, shapes and dtypes, with no graph break."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from numpy.lib.stride_tricks import sliding_window_view

import spmd
from numpy_coverage_util import check

SETTINGS = settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _rng(seed):
    return np.random.default_rng(seed)


seeds = st.integers(0, 2 ** 32 - 1)
shapes = st.lists(st.integers(1, 5), min_size=1, max_size=3).map(tuple)


def floats(rng, shape, nan=False):
    x = rng.uniform(-3, 3, shape)
    if nan and x.size:
        x.flat[rng.integers(0, x.size, max(1, x.size // 3))] = np.nan
    return x


# ------------------------------------------------------------------------- ranges
@SETTINGS
@given(seed=seeds, k=st.sampled_from([(), (2,), (3,)]), num=st.integers(0, 6), endpoint=st.booleans(),
       axis=st.sampled_from([0, -1]), retstep=st.booleans(), dtype=st.sampled_from([None, np.int64, np.float32]))
def test_linspace_with_traced_ends(seed, k, num, endpoint, axis, retstep, dtype):
    rng = _rng(seed)
    s, e = floats(rng, k), floats(rng, k)
    if rng.random() < 0.3:
        e = s.copy()                     # a zero step: numpy's divide-first path
    check(lambda s, e: np.linspace(s, e, num, endpoint=endpoint, retstep=retstep, dtype=dtype, axis=axis), s, e)


@SETTINGS
@given(seed=seeds, k=st.sampled_from([(), (2,)]), num=st.integers(0, 5), endpoint=st.booleans(),
       base=st.sampled_from([10.0, 2.0]), neg=st.booleans())
def test_logspace_and_geomspace_with_traced_ends(seed, k, num, endpoint, base, neg):
    rng = _rng(seed)
    s, e = rng.uniform(0.5, 4, k), rng.uniform(0.5, 4, k)
    if neg:
        s, e = -s, -e
    check(lambda s, e: np.logspace(s, e, num, endpoint=endpoint, base=base), s, e, rtol=1e-10)
    check(lambda s, e: np.geomspace(s, e, num, endpoint=endpoint, axis=-1), s, e, rtol=1e-10)


def test_geomspace_with_a_zero_end_is_nan_not_a_sequence():
    """numpy raises ValueError; a traced zero cannot raise, so the result is all NaN."""
    got = spmd.jit(lambda s: np.geomspace(s, 10.0, 4), backend="numpy")(np.float64(0.0))
    assert np.isnan(np.asarray(got)).all()


# ------------------------------------------------------------------------- index arithmetic
@SETTINGS
@given(seed=seeds, shape=shapes, n=st.integers(1, 6), order=st.sampled_from(["C", "F"]))
def test_unravel_and_ravel_multi_index(seed, shape, n, order):
    rng = _rng(seed)
    size = int(np.prod(shape))
    idx = rng.integers(0, size, (n,))
    check(lambda i: np.unravel_index(i, shape, order=order), idx)
    coords = [rng.integers(0, d, (n,)) for d in shape]
    modes = [str(m) for m in rng.choice(["raise", "wrap", "clip"], len(shape))]
    wild = [np.where(np.array([m != "raise"] * n), c + rng.integers(-7, 7, n), c) for c, m in zip(coords, modes)]
    check(lambda *c: np.ravel_multi_index(c, shape, mode=tuple(modes), order=order), *wild)


@SETTINGS
@given(seed=seeds, nkeys=st.integers(1, 3), shape=st.sampled_from([(7,), (3, 6), (4, 1)]), axis=st.sampled_from([0, -1]),
       as_array=st.booleans())
def test_lexsort(seed, nkeys, shape, axis, as_array):
    rng = _rng(seed)
    keys = [rng.integers(0, 3, shape) for _ in range(nkeys - 1)] + [floats(rng, shape, nan=True).round()]
    if as_array:
        check(lambda k: np.lexsort(k, axis=axis), np.stack([k.astype(float) for k in keys]))
    else:
        check(lambda *k: np.lexsort(k, axis=axis), *keys)


def test_lexsort_of_a_1d_array_sorts_its_0d_keys():
    check(lambda k: np.lexsort(k), np.array([3, 1, 2]))


@SETTINGS
@given(seed=seeds, shape=shapes, n=st.integers(1, 4), mode=st.sampled_from(["raise", "wrap", "clip"]),
       method=st.booleans())
def test_choose(seed, shape, n, mode, method):
    rng = _rng(seed)
    lo, hi = (0, n) if mode == "raise" else (-5, n + 5)
    a = rng.integers(lo, hi, shape)
    choices = [rng.integers(-9, 9, shape[k:]) * (k + 1) for k in range(n)]
    fn = (lambda a, *c: a.choose(c, mode=mode)) if method else (lambda a, *c: np.choose(a, c, mode=mode))
    check(fn, a, *[c.astype(float) if k == 0 else c for k, c in enumerate(choices)])


@SETTINGS
@given(seed=seeds, shape=shapes, extra=st.booleans(), consts=st.booleans())
def test_piecewise_keeps_each_function_where_selected(seed, shape, extra, consts):
    rng = _rng(seed)
    x = floats(rng, shape)
    funcs = [lambda v: -v, (7.5 if consts else (lambda v: np.sqrt(v))), lambda v, k=2: v * k]
    funcs = funcs if extra else funcs[:2]

    def f(x):
        return np.piecewise(x, [x < -1, x > 0.5], funcs)
    check(f, x)
    check(lambda x: np.piecewise(x.astype(np.int64), [x > 0], [lambda v: v + 1, 3]), x)


def test_piecewise_refuses_a_function_that_is_not_elementwise():
    with pytest.raises(NotImplementedError, match=r"piecewise at .*test_numpy_coverage\.py:\d+.*elementwise"):
        spmd.jit(lambda x: np.piecewise(x, [x > 0], [lambda v: v.sum()]), backend="numpy")(np.arange(4.0))


# ------------------------------------------------------------------------- running reductions
@SETTINGS
@given(seed=seeds, shape=shapes, axis=st.sampled_from([None, 0, -1]), dtype=st.sampled_from([None, np.float32]))
def test_nancumsum_nancumprod(seed, shape, axis, dtype):
    rng = _rng(seed)
    x = floats(rng, shape, nan=True)
    check(lambda x: (np.nancumsum(x, axis=axis, dtype=dtype), np.nancumprod(x, axis=axis, dtype=dtype)), x,
          rtol=1e-5 if dtype else 1e-12)
    i = rng.integers(-3, 3, shape).astype(np.int32)
    check(lambda i: (np.nancumsum(i, axis=axis), np.nancumprod(i, axis=axis)), i)


@SETTINGS
@given(seed=seeds, shape=shapes, begin=st.sampled_from([None, 5, [1, 2]]), end=st.sampled_from([None, -1, [[3]]]),
       integer=st.booleans())
def test_ediff1d(seed, shape, begin, end, integer):
    rng = _rng(seed)
    x = rng.integers(-9, 9, shape) if integer else floats(rng, shape)
    check(lambda x: np.ediff1d(x, to_end=end, to_begin=begin), x)


def test_ediff1d_refuses_ends_numpy_refuses():
    with pytest.raises(TypeError, match="same_kind"):
        spmd.jit(lambda x: np.ediff1d(x, to_begin=0.5), backend="numpy")(np.arange(4))


@SETTINGS
@given(seed=seeds, shape=shapes, axis=st.sampled_from([0, -1]), xs=st.sampled_from(["none", "1d", "nd"]),
       dx=st.sampled_from([1.0, 0.25]))
def test_trapezoid(seed, shape, axis, xs, dx):
    rng = _rng(seed)
    y = floats(rng, shape)
    if xs == "none":
        check(lambda y: np.trapezoid(y, dx=dx, axis=axis), y)
    elif xs == "1d":
        check(lambda y, x: np.trapezoid(y, x, axis=axis), y, np.sort(floats(rng, (shape[axis],))))
    else:
        check(lambda y, x: np.trapezoid(y, x, axis=axis), y, floats(rng, shape))


# ------------------------------------------------------------------------- ufunc.reduce / reduceat
@SETTINGS
@given(seed=seeds, shape=shapes, name=st.sampled_from(["logical_and", "logical_or", "logical_xor", "bitwise_and",
                                                      "bitwise_or", "bitwise_xor"]),
       axis=st.sampled_from([0, -1, None, (0, -1)]), keepdims=st.booleans(), boolean=st.booleans(),
       where=st.booleans())
def test_logical_and_bitwise_reduce(seed, shape, name, axis, keepdims, boolean, where):
    rng = _rng(seed)
    x = rng.random(shape) < 0.6 if boolean else rng.integers(-40, 40, shape)
    if isinstance(axis, tuple) and len(shape) < 2:
        axis = 0
    u = getattr(np, name)
    init = {"logical_and": True, "logical_or": False, "logical_xor": True}.get(name, 6)
    if where:
        m = rng.random(shape) < 0.7
        check(lambda x, m: u.reduce(x, axis=axis, keepdims=keepdims, where=m, initial=init), x, m)
    else:
        check(lambda x: u.reduce(x, axis=axis, keepdims=keepdims), x)


def test_logical_reduce_of_floats_is_bool():
    x = np.array([[1.5, 0.0, -2.0], [3.0, 2.0, np.nan]])
    check(lambda x: (np.logical_and.reduce(x, axis=-1), np.logical_xor.reduce(x, axis=0),
                     np.logical_or.reduce(x, axis=None)), x)


@SETTINGS
@given(seed=seeds, shape=shapes, name=st.sampled_from(["add", "multiply", "maximum", "minimum"]),
       nidx=st.integers(1, 6), axis=st.sampled_from([0, -1]), integer=st.booleans())
def test_reduceat_with_static_indices(seed, shape, name, nidx, axis, integer):
    rng = _rng(seed)
    x = rng.integers(-5, 5, shape).astype(np.int32) if integer else floats(rng, shape)
    idx = rng.integers(0, shape[axis], nidx)         # unsorted too: numpy's rule for non-increasing ones
    check(lambda x: getattr(np, name).reduceat(x, idx, axis=axis), x)


def test_reduceat_refuses_indices_out_of_range_as_numpy():
    with pytest.raises(IndexError, match="out-of-bounds"):
        spmd.jit(lambda x: np.add.reduceat(x, [0, 5]), backend="numpy")(np.arange(4.0))


# ------------------------------------------------------------------------- selection, shapes
@SETTINGS
@given(seed=seeds, shape=shapes, kind=st.sampled_from(["int", "neg", "list", "slice", "mask"]),
       axis=st.sampled_from([None, 0, -1]))
def test_delete_at_static_positions(seed, shape, kind, axis):
    rng = _rng(seed)
    x = rng.integers(-9, 9, shape)
    n = x.size if axis is None else shape[axis]
    obj = {"int": int(rng.integers(0, n)), "neg": -1, "list": list(rng.integers(-n, n, 3)),
           "slice": slice(0, None, 2), "mask": rng.random(n) < 0.5}[kind]
    check(lambda x: np.delete(x, obj, axis=axis), x)


@SETTINGS
@given(seed=seeds, shape=shapes, new=st.sampled_from([7, (2, 3), (0,), (5, 1, 2), 1]))
def test_resize(seed, shape, new):
    x = floats(_rng(seed), shape)
    check(lambda x: np.resize(x, new), x)


@SETTINGS
@given(seed=seeds, shape=shapes, axis=st.sampled_from([None, 0, -1]), method=st.booleans())
def test_compress_with_a_static_condition(seed, shape, axis, method):
    rng = _rng(seed)
    x = rng.integers(-9, 9, shape)
    n = x.size if axis is None else shape[axis]
    cond = list(rng.random(int(rng.integers(0, n + 1))) < 0.5)     # shorter conditions too
    check((lambda x: x.compress(cond, axis=axis)) if method else (lambda x: np.compress(cond, x, axis=axis)), x)


@SETTINGS
@given(seed=seeds, shape=st.lists(st.integers(1, 6), min_size=1, max_size=3).map(tuple), data=st.data())
def test_sliding_window_view(seed, shape, data):
    x = floats(_rng(seed), shape)
    nax = data.draw(st.integers(1, len(shape)))
    axes = tuple(data.draw(st.permutations(range(len(shape))))[:nax])
    if data.draw(st.booleans()) and shape[axes[0]] >= 2:
        axes = axes + (axes[0],)                                  # the same axis twice, as numpy allows
    window, left = [], list(shape)
    for a in axes:
        w = data.draw(st.integers(0 if left[a] else 0, left[a]))
        window.append(w)
        left[a] -= max(w - 1, 0)
    use_axis = data.draw(st.booleans()) or len(axes) != len(shape) or sorted(axes) != list(range(len(shape)))
    if use_axis:
        check(lambda x: sliding_window_view(x, tuple(window), axis=axes) * 2, x)
    else:
        order = np.argsort(axes)
        check(lambda x: sliding_window_view(x, tuple(np.array(window)[order])), x)


def test_sliding_window_view_wide_window_is_a_gather_and_split_stays_exact():
    x = np.arange(100.0).reshape(2, 50)
    check(lambda x: sliding_window_view(x, 40, axis=-1).sum(-1), x)


def test_sliding_window_moving_average_on_a_split_axis_exchanges_only_halos():
    mesh = spmd.Mesh((4,), ("x",))
    x = np.arange(64.0)
    f = spmd.jit(lambda x: sliding_window_view(x, 3).mean(-1), in_shardings=(mesh.sharding("x"),), backend="numpy")
    low = f.lower(x)
    assert not [c for c in low.report()["collectives"] if c["op"] in ("all_gather", "all_to_all")]
    np.testing.assert_allclose(np.asarray(f(x)), sliding_window_view(x, 3).mean(-1))


@SETTINGS
@given(seed=seeds, shape=st.lists(st.integers(1, 4), min_size=1, max_size=3).map(tuple), data=st.data())
def test_apply_along_axis(seed, shape, data):
    x = floats(_rng(seed), shape)
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    func = data.draw(st.sampled_from([np.sum, lambda v: v[::-1] * 2, lambda v: np.outer(v, v), lambda v: v.max()]))
    check(lambda x: np.apply_along_axis(func, axis, x), x)


def test_apply_along_axis_refuses_many_slices_clearly():
    with pytest.raises(NotImplementedError, match=r"apply_along_axis at .*test_numpy_coverage\.py:\d+.*axis=1"):
        spmd.jit(lambda x: np.apply_along_axis(np.sum, 1, x), backend="numpy")(np.ones((500, 3)))


# ------------------------------------------------------------------------- integer ufuncs
@SETTINGS
@given(seed=seeds, shape=shapes, dt=st.sampled_from([np.int32, np.int64]), bshape=st.booleans())
def test_gcd_lcm(seed, shape, dt, bshape):
    rng = _rng(seed)
    a = rng.integers(-60, 60, shape).astype(dt)
    b = rng.integers(-60, 60, shape[-1:] if bshape else shape).astype(np.int64)
    a.flat[0] = 0
    check(lambda a, b: (np.gcd(a, b), np.lcm(a, b), np.gcd(a, 12), np.lcm(a, np.int32(4))), a, b)


def test_gcd_of_floats_is_refused_as_numpy():
    with pytest.raises(TypeError, match="gcd"):
        spmd.jit(lambda x: np.gcd(x, 2), backend="numpy")(np.arange(4.0))


def test_bitwise_count():
    x = np.array([0, 1, -1, 7, -8, 2 ** 40 + 3, -(2 ** 63)], np.int64)
    if "uint8" not in spmd.ir.dtypes.DTYPES:         # spmd without uint8 arrays refuses it
        with pytest.raises(NotImplementedError, match="bitwise_count"):
            spmd.jit(np.bitwise_count, backend="numpy")(x)
        return
    check(lambda x: (np.bitwise_count(x), np.bitwise_count(x.astype(np.int32)), np.bitwise_count(x > 0)), x)


def test_piecewise_reads_conditions_as_numpy_does():
    """A stacked array of conditions is a list of them; a condition over the leading dims
    selects whole rows (numpy's y[cond])."""
    x = np.arange(-3.0, 3.0).reshape(3, 2)
    check(lambda x: np.piecewise(x, np.stack([x > 0, x < -1]), [np.negative, 5.0, np.square]), x)
    check(lambda x: np.piecewise(x, [np.array([True, False, True])], [np.negative]), x)
    with pytest.raises(IndexError, match="did not match"):
        spmd.jit(lambda x: np.piecewise(x, [x[0] > 0], [np.negative]), backend="numpy")(x)


def test_llvm_backend_runs_the_functions():
    """One program through the LLVM backend: the while loop of gcd, the halving tree of a
    bitwise reduce, windows, segments, ranges and a stable lexsort."""
    rng = np.random.default_rng(7)
    x = rng.uniform(-2, 2, (6, 8))
    i = rng.integers(-30, 30, (6, 8))

    def f(x, i):
        return (np.gcd(i, 12) + np.lcm(i, 3), np.bitwise_xor.reduce(i, axis=1), np.logical_and.reduce(x > -1.5, 0),
                sliding_window_view(x, 3, axis=1).max(-1), np.add.reduceat(x, [0, 3, 1, 5], axis=1),
                np.linspace(x.min(), x.max(), 7), np.nancumsum(np.where(x > 1, np.nan, x), axis=0),
                np.lexsort((i[0], np.round(x[0]))), np.choose(i % 3, [x, -x, 2 * x]), np.trapezoid(x, axis=0))

    want = f(x, i)
    got = spmd.jit(f, backend="llvm")(x, i)
    for k, (g, w) in enumerate(zip(got, want)):
        assert np.asarray(g).dtype == np.asarray(w).dtype, k
        np.testing.assert_allclose(np.asarray(g), w, rtol=1e-12, atol=1e-12, err_msg=f"output {k}")
