"""Arrays made with numpy inside a jitted function (np.zeros, np.empty, np.array, ...)
take traced values by every numpy write form and run compiled, with numpy's values; a
buffer never written with a traced value stays numpy's array. Each program runs in plain
numpy and under spmd.jit on 4 devices (rows split) with both compilers, and must agree in
value, shape and dtype, with no fallback to eager."""
import threading
import warnings

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import spmd
from spmd.errors import FallbackWarning

MESH = spmd.Mesh((4,), ("d",))


def run(f, *args, compiler="llvm", split=True):
    want = f(*[a.copy() for a in args])
    shardings = tuple(MESH.sharding("d", *([None] * (a.ndim - 1))) if split and a.ndim else MESH.sharding()
                      for a in args)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        got = spmd.jit(f, in_shardings=shardings, backend=compiler, fallback=False)(*[a.copy() for a in args])
    wants = want if isinstance(want, tuple) else (want,)
    gots = got if isinstance(got, tuple) else (got,)
    assert len(wants) == len(gots)
    for g, w in zip(gots, wants):
        g = g.numpy() if hasattr(g, "numpy") else np.asarray(g)
        w = np.asarray(w)
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, w.shape, g.dtype, w.dtype)
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)
    return got


X = np.arange(48, dtype=np.float64).reshape(16, 3) * 0.25 - 3.0
I = np.array([0, 3, 3, 7, 15, 1])


def test_zeros_then_setitem_in_a_python_loop(compiler):
    def f(x):
        g = np.zeros(x.shape[0])
        for i in range(5):
            g[i] += x[i, 0] * 2
        g[7] = x[3, 1]
        return g
    run(f, X, compiler=compiler)


def test_ufunc_out_into_new_buffers(compiler):
    def f(x):
        a = np.empty((16, 3))
        np.add(x, 1.0, out=a)
        b = np.zeros_like(X)                 # *_like of a numpy array: a numpy buffer
        np.multiply(a, x, out=b)
        r = np.sqrt(np.abs(b), out=np.ones((16, 3)))
        return a, b, r
    run(f, X, compiler=compiler)


def test_augmented_assignment_and_ufunc_at(compiler):
    def f(x, i):
        g = np.ones((16, 3))
        g += x
        g *= 0.5
        h = np.zeros(16)
        np.add.at(h, i, x[:6, 2])
        np.subtract.at(h, np.array([1, 1, 2]), x[:3, 0])
        return g, h
    run(f, X, I, compiler=compiler)


def test_put_copyto_fill_place(compiler):
    def f(x):
        a = np.zeros(10)
        np.put(a, [1, 4, 5], x[:3, 0])
        b = np.full((4, 3), 7.0)
        np.copyto(b, x[4:8])
        c = np.empty(3)
        c.fill(x[0, 1])
        d = np.zeros((3, 3))
        np.put_along_axis(d, np.array([[0], [2], [1]]), x[:3, :1], axis=1)
        e = np.eye(3)
        np.fill_diagonal(e, x[0])
        return a, b, c, d, e
    run(f, X, compiler=compiler)


def test_views_made_before_the_first_traced_write_see_it(compiler):
    def f(x):
        u = np.zeros((18, 5))
        inner = u[1:-1, 1:-1]                # numpy views, made while u holds numbers
        col = u[:, 0]
        flat = u.reshape(-1)
        back = u[::-1, ::2]
        inner[...] = x                       # traced: u and every view of it see it
        col[3] = 9.0
        flat[-1] = x[0, 0]
        s = back.sum(axis=0)
        return u, inner * 1, col + 0, flat[:7] + 0, s
    run(f, X, compiler=compiler)


def test_views_after_the_write_and_writes_through_them(compiler):
    def f(x):
        u = np.zeros((16, 3))
        u[:, 1] = x[:, 0]
        v = u.T
        v[0] += 1.0
        w = u[2:6]
        w *= x[2:6]
        return u, v.copy(), w.sum()
    run(f, X, compiler=compiler)


def test_a_buffer_never_traced_stays_numpy():
    seen = {}

    def f(x):
        cfg = np.array([3.0, 0.5])
        idx = np.arange(4)
        w = np.ones(3) * cfg[1]
        seen["types"] = (type(cfg), type(w))
        seen["isinstance"] = isinstance(cfg, np.ndarray)
        n = int(cfg[0])                     # a number: configuration
        if float(w.sum()) > 1.0:            # Python control flow on numbers
            n += 1
        return x[idx] * w * n
    run(f, X)
    assert seen["isinstance"] and all(issubclass(t, np.ndarray) for t in seen["types"])


def test_a_written_buffer_that_needs_a_value_falls_back_or_errors():
    def f(x):
        g = np.zeros(3)
        g[0] = x[0, 0]
        return float(g[0]) * 2              # (a bare returned float(g[0]) is an output: returned_scalars.py)
    with pytest.raises(spmd.errors.ConcreteValueError):
        spmd.jit(f, fallback=False)(X)


def test_values_computed_from_buffers_are_buffers_too(compiler):
    def f(x):
        base = np.linspace(0.0, 1.0, 3)      # not a creation function spmd watches
        a = np.zeros(3) + base               # numpy's result from a buffer: a buffer
        a[1] = x[1, 1]
        b = np.concatenate([np.zeros(2), np.ones(2)])
        b[0] = x[0, 0]
        return a, b
    run(f, X, compiler=compiler)


def test_named_tuple_results_of_numpy_on_buffers(compiler):
    """numpy's named results (np.linalg.svd's SVDResult) on a buffer's numbers keep their
    type: unpacked, and read by field name."""
    def f(x):
        b = np.arange(9.0).reshape(3, 3) + np.eye(3)      # a buffer: numpy's own numbers
        u, s, vh = np.linalg.svd(b)
        h = np.linalg.eigh(b + b.T)
        return x[:3] * s[0], u @ vh, h.eigenvalues, np.linalg.svd(b).S
    run(f, X, compiler=compiler)


def test_np_array_and_asarray_of_traced_values(compiler):
    def f(x):
        a = np.array([x[0, 0], x[1, 1], 2.0])
        a[2] = x[2, 2]
        b = np.asarray(x)
        b2 = np.array(x)
        b2[0, 0] = -1.0                      # a copy: x keeps its value
        return a, b + 0, b2, x + 0
    run(f, X, compiler=compiler)


def test_full_with_a_traced_fill_value(compiler):
    def f(x):
        return np.full((2, 3), x[0, 0]), np.full_like(X, x[1, 1])
    run(f, X, compiler=compiler)


def test_buffer_in_the_tracers_operators_and_methods(compiler):
    def f(x):
        g = np.zeros(3)
        g[0] = x[0, 0]
        h = np.arange(3.0)                   # a plain numpy array read by traced code
        return x * g, g + x, x @ g, np.maximum(x, g), x.dot(g), x.clip(g, 10.0)
    run(f, X, compiler=compiler)


def test_numpy_is_unchanged_outside_tracing_and_in_other_threads():
    zeros = np.zeros
    errors, started, release = [], threading.Event(), threading.Event()

    def other():
        started.wait()
        a = np.zeros(3)                     # while the main thread traces
        if type(a) is not np.ndarray:
            errors.append(type(a))
        release.set()

    def f(x):
        started.set()
        release.wait(10)
        g = np.zeros(3)
        g[0] = x[0, 0]
        return g
    th = threading.Thread(target=other)
    th.start()
    spmd.jit(f)(X)
    th.join()
    assert not errors
    assert np.zeros is zeros and type(np.zeros(3)) is np.ndarray
    assert not hasattr(np.arange, "spmd_original") and not hasattr(np.fft.rfftfreq, "spmd_original")
    assert type(np.arange(3)) is np.ndarray and type(np.fft.rfftfreq(8)) is np.ndarray


def test_constant_builders_take_traced_indices_and_writes(compiler):
    """np.arange, linspace, meshgrid, fft.rfftfreq, tri, ... inside the step are numpy
    buffers: a traced index gathers from their constant, a traced write turns them traced
    (no value from the data is needed)."""
    def f(x):
        col = x[:, 0]
        i = np.argmax(col)
        freqs = np.fft.rfftfreq(16, 0.1)
        grid_x, grid_y = np.meshgrid(np.linspace(0.0, 1.0, 3), np.arange(16.0))
        r = np.arange(16) * 2
        r[3] = i                                    # a traced write into np.arange's array
        lower = np.tril(np.ones((16, 16)))
        lower[i] = col                              # and into np.tril's
        w = np.hanning(16)
        return (freqs[i % 9], grid_y[i, 1] + grid_x[i, 2], r, lower @ col, np.fft.fftfreq(16)[i],
                np.logspace(0, 2, 16)[np.argmin(col)] * w[i], np.indices((4, 4))[0].ravel()[i])
    run(f, X[::-1].copy() + np.sin(np.arange(48.0)).reshape(16, 3), compiler=compiler)


def test_a_constant_builders_view_of_an_argument_stays_numpys():
    """np.diag of a 2-d numpy array is a view of it (numpy writes reach the argument):
    it stays numpy's own view, not a buffer with memory of its own."""
    seen = {}
    base = np.ones((3, 3))

    def f(x):
        seen["d"] = type(np.diag(base))
        seen["r"] = type(np.arange(3))
        return x * 2
    spmd.jit(f)(X)
    assert seen["d"] is np.ndarray and seen["r"] is not np.ndarray


@settings(max_examples=25, deadline=None)
@given(n=st.integers(4, 13), lo=st.integers(0, 3), step=st.integers(1, 3), k=st.integers(1, 3),
       split=st.booleans())
def test_random_slice_writes_into_numpy_buffers(n, lo, step, k, split):
    x = np.arange(n * 2, dtype=np.float64).reshape(n, 2) + 1.0

    def f(x):
        g = np.zeros((n + 4, 2))
        v = g[lo::step]                     # a view made before the write
        g[lo:lo + k] += x[:k] * 2
        v[-1] = x[-1]
        h = np.empty(n)
        h[:] = x[:, 0]
        h[::step] *= -1.0
        return g, h, v + 0
    run(f, x, split=split)


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 2**31), st.sampled_from(["minimum", "maximum"]), st.sampled_from(["float64", "int64"]))
def test_minimum_and_maximum_at_with_repeated_indices(seed, name, dt):
    """np.minimum.at / np.maximum.at into a buffer with traced, repeating (and negative)
    indices, rows or elements: numpy's unbuffered result (Bellman-Ford's relaxation)."""
    rng = np.random.default_rng(seed)
    ufunc = getattr(np, name)

    def relax(dist, src, dst, w):
        d = np.full(dist.shape[0], 50, dtype=dist.dtype)
        d[:4] = dist[:4]
        ufunc.at(d, dst, d[src] + w)
        rows = np.zeros((dist.shape[0], 2), dtype=dist.dtype)
        ufunc.at(rows, (dst, 1), w)
        return d, rows

    n, m = 8, 12
    dist = rng.integers(0, 40, n).astype(dt)
    if dt == "float64" and seed % 3 == 0:
        dist[1] = np.nan
    run(relax, dist, rng.integers(0, n, m), rng.integers(-n, n, m), rng.integers(0, 9, m).astype(dt))
