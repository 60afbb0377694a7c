"""Eager mode (spmd/eager/): numpy on spmd.Arrays outside of jit stays sharded.

Results are spmd.Arrays with the sharding propagation chose; the collectives the eager
programs ran are counted (eager.STATS), so a test can say that nothing was gathered;
writes rebind the Array; what spmd cannot run eagerly warns with the bytes gathered.
"""
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import spmd
from spmd.eager import programs as eager
from eager_programs import cg, kmeans, spd_problem
from write_programs import VIEW_FUNCTIONS, make_program, run as run_program, write_through
from paths import ROOT, SCRIPTS
from backend_env import numpy_compiler

MESH = spmd.Mesh((4,), ("x",))
MESH2 = spmd.Mesh((2, 2), ("a", "b"))


@pytest.fixture(autouse=True)
def _errors_on_fallback():
    # a fallback to numpy anywhere in these tests is a failure unless a test expects it
    eager.reset_stats()
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        yield


def put(x, *spec, mesh=MESH):
    return spmd.device_put(np.asarray(x), mesh.sharding(*spec))


def collectives():
    return dict(eager.STATS["collectives"])


def test_results_are_sharded_arrays_and_nothing_is_gathered():
    x = np.arange(32.0).reshape(8, 4)
    a = put(x, "x", None)
    exp_x = np.exp(x) * x
    cases = [
        (a + 1, x + 1, ("x", None)), (np.exp(a) * a, exp_x, ("x", None)),
        (2.0 - a, 2.0 - x, ("x", None)), (a > 3, x > 3, ("x", None)),
        (np.where(a > 3, a, 0.0), np.where(x > 3, x, 0.0), ("x", None)),
        (a.T, x.T, (None, "x")), (a.reshape(4, 8), x.reshape(4, 8), ("x", None)),
        (a[2:6], x[2:6], ("x", None)), (np.maximum(a, a + 1), np.maximum(x, x + 1), ("x", None)),
        (a.astype(np.float32), x.astype(np.float32), ("x", None)),
    ]
    for got, want, spec in cases:
        assert type(got) is spmd.Array and got.dtype == want.dtype and got.shape == want.shape
        assert got.sharding == MESH.sharding(*spec), (got.sharding, spec)
        if want is exp_x:
            # numpy's own exp differs between CPUs (its AVX-512 loop is not libm's) by 1 ulp,
            # and the product with x can round that to 2
            np.testing.assert_array_max_ulp(got.numpy(), want, maxulp=2)
        else:
            np.testing.assert_array_equal(got.numpy(), want)
    # elementwise ops, transposes, reshapes, casts: no collective; a shifted slice moves
    # rows between neighbours (collective_permute), and nothing is gathered
    assert set(collectives()) <= {"collective_permute"}, collectives()
    assert eager.STATS["fallbacks"] == 0


def test_reductions_and_contractions_all_reduce_small_results():
    x = np.arange(24.0).reshape(6, 4)
    a = put(x, "x", None)
    s = a.sum()
    assert s.sharding.spec == () and float(s) == x.sum() and collectives() == {"all_reduce": 1}
    col = a.sum(axis=0)
    assert col.sharding == MESH.sharding(None) and np.allclose(col.numpy(), x.sum(0))
    rows = a.mean(axis=1)
    assert rows.sharding == MESH.sharding("x") and np.allclose(rows.numpy(), x.mean(1))
    v = a @ np.ones(4)
    assert v.sharding == MESH.sharding("x") and np.allclose(v.numpy(), x.sum(1))
    g = a.T @ a
    assert g.sharding.spec == (None, None) and np.allclose(g.numpy(), x.T @ x)
    assert np.argmax(a, axis=0).dtype == np.int64 and np.allclose(np.argmax(a, axis=0).numpy(), 5)
    assert "all_gather" not in collectives(), collectives()
    b = put(x, "a", "b", mesh=MESH2)
    assert np.allclose(np.sum(b * b), (x * x).sum()) and (b * b).sharding == b.sharding


def test_programs_are_cached_per_op_shape_and_sharding():
    eager.clear_cache()
    a = put(np.arange(8.0), "x")
    a + 1.0
    n = eager.STATS["compiled"]
    for alpha in (2.0, 3.5, -1.0):              # Python scalars are inputs: no recompile
        assert np.allclose((a + alpha).numpy(), np.arange(8.0) + alpha)
    assert eager.STATS["compiled"] == n
    for i in range(8):                          # so are integer indices
        assert float(a[i]) == i
    assert eager.STATS["compiled"] == n + 1
    b = put(np.arange(8.0), None)               # another sharding: another program
    assert (b + 1.0).sharding == MESH.sharding(None) and eager.STATS["compiled"] == n + 2
    with pytest.raises(IndexError, match="out of bounds"):
        a[8]
    assert float(a[-1]) == 7


def test_scalars_and_python_control_flow():
    a = put(np.array([3.0, -1.0, 2.0, 5.0, 0.5]), "x")
    s = np.max(a)
    assert s.sharding.spec == () and float(s) == 5.0 and int(s) == 5 and s.item() == 5.0
    assert bool(s > 4) and not bool(s < 4)
    n = 0
    while np.min(a) < 10:                       # a comparison in a `while` on eager arrays
        a = a + 4
        n += 1
    assert n == 3 and np.allclose(a.numpy(), [15, 11, 14, 17, 12.5])
    assert [10, 20, 30][put(np.int64(2))] == 30 and f"{s:.1f}" == "5.0"


def test_writes_rebind_the_array():
    x = np.arange(20.0).reshape(5, 4)
    a = put(x, "x", None)
    ref = x.copy()
    for key, v in [((1,), 7.0), ((slice(None), 0), -1.0), ((slice(1, 5, 2), slice(None, None, -2)), 9.0),
                   ((Ellipsis, 2), np.arange(5.0)), ((-1, slice(1, 3)), np.array([4.0, 8.0]))]:
        a[key] = v
        ref[key] = v
        np.testing.assert_array_equal(a.numpy(), ref)
    assert a.sharding == MESH.sharding("x", None)
    a[a > 10] = 0.0
    ref[ref > 10] = 0.0
    np.testing.assert_array_equal(a.numpy(), ref)
    b = a
    a += 1                                      # in place: every reference sees it
    ref += 1
    assert b is a and np.array_equal(b.numpy(), ref)
    a[:, 1] *= 2                                # get, multiply, set
    ref[:, 1] *= 2
    np.testing.assert_array_equal(a.numpy(), ref)
    i = put(np.arange(4), "x")
    with pytest.raises(TypeError, match="same_kind"):
        i += 0.5
    a.fill(0.25)
    assert np.all(a.numpy() == 0.25) and a.sharding == MESH.sharding("x", None)
    out = put(np.zeros(4), "x")
    np.add(put(np.ones(4), "x"), 2, out=out)
    assert np.all(out.numpy() == 3)
    assert "all_gather" not in collectives(), collectives()


def test_views_write_through_and_show_writes():
    x = np.arange(12.0).reshape(3, 4)
    a = put(x, "x", None)
    row = a[1]
    row[2] = 100.0                              # numpy: a view, so a changes
    x[1, 2] = 100.0
    np.testing.assert_array_equal(a.numpy(), x)
    col, xcol = a[:, 0], x[:, 0]
    a[0, 0] = -5.0                              # ... and a view shows a write into its base
    x[0, 0] = -5.0
    np.testing.assert_array_equal((col + 1).numpy(), xcol + 1)
    np.testing.assert_array_equal(row.numpy(), x[1])


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2 ** 20), shape=st.sampled_from([(5, 6), (4, 4, 3), (7,), (6, 5)]),
       steps=st.integers(1, 8), devices=st.sampled_from([1, 2]), dim=st.integers(0, 2))
def test_random_writes_through_views(seed, shape, steps, devices, dim):
    """The random view / write programs of the jit property test, run eagerly on an
    spmd.Array split over 1 or 2 devices along one dim (evenly or not): the base and every
    view end as numpy leaves them, with nothing gathered."""
    prog = make_program(seed, shape, steps)
    x = np.random.default_rng(seed).random(shape)
    want = run_program(prog, x.copy())
    spec = [None] * len(shape)
    spec[dim % len(shape)] = "x"
    with numpy_compiler():           # (the semantics are the front end's; the backend is tested elsewhere)
        got = run_program(prog, put(x, *spec, mesh=spmd.Mesh((devices,), ("x",))))
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        assert isinstance(g, spmd.Array), (k, prog)
        np.testing.assert_array_equal(g.numpy(), w, err_msg=f"pool[{k}] after {prog}")


def test_writes_into_reshaped_transposed_and_strided_views():
    """The writes numpy makes through views reach the base, and every view shows them."""
    x = np.arange(24.0).reshape(4, 6)
    for spec in [("x", None), (None, "x")]:
        a, y = put(x, *spec), x.copy()
        views = [(a.reshape(6, 4), y.reshape(6, 4)), (a.T, y.T), (a[::2], y[::2]), (a[1], y[1]),
                 (a[:, 1:5].T[::-1], y[:, 1:5].T[::-1])]
        (v, w), (t, u), (s, r), (row, yrow), (z, yz) = views
        v[0] = 1.0
        w[0] = 1.0
        t[1:] = 0.0
        u[1:] = 0.0
        s += 1.0
        r += 1.0
        z *= -2.0
        yz *= -2.0
        row.fill(7.0)
        yrow.fill(7.0)
        np.add(a[2], 0.5, out=a[3])
        np.add(y[2], 0.5, out=y[3])
        for g, want in [(a, y)] + views:
            np.testing.assert_array_equal(g.numpy(), want)
        assert a.sharding == MESH.sharding(*spec)


@pytest.mark.parametrize("name,view", VIEW_FUNCTIONS, ids=[n for n, _ in VIEW_FUNCTIONS])
def test_numpy_functions_that_return_views(name, view):
    x = np.arange(24.0).reshape(4, 6)
    want = write_through(view)(x.copy())
    with numpy_compiler():
        got = write_through(view)(put(x, "x", None))
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g.numpy(), w)


def test_only_live_views_are_derived_again():
    """After a write, each view still referenced is derived again from its base (one
    program each); views no longer referenced are not (nothing keeps them alive longer)."""
    a = put(np.arange(12.0).reshape(6, 2), "x", None)
    for i in range(6):
        float(a[i].sum())                       # a view that dies at once
    n = eager.STATS["calls"]
    a[2] = 0.0
    assert eager.STATS["calls"] == n + 1        # the write alone
    row = a[3]
    n = eager.STATS["calls"]
    a[3] = 5.0
    assert eager.STATS["calls"] == n + 2 and np.all(row.numpy() == 5.0)


def test_a_copy_is_not_a_view():
    """numpy copies where the strides do not allow a view (reshape or ravel of a transpose,
    flatten), and a scalar index gives a scalar: writes into those do not reach the base.
    Order "K" reads the elements in the order of the base's memory."""
    x = np.arange(12.0).reshape(3, 4)
    a = put(x, "x", None)
    c, d, f = a.T.reshape(-1), a[:, ::2].ravel(), a.flatten()
    c[0] = d[0] = f[0] = 100.0
    e = a[1, 2]
    e += 1
    np.testing.assert_array_equal(a.numpy(), x)
    assert float(c[0]) == float(d[0]) == float(f[0]) == 100.0 and float(e) == x[1, 2] + 1
    for got, want in [(a.T.ravel("K"), x.T.ravel("K")), (a.T[::-1].flatten("A"), x.T[::-1].flatten("A")),
                      (np.ravel(a.T, order="K"), np.ravel(x.T, order="K"))]:
        np.testing.assert_array_equal(got.numpy(), want)


@pytest.mark.parametrize("mesh,spec", [(MESH, ("x", None)), (MESH2, (("a", "b"), None)), (MESH2, ("b", None)),
                                       (MESH, (None, None))])
def test_data_dependent_shapes_stay_sharded(mesh, spec):
    rng = np.random.default_rng(3)
    for shape in [(10, 3), (3, 2), (9,), (5, 1, 2)]:
        x = rng.standard_normal(shape).round(1)
        a = spmd.device_put(x, mesh.sharding(*spec[:len(shape)]))
        eager.reset_stats()
        sel = a[a > 0.2]
        assert isinstance(sel, spmd.Array) and sel.sharding.spec == (spec[0],)
        np.testing.assert_array_equal(sel.numpy(), x[x > 0.2])
        np.testing.assert_array_equal(np.argwhere(a).numpy(), np.argwhere(x))
        for got, want in zip(np.nonzero(a < 0), np.nonzero(x < 0)):
            assert got.sharding.spec == (spec[0],)
            np.testing.assert_array_equal(got.numpy(), want)
        np.testing.assert_array_equal(np.flatnonzero(a).numpy(), np.flatnonzero(x))
        got, want = np.where(a < 0), np.where(x < 0)          # numpy: condition.nonzero()
        assert isinstance(got, tuple) and len(got) == len(want)
        for g, w in zip(got, want):
            assert g.sharding.spec == (spec[0],)
            np.testing.assert_array_equal(g.numpy(), w)
        assert int(np.count_nonzero(a > 0)) == np.count_nonzero(x > 0)
        assert eager.STATS["fallbacks"] == 0 and "all_gather" not in collectives(), collectives()
    empty = a[a > 100]
    assert empty.shape == (0,) and empty.numpy().shape == (0,)


@settings(max_examples=6, deadline=None)
@given(st.integers(0, 2 ** 31 - 1), st.sampled_from([4, 8, 12]), st.sampled_from([4, 5, 8]),
       st.sampled_from([(MESH, (None, "x")), (MESH2, ("a", "b")), (MESH2, ("b", "a")), (MESH2, (None, ("a", "b")))]))
def test_mask_of_an_array_split_along_other_dims_moves_it_to_rows_not_gathered(seed, n, m, layout):
    # nbody's inv_r3[inv_r3 > 0] = inv_r3[inv_r3 > 0] ** -1.5, inv_r3 split along its columns (dims
    # of a few elements a device, which the move to rows would gather in part, warn: the fixture fails)
    mesh, spec = layout
    x = np.random.default_rng(seed).standard_normal((n, m)).round(1)
    a = spmd.device_put(x, mesh.sharding(*spec))
    eager.reset_stats()
    sel = a[a > 0.2]
    assert eager.STATS["fallbacks"] == 0 and "all_gather" not in collectives(), collectives()
    np.testing.assert_array_equal(sel.numpy(), x[x > 0.2])
    a[a > 0] = a[a > 0] ** -1.5            # the selected values written back: no fallback (the fixture)
    x[x > 0] = x[x > 0] ** -1.5
    # (numpy's AVX-512 pow is not libm's: 1.8 ** -1.5 differs by 1 ulp between its
    # array loop and its scalar on such a CPU; the values not selected stay exact)
    np.testing.assert_array_max_ulp(a.numpy(), x, maxulp=1)
    np.testing.assert_array_equal(a.numpy()[x <= 0], x[x <= 0])
    assert a.sharding.spec == spec and eager.STATS["fallbacks"] == 0


def test_fallbacks_warn_with_the_bytes_gathered():
    x = np.array([3.0, 1.0, 2.0, 0.0])
    a = put(x, "x")
    with pytest.warns(UserWarning, match=r"ndarray.byteswap .*\(32 bytes gathered\)"):
        a.byteswap(inplace=True)            # an ndarray method that writes its array
    np.testing.assert_array_equal(a.numpy(), x.byteswap())
    assert a.sharding == MESH.sharding("x")
    with pytest.warns(UserWarning, match=r"np.unique .*32 bytes gathered"):
        c = np.unique(a)
    assert isinstance(c, spmd.Array) and np.array_equal(c.numpy(), np.unique(x.byteswap()))
    assert eager.STATS["fallbacks"] == 2


def test_a_fallbacks_view_refuses_writes_it_could_not_pass_on():
    """numpy's x.view(int32) of a float64 array is a view: writes through it change x. The
    eager fallback computes it in numpy on a gathered copy, which no write reaches: a
    write into it raises (it was lost silently); its .copy() is an array of its own."""
    x = np.arange(8.0)
    a = put(x, "x")
    with pytest.warns(UserWarning, match="ndarray.view"):
        v = a.view(np.int32)
    np.testing.assert_array_equal(v.numpy(), x.view(np.int32))
    with pytest.raises(NotImplementedError, match="gathered copy"):
        v[0] = 5
    with pytest.warns(UserWarning, match="ndarray.view"):
        w = a.view(np.int32).copy()
    w[0] = 5
    assert w.numpy()[0] == 5 and np.array_equal(a.numpy(), x)


@pytest.mark.parametrize("make", [lambda a: a.T, lambda a: a.T + 1, lambda a: np.moveaxis(a, 0, 1) * 2],
                         ids=["view", "result", "moveaxis"])
@pytest.mark.parametrize("call", [lambda v: np.reshape(v, 12, order="A"), lambda v: np.reshape(v, (4, 3), order="A"),
                                  lambda v: np.copy(v, order="K").reshape(-1, order="A")],
                         ids=["reshape_A", "reshape_A_2d", "copy_K"])
def test_a_fallback_reads_the_array_in_numpys_memory_order(make, call):
    """reshape(order="A") reads an F-ordered array (x.T, x.T + 1) in F order: the fallback
    hands numpy the gathered value laid out as numpy would have it, not in C order."""
    x = np.arange(12.0).reshape(3, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        got = call(make(put(x, "x", None)))
    np.testing.assert_array_equal(np.asarray(got), call(make(x)))


def test_fallbacks_fail_fast_under_W_error():
    code = ("import numpy as np, spmd\n"
            "m = spmd.Mesh((2,), ('x',))\n"
            "a = spmd.device_put(np.arange(4.0), m.sharding('x'))\n"
            "b = a * 2\n"
            "np.unique(b)\n")
    p = subprocess.run([sys.executable, "-W", "error::UserWarning", "-c", code], capture_output=True,
                       text=True, timeout=120, env=dict(os.environ, PYTHONPATH=ROOT))
    # (a ReshardWarning: a UserWarning, from the user's line, as the partitioner's gathers)
    assert p.returncode != 0 and "ReshardWarning: spmd: np.unique" in p.stderr, p.stderr


def test_conjugate_gradient_one_all_reduce_per_dot_product():
    A, b = spd_problem(32)
    xw, nw = cg(A, b)
    x, norms = cg(put(A, "x", None), put(b, "x"))
    assert isinstance(x, spmd.Array) and x.sharding == MESH.sharding("x")
    np.testing.assert_allclose(x.numpy(), xw, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(norms, nw, rtol=1e-9)
    iters = len(norms) - 1
    c = collectives()
    assert c["all_reduce"] == 1 + 2 * iters, c       # r@r once, then p@Ap and r@r per iteration
    assert c.get("all_gather", 0) <= iters + 1, c     # p for the matvec A @ p, nothing else
    assert set(c) <= {"all_reduce", "all_gather"}


def test_kmeans_with_a_per_sample_python_loop():
    rng = np.random.default_rng(1)
    X = rng.standard_normal((12, 3))
    cw, lw = kmeans(X, X[:3].copy(), steps=2)
    c, labels = kmeans(put(X, "x", None), X[:3].copy(), steps=2)
    assert isinstance(c, spmd.Array)
    np.testing.assert_allclose(c.numpy(), cw, rtol=1e-12)
    np.testing.assert_array_equal(labels, lw)
    assert "all_gather" not in collectives(), collectives()


UNARY = [("neg", lambda x: -x), ("exp", np.tanh), ("abs", np.abs), ("sq", lambda x: x * x),
         ("T", lambda x: x.T), ("rev", lambda x: x[::-1]), ("sum0", lambda x: x.sum(axis=0, keepdims=True)),
         ("mean1", lambda x: np.mean(x, axis=-1, keepdims=True))]
BINARY = [("add", np.add), ("sub", lambda x, y: x - y), ("max", np.maximum),
          ("where", lambda x, y: np.where(x > y, x, y)), ("mul", lambda x, y: x * y)]


@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_random_eager_programs_match_numpy(data):
    n, m = data.draw(st.sampled_from([(4, 4), (5, 3), (6, 8), (3, 3)]))
    mesh = data.draw(st.sampled_from([MESH, MESH2, spmd.Mesh((2,), ("x",))]))
    rng = np.random.default_rng(data.draw(st.integers(0, 1000)))
    x0 = rng.standard_normal((n, m)).round(3)
    axes = [None] + list(mesh.axis_names)
    spec = (data.draw(st.sampled_from(axes)), data.draw(st.sampled_from(axes)))
    if spec[0] is not None and spec[0] == spec[1]:
        spec = (spec[0], None)
    vals_np, vals_sp = [x0], [spmd.device_put(x0, mesh.sharding(*spec))]
    for _ in range(data.draw(st.integers(1, 6))):
        i = data.draw(st.integers(0, len(vals_np) - 1))
        if data.draw(st.booleans()):
            _, f = data.draw(st.sampled_from(UNARY))
            a, b = f(vals_np[i]), f(vals_sp[i])
        else:
            j = data.draw(st.integers(0, len(vals_np) - 1))
            _, f = data.draw(st.sampled_from(BINARY))
            try:
                a = f(vals_np[i], vals_np[j])
            except ValueError:
                continue                          # shapes that do not broadcast
            b = f(vals_sp[i], vals_sp[j])
        assert isinstance(b, spmd.Array) and b.shape == a.shape and b.dtype == a.dtype
        vals_np.append(a)
        vals_sp.append(b)
    for a, b in zip(vals_np, vals_sp):
        np.testing.assert_allclose(b.numpy(), a, rtol=1e-12, atol=1e-12)
    assert eager.STATS["fallbacks"] == 0


@pytest.mark.mpi
@pytest.mark.timeout(240)
def test_eager_programs_under_mpiexec():
    from spmd.transports.mpi.mpi_launch import find_mpiexec
    mpiexec = find_mpiexec()
    if mpiexec is None:
        pytest.skip("no mpiexec")
    e = dict(os.environ, PYTHONPATH=ROOT)
    e.pop("SPMD_BACKEND", None)
    p = subprocess.run([mpiexec, "-n", "4", sys.executable, os.path.join(SCRIPTS, "eager.py")],
                       capture_output=True, text=True, timeout=200, env=e)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.count("EAGER OK") == 4
    # rank 0 alone read the replicated loss: local, so no hang and no timeout
    assert any(ln.startswith("loss ") for ln in p.stdout.splitlines()), p.stdout


def _metadata_calls(ndim):
    axes = st.one_of(st.none(), st.integers(-ndim - 1, ndim),
                     st.lists(st.integers(-ndim - 1, ndim), max_size=3).map(tuple))
    return st.one_of(st.tuples(st.just("size"), axes), st.sampled_from([("size", None), ("shape", None),
                                                                        ("ndim", None), ("len", None)]))


def _metadata(x, name, axis):
    if name == "len":
        return len(x)
    f = getattr(np, name)
    return f(x) if axis is None else f(x, axis)


def _outcome(f):
    try:
        return f()
    except Exception as e:          # numpy's exception is the spec too
        return type(e)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_shape_size_ndim_len_follow_numpy_eagerly_and_traced(data):
    """np.size(x, axis) (an int, negative, a tuple of them in numpy >= 2.4), np.size(x),
    np.shape, np.ndim and len on an spmd.Array and on a traced array: numpy's value, of
    numpy's type, or numpy's exception. (np.size(a, 1) was the total size eagerly and a
    TypeError traced.)"""
    shape = data.draw(st.lists(st.integers(1, 5), min_size=1, max_size=3).map(tuple), "shape")
    name, axis = data.draw(_metadata_calls(len(shape)), "call")
    x = np.zeros((4 * shape[0],) + shape[1:])
    want = _outcome(lambda: _metadata(x, name, axis))
    got = _outcome(lambda: _metadata(put(x, "x", *([None] * (len(shape) - 1))), name, axis))
    seen = []

    def traced(t):
        seen.append(_outcome(lambda: _metadata(t, name, axis)))
        return t
    spmd.jit(traced, backend="numpy")(x)
    for g in (got, seen[0]):
        assert g == want and type(g) is type(want), (name, axis, shape, g, want)


def test_a_library_gathering_a_split_array_warns_once_naming_the_line():
    """numpy's own conversions of a split spmd.Array (np.vectorize, np.c_) gather it: a
    ReshardWarning from the user's line; np.asarray in the user's code, a replicated array,
    and the values numpy gives are as before."""
    mesh = spmd.Mesh((2,), ("x",))
    a = spmd.shard(np.arange(8.0), mesh.sharding("x"))
    r = spmd.shard(np.arange(8.0), mesh.sharding(None))
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        v = np.vectorize(lambda t: t + 1 if t > 2 else t)(a)
        c = np.c_[a, a]
    gathers = [x for x in w if issubclass(x.category, spmd.ReshardWarning)]
    assert gathers and all(x.filename == __file__ for x in gathers), [(x.filename, str(x.message)) for x in w]
    assert "float64[8]" in str(gathers[0].message) and "64 bytes" in str(gathers[0].message)
    np.testing.assert_array_equal(v, np.where(np.arange(8.0) > 2, np.arange(8.0) + 1, np.arange(8.0)))
    np.testing.assert_array_equal(c, np.c_[np.arange(8.0), np.arange(8.0)])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_array_equal(np.asarray(a), np.arange(8.0))
        np.vectorize(lambda t: t)(r)


@settings(max_examples=10, deadline=None)
@given(st.integers(0, 2 ** 31 - 1), st.integers(1, 40), st.integers(0, 12), st.booleans(),
       st.sampled_from(["int64", "int32", "uint8"]))
def test_bincount_counts_sharded_at_the_length_read_from_the_mesh(seed, n, minlength, weighted, dtype):
    # a particle-in-cell deposit: np.bincount(cell, weights=w, minlength=nx)
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 9, n).astype(dtype)
    w = rng.standard_normal(n)
    a, b = put(x, "x"), put(w, "x")
    eager.reset_stats()
    got = np.bincount(a, weights=b if weighted else None, minlength=minlength)
    want = np.bincount(x, weights=w if weighted else None, minlength=minlength)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12, atol=1e-12)
    assert eager.STATS["fallbacks"] == 0 and "all_gather" not in collectives(), collectives()


def test_bincount_of_negative_values_raises_numpys_error():
    with pytest.raises(ValueError, match="negative"):
        np.bincount(put(np.array([1, -1, 2, 3]), "x"))
