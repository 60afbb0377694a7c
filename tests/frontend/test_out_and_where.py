"""numpy's out= and where= and its in-place functions, under spmd.jit and in eager mode,
against numpy: reductions cast into out as numpy's do (computing in out's dtype where
theirs casts to it safely), ufuncs with where= keep out's values where the condition is
False, copyto onto itself, in-place sort / partition, partition's promise, einsum with
repeated indices (diagonals, traces)."""
import contextlib
import warnings

import numpy as np
import pytest

import spmd
from spmd.sharding.reshard import ReshardWarning
from backend_env import numpy_compiler

MESH = spmd.Mesh((2,), ("a",))


@contextlib.contextmanager
def eager_mode():
    """Eager programs compiled meanwhile run on the numpy backend; a fallback to numpy fails."""
    with numpy_compiler(), warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        warnings.simplefilter("ignore", ReshardWarning)     # a sort along the split dim gathers it
        yield


def put(x):
    return spmd.device_put(x, MESH.sharding("a", *([None] * (x.ndim - 1))) if x.ndim else MESH.sharding())


def check(f, *args, modes=("jit", "eager")):
    want = f(*[a.copy() for a in args])
    for mode in modes:
        if mode == "jit":
            shardings = tuple(MESH.sharding("a", *([None] * (a.ndim - 1))) if a.ndim else MESH.sharding()
                              for a in args)
            got = spmd.jit(f, in_shardings=shardings, backend="numpy")(*[a.copy() for a in args])
        else:
            with eager_mode():
                got = f(*[put(a.copy()) for a in args])
        for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
            g = g.numpy() if hasattr(g, "numpy") else np.asarray(g)
            assert g.dtype == w.dtype and g.shape == w.shape, (mode, g.dtype, w.dtype, g.shape, w.shape)
            np.testing.assert_array_equal(g, w, err_msg=mode)


X = np.array([[0.6, 0.6, 0.6, -0.6], [1.7, -2.5, 3.9, 1e8], [1e8, 1.0, -1e8, 0.5], [-3.5, 2.5, 1.5, -0.5]])
REDUCTIONS = ["sum", "prod", "max", "min", "mean", "var", "any", "all", "nansum", "nanmax", "nanmin", "median",
              "amax", "amin", "nanprod"]


@pytest.mark.parametrize("out_dtype", [np.int64, np.int32, np.float32, np.bool_, np.float64])
@pytest.mark.parametrize("name", REDUCTIONS)
def test_reductions_cast_into_out_as_numpy_does(name, out_dtype):
    if name in ("prod", "nanprod", "var") and out_dtype == np.int32:
        pytest.skip("a result beyond int32's range: C leaves that conversion undefined")
    def f(x, o):
        r = getattr(np, name)(x, axis=1, out=o)
        return o, r + 0
    check(f, X, np.zeros(4, out_dtype))


@pytest.mark.parametrize("out_dtype", [np.int64, np.float32])
@pytest.mark.parametrize("name", ["cumsum", "cumprod"])
def test_cumulative_scans_cast_into_out(name, out_dtype):
    def f(x, o):
        getattr(np, name)(x, axis=1, out=o)
        getattr(x[:2], name)(axis=0, out=o[2:])         # the method, into a view
        return o
    check(f, X, np.zeros((4, 4), out_dtype))


def test_std_ptp_and_trace_into_out():
    def f(x, o32, oi):
        np.std(x, axis=1, out=o32)
        a = o32 + 0
        np.ptp(x, axis=0, out=o32)
        b = o32 + 0
        np.trace(x, out=oi[0:1].reshape(()))
        x.trace(1, out=oi[1:].reshape(()))
        x.sum(axis=0, out=o32)
        return o32, oi, a, b
    check(f, X, np.zeros(4, np.float32), np.zeros((2,), np.int64))
    with pytest.raises(TypeError, match="Cannot cast"):     # numpy: sqrt's output into an int64 out
        spmd.jit(lambda x, o: np.std(x, axis=1, out=o), backend="numpy")(X, np.zeros(4, np.int64))


def test_reduction_out_must_have_the_result_shape():
    with pytest.raises(ValueError):
        np.sum(X, axis=0, out=np.zeros((2, 4)))
    with pytest.raises(ValueError):
        spmd.jit(lambda x, o: np.sum(x, axis=0, out=o), backend="numpy")(X, np.zeros((2, 4)))


def test_ufunc_where_keeps_out_where_false():
    def f(x, o):
        np.add(x, 1.0, out=o, where=x > 2)
        np.multiply(x[1:], x[1:], out=o[1:], where=[True, False, True, False])
        np.negative(x, out=x, where=x < 0)              # out is an input
        return o, x
    check(f, X, np.full((4, 4), 7.0))
    with pytest.raises(NotImplementedError, match=r"where=\) without out= at .*test_out_and_where\.py:\d+"):
        spmd.jit(lambda x: np.add(x, 1, where=x > 0), backend="numpy")(X)


def test_ufunc_out_casting_follows_numpy():
    def f(x, o):
        np.add(x, 1.5, out=o, casting="unsafe")
        return o
    check(f, X, np.zeros((4, 4), np.int64))
    with pytest.raises(TypeError, match="same_kind"):
        spmd.jit(lambda x, o: np.add(x, 1.5, out=o), backend="numpy")(X, np.zeros((4, 4), np.int64))


@pytest.mark.parametrize("f", [
    lambda x: np.add(x, 0.4, dtype=np.int64, casting="unsafe"),      # the inputs truncated first
    lambda x: np.multiply(x, 2.5, dtype=np.int32, casting="unsafe"),
    lambda x: np.add(x.astype(np.int64) + 2 ** 24, 1, dtype=np.float32),   # rounds to float32, then adds
    lambda x: np.sqrt(np.abs(x), dtype=np.float32),
    lambda x: np.divmod(x, 1.5, dtype=np.float32),
    lambda x: np.add(x, 1.5, dtype=np.float64),
], ids=["add_int_unsafe", "mul_int32_unsafe", "add_f32", "sqrt_f32", "divmod_f32", "add_f64"])
def test_ufunc_dtype_computes_in_the_loop_dtype(f):
    # numpy casts the inputs to dtype='s loop and computes there, not in the promoted dtype
    check(f, X)


def test_ufunc_dtype_casting_raises_as_numpy():
    with pytest.raises(TypeError, match="same_kind"):
        spmd.jit(lambda x: np.add(x, 1, dtype=np.int8), backend="numpy")(X)
    with eager_mode(), pytest.raises(TypeError, match="same_kind"):
        np.add(put(X), 1, dtype=np.int8)


def test_copyto_onto_itself_and_its_views():
    def f(x):
        np.copyto(x, x * 2, where=x > 2)
        np.copyto(x, x, where=x < 0)
        np.copyto(x[1:], x[:-1], where=x[1:] > 5)
        return x
    check(f, X)


@pytest.mark.parametrize("f", [
    lambda x: np.concatenate([x, x], dtype=np.int64, casting="unsafe"),
    lambda x: np.concatenate([x, x.astype(np.int32)], axis=1, dtype=np.float32),
    lambda x: np.stack([x, 2 * x], axis=1, dtype=np.float32),
    lambda x: np.stack([x, x], axis=-1, dtype=np.int32, casting="unsafe"),
    lambda x: np.hstack([x, x], dtype=np.int64, casting="unsafe"),
    lambda x: np.vstack([x, x], dtype=np.float32),
], ids=["concat_unsafe", "concat_f32", "stack_f32", "stack_unsafe", "hstack_unsafe", "vstack_f32"])
def test_concatenate_and_stack_take_dtype_and_casting(f):
    check(f, X)


def test_concatenate_and_stack_into_out_and_casting_errors():
    def f(x, o, p):
        np.concatenate([x, x], axis=0, out=o, casting="unsafe")
        np.stack([x, x], axis=1, out=p)
        return o, p
    check(f, X, np.zeros((8, 4), np.int64), np.zeros((4, 2, 4)))
    for g in (lambda x: np.concatenate([x, x], dtype=np.int64), lambda x: np.stack([x, x], dtype=np.int32),
              lambda x: np.hstack([x, x], dtype=np.int64)):
        with pytest.raises(TypeError, match="same_kind"):
            g(X)
        with pytest.raises(TypeError, match=r"same_kind.*test_out_and_where\.py:\d+"):
            spmd.jit(g, backend="numpy")(X)
        with eager_mode(), pytest.raises(TypeError, match="same_kind"):
            g(put(X))


def test_sort_and_partition_in_place():
    def f(x):
        y = x.copy()
        y.sort()
        x[1:].sort(axis=0)                  # a view sorts its part of the base
        z = x.copy()
        z.partition(1, axis=0)
        return x, y, z
    check(f, X)


@pytest.mark.parametrize("kth,axis", [(1, -1), (0, 0), ((0, 3), 1), (-1, None)])
def test_partition_keeps_numpys_promise(kth, axis):
    """numpy promises each kth element in its sorted place, no larger one before it and
    no smaller one after it (the order within is unspecified): spmd's is the sorted one."""
    def f(x):
        return np.partition(x, kth, axis=axis), np.argpartition(x, kth, axis=axis)
    x = np.random.default_rng(1).permutation(40).reshape(4, 10).astype(np.float64)
    want = np.sort(x, axis=axis)
    for mode in ("jit", "eager"):
        if mode == "jit":
            p, i = spmd.jit(f, backend="numpy")(x)
        else:
            with eager_mode():
                p, i = f(spmd.device_put(x, MESH.sharding()))
            p, i = p.numpy(), i.numpy()
        np.testing.assert_array_equal(p, want)       # the sorted order: every kth is in place
        taken = np.take_along_axis(x if axis is not None else x.ravel(), i, axis=axis if axis is not None else 0)
        np.testing.assert_array_equal(taken, want)
    with pytest.raises(ValueError, match="out of bounds"):
        spmd.jit(lambda x: np.partition(x, 10), backend="numpy")(x)


def test_an_empty_result_takes_any_kth_or_index():
    """numpy checks kth only on an array with elements, and take's indices once per
    element of the dims before the axis (so never where one of them is empty)."""
    x = np.zeros((3, 0))
    for f in (lambda x: np.partition(x, 5, axis=0), lambda x: np.argpartition(x, 5, axis=0),
              lambda x: np.take(x[:0], [[0, 2]], axis=1), lambda x: np.take(x, [], axis=1)):
        got = spmd.jit(f, backend="numpy")(x)
        assert np.asarray(got).shape == f(x).shape and np.asarray(got).dtype == f(x).dtype
    for f in (lambda x: np.take(x, 0, axis=1), lambda x: np.take(x, 7, axis=0)):
        with pytest.raises(IndexError):
            f(x)
        with pytest.raises(IndexError):
            spmd.jit(f, backend="numpy")(x)


@pytest.mark.parametrize("spec,shapes", [("ii->i", [(4, 4)]), ("ii", [(4, 4)]), ("iij->ij", [(3, 3, 2)]),
                                         ("iji->ij", [(3, 2, 3)]), ("ij,jj->i", [(2, 3), (3, 3)]),
                                         ("iii->i", [(3, 3, 3)]), ("bii->b", [(2, 3, 3)])])
def test_einsum_with_repeated_indices(spec, shapes):
    rng = np.random.default_rng(2)
    ops = [rng.integers(-5, 5, s).astype(np.float64) for s in shapes]
    want = np.einsum(spec, *ops)
    got = spmd.jit(lambda *a: np.einsum(spec, *a), backend="numpy")(*ops)
    np.testing.assert_array_equal(np.asarray(got), want)


@pytest.mark.parametrize("form", [
    lambda a, b: np.einsum(a, [0, 1], b, [1, 2], [0, 2]),      # a matrix product
    lambda a, b: np.einsum(a, [0, 1], b, [1, 0]),              # implicit output: a scalar
    lambda a, b: np.einsum(a, [0, 0]),                         # a trace
    lambda a, b: np.einsum(a, [1, 0], [0, 1]) + np.einsum(b, [30, 27], [27]),
])
def test_einsum_interleaved_sublists(form):
    """numpy's einsum(op0, sublist0, op1, sublist1, ..., [sublistout]): the first operand
    was taken for the subscripts string ('cannot use str '...' as an array')."""
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((4, 4)), rng.standard_normal((4, 4))
    want = form(a, b)
    got = spmd.jit(form, backend="numpy")(a, b)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12)
    with eager_mode():
        np.testing.assert_allclose(np.asarray(form(put(a), put(b))), want, rtol=1e-12)


def test_eager_mask_and_slice_in_place():
    def f(x):
        x[x[:, 0] > 0, :1] += 1
        x[x[:, 1] < 0, 2:] = x[x[:, 1] < 0, 2:] * 10
        return x, x[x[:, 0] > 1, 1]
    check(f, X, modes=("eager",))


def test_ufunc_out_returns_the_out_arrays_as_numpy_does():
    """numpy returns out itself for out=a and out=(a,) (so the result computes on as an
    array, not a 1-tuple), the tuple of its arrays for a 2-output ufunc, also with where=;
    every result is computed before any output is written, even one that is an input."""
    same = []

    def f(a, q, r):
        same.append(np.add(a, 1.0, out=a) is a)
        same.append(np.multiply(a, 2.0, out=(a,)) is a)
        s = np.sqrt(np.add(a, 1.0, out=a))              # numpy: an array of a's shape
        t = np.multiply(a, 2.0, out=a) * 3
        d = np.divmod(a, 3.0, out=(q, r))
        same.append(type(d) is tuple and len(d) == 2 and d[0] is q and d[1] is r)
        w = np.subtract(a, 100.0, out=r, where=a > 20)
        same.append(w is r)
        d = np.divmod(a, 4.0, out=(q, r), where=a < 30)
        same.append(d[0] is q and d[1] is r)
        d = np.divmod(a, 7.0, out=(a, q))               # both results from a before the write
        same.append(d[0] is a and d[1] is q)
        return a, q, r, s, t
    a, q, r = np.arange(8.0), np.full(8, -1.0), np.full(8, -2.0)
    check(f, a, q, r)
    assert same and all(same), same


def test_ufunc_out_into_a_numpy_array_from_spmd_arrays():
    """Eager: out= a plain ndarray (numpy returns it), where= keeps its values."""
    x = np.arange(8.0)
    with eager_mode():
        o = np.full(8, -1.0)
        r = np.add(put(x), 1.0, out=o, where=x > 3)
        assert r is o
        np.testing.assert_array_equal(o, np.where(x > 3, x + 1, -1.0))
        o2 = np.zeros(8)
        assert np.multiply(put(x), 2.0, out=(o2,)) is o2
        np.testing.assert_array_equal(o2, x * 2)


@pytest.mark.parametrize("name", ["modf", "frexp"])
def test_two_output_ufuncs_numpy_computes_return_their_outs(name):
    """Ufuncs spmd runs in numpy (with a warning): out=(q, None) gives q and a new array."""
    x = np.array([0.5, 1.5, -2.25, 3.0, 10.0, 0.1, -7.5, 2.0])
    want = getattr(np, name)(x)
    q = put(np.zeros(8))
    with pytest.warns(UserWarning, match="gathered"):
        got = getattr(np, name)(put(x), out=(q, None))
    assert type(got) is tuple and len(got) == 2 and got[0] is q
    for g, w in zip(got, want):
        g = g.numpy() if isinstance(g, spmd.Array) else np.asarray(g)
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("call", [
    lambda x, o1, o2: x.clip(-1, 2, out=o2), lambda x, o1, o2: x.round(1, out=o2),
    lambda x, o1, o2: x.sum(axis=1, out=o1), lambda x, o1, o2: x.cumsum(axis=0, out=o2),
    lambda x, o1, o2: x.max(axis=1, out=o1), lambda x, o1, o2: x.mean(axis=1, out=o1),
    lambda x, o1, o2: x.prod(axis=1, out=o1), lambda x, o1, o2: x.std(axis=0, out=o1)])
def test_methods_with_out_write_out_and_return_it(call):
    """ndarray methods with out=: numpy writes out and returns it (eagerly, x.clip(...,
    out=o) ran in numpy on gathered copies and left o as it was)."""
    same = []

    def f(x, o1, o2):
        r = call(x, o1, o2)
        same.append(r is o1 or r is o2)
        return o1, o2
    check(f, X, np.full(4, -7.0), np.full((4, 4), -7.0))
    assert same and all(same)
