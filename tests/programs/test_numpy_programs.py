"""Programs written the way numpy users write them -- in-place updates, views, buffers
filled in loops, fancy indexing, hand-written backprop -- each run under spmd.jit on 1,
2, 4 and 2x2 devices (even and uneven shapes) and compared with plain numpy, including
the arguments the program writes into (numpy's caller sees those writes; so must ours).
"""
import numpy as np
import pytest

import spmd
import spmd.numpy as snp

MESHES = {
    "1": None,
    "2": ((2,), ("a",)),
    "4": ((4,), ("a",)),
    "2x2": ((2, 2), ("a", "b")),
}


def _sharding(mesh, x):
    if mesh is None or not isinstance(x, np.ndarray) or x.ndim == 0:
        return None
    names = mesh.axis_names
    spec = [None] * x.ndim
    for d, a in enumerate(names[:x.ndim]):
        spec[d] = a
    return mesh.sharding(*spec)


def check(fn, *args, mesh="2x2", backend="numpy", shard=(0,), static=()):
    """fn(*args) under jit == under numpy: its results and every array argument after."""
    want_args = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    want = fn(*want_args)
    got_args = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    m = MESHES[mesh]
    m = spmd.Mesh(*m) if m else None
    in_sh = tuple(_sharding(m, a) if i in shard and i not in static else None
                  for i, a in enumerate(args) if i not in static)
    f = spmd.jit(fn, in_shardings=in_sh if m else None, mesh=m, backend=backend, static_argnums=static)
    got = f(*got_args)
    want_l = want if isinstance(want, tuple) else (want,)
    got_l = got if isinstance(got, tuple) else (got,)
    assert len(want_l) == len(got_l)
    for w, g in zip(want_l, got_l):
        g = np.asarray(g.numpy() if hasattr(g, "numpy") else g)
        assert g.shape == np.shape(w) and g.dtype == np.asarray(w).dtype, (g.shape, g.dtype, np.shape(w))
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12, equal_nan=True)
    for w, g in zip(want_args, got_args):
        if isinstance(w, np.ndarray):
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12, equal_nan=True,
                                       err_msg="the argument's in-place update differs from numpy's")
    return f


# -- the programs --------------------------------------------------------------------------
def jacobi(u, steps):
    for _ in range(steps):
        u[1:-1, 1:-1] = 0.25 * (u[2:, 1:-1] + u[:-2, 1:-1] + u[1:-1, 2:] + u[1:-1, :-2])
    return u.sum()


def life(Z, steps):
    Z = Z.copy()
    for _ in range(steps):
        N = (Z[0:-2, 0:-2] + Z[0:-2, 1:-1] + Z[0:-2, 2:] + Z[1:-1, 0:-2] + Z[1:-1, 2:] +
             Z[2:, 0:-2] + Z[2:, 1:-1] + Z[2:, 2:])
        birth = (N == 3) & (Z[1:-1, 1:-1] == 0)
        survive = ((N == 2) | (N == 3)) & (Z[1:-1, 1:-1] == 1)
        Z[...] = 0
        Z[1:-1, 1:-1][birth | survive] = 1
    return Z


def views(U, y):
    u = U[1:-1, 1:-1]
    u += 0.5 * U[:-2, 1:-1]          # reads through the base after each write
    r = y.ravel()
    r *= 2
    t = y.T
    t += 1
    t[0, 1:] -= y[0, 0]
    c = y.T.ravel()                  # a copy (not contiguous): writes to it stay local
    c[:] = -1
    d = y.astype(y.dtype)            # astype copies
    d += 100
    e = y[1]                         # a row view
    e[::2] = 7.0
    return U, y, c, d


def gray_scott(U, V, steps):
    u, v = U[1:-1, 1:-1], V[1:-1, 1:-1]
    for _ in range(steps):
        Lu = U[:-2, 1:-1] + U[2:, 1:-1] + U[1:-1, :-2] + U[1:-1, 2:] - 4 * u
        Lv = V[:-2, 1:-1] + V[2:, 1:-1] + V[1:-1, :-2] + V[1:-1, 2:] - 4 * v
        uvv = u * v * v
        u += 0.1 * (0.16 * Lu - uvv + 0.06 * (1 - u))
        v += 0.1 * (0.08 * Lv + uvv - 0.122 * v)
    return U, V


def softmax_backprop(x, W, y):
    n = x.shape[0]
    s = x @ W
    s -= s.max(axis=1, keepdims=True)
    p = np.exp(s)
    p /= p.sum(axis=1, keepdims=True)
    loss = -np.log(p[range(n), y]).mean()
    dy = p.copy()
    dy[range(n), y] -= 1
    dy /= n
    dW = np.zeros_like(W)
    for i in range(W.shape[0]):
        dW[i] += x[:, i] @ dy
    return loss, dW


def rnn_backprop(xs, Wxh, Whh):
    T, H = xs.shape[0], Whh.shape[0]
    hs = np.zeros_like(xs, shape=(T + 1, H))
    for t in range(T):
        hs[t + 1] = np.tanh(xs[t] @ Wxh + hs[t] @ Whh)
    dWhh = np.zeros_like(Whh)
    dh_next = np.zeros_like(hs[0])
    for t in reversed(range(T)):
        dh = 1.0 + dh_next
        draw = (1 - hs[t + 1] * hs[t + 1]) * dh
        dWhh += np.outer(hs[t], draw)
        dh_next = Whh @ draw
    np.clip(dWhh, -5, 5, out=dWhh)
    return hs, dWhh


def buffers(x):
    n, d = x.shape
    out = snp.zeros((n, 2))
    for i in range(n):
        out[i, 0] = x[i].sum()
        out[i, 1] = x[i].max()
    acc = snp.zeros(d)
    for i in range(n):
        acc += x[i]
    e = snp.eye(d)
    e[:, 0] = snp.arange(d)
    return out, acc, e


def center(x):
    x -= x.mean(axis=0)
    x /= x.std(axis=0) + 1.0
    return None if False else x.sum()


def indexing(x, idx):
    a = x[range(0, x.shape[0], 2)]
    b = x[[0, -1], [1, 2]]                   # two index arrays side by side
    c = x[idx[:, None], [0, 2]]              # broadcast against a traced index array
    d = x[np.ix_([0, 2], [1, 2])]
    e = np.take_along_axis(x, np.argmax(x, axis=1)[:, None], axis=1)
    x2 = x.copy()
    x2[x2 > 0.5] = 0                         # traced mask write: a select
    x2[idx, 1] = -1.0
    x2[:, [0, 2]] *= 10
    return a, b, c, d, e, x2


def separated(x3, idx):
    return x3[idx, :, [1, 0, 1]], x3[:, idx[:2], 1], x3[1, :, idx]


def writes(x, idx):
    y = x.copy()
    np.add.at(y, [0, 0, 2], 1.0)             # repeated indices accumulate
    np.subtract.at(y, (idx, 0), 0.5)
    np.copyto(y[:, 0], -3.0)
    np.copyto(y, 0.0, where=y > 0.9)
    np.multiply(y, 2.0, out=y)
    z = np.zeros_like(x)
    np.put(z, [0, 5, 7], [1.0, 2.0, 3.0])
    np.put_along_axis(z, np.zeros((x.shape[0], 1), dtype=np.int64), 9.0, axis=1)
    w = np.zeros_like(x[:3, :3])
    np.fill_diagonal(w, 4.0)
    w[1].fill(-2.0)
    v = np.fmax(x, np.where(x > 0.5, np.nan, 0.3))
    return y, z, w, v, np.fmin(np.where(x > 0.5, np.nan, x), 0.2)


# -- the runs --------------------------------------------------------------------------------
SHAPES = {"even": (8, 8), "uneven": (9, 7)}


@pytest.mark.parametrize("mesh", list(MESHES))
@pytest.mark.parametrize("shape", list(SHAPES))
def test_jacobi_in_place(mesh, shape):
    u = np.random.default_rng(0).random(SHAPES[shape])
    check(jacobi, u, 4, mesh=mesh, static=(1,))


def test_jacobi_llvm_and_halo_only():
    u = np.random.default_rng(1).random((12, 10))
    f = check(jacobi, u, 3, backend="llvm", static=(1,))
    rep = f.lower(u, 3).report()
    halos = [c for c in rep["collectives"] if c["op"] == "collective_permute"]
    others = [c for c in rep["collectives"] if c["op"] != "collective_permute"]
    # the final sum's all-reduce of a scalar; everything else is halo exchange
    assert halos and all(c["op"] == "all_reduce" and c["in_shape"] == () for c in others), rep
    # every exchange is one halo row or column of a shard, never the array
    assert max(c["bytes"] for c in halos) <= 8 * max(u.shape)


@pytest.mark.parametrize("mesh", list(MESHES))
def test_game_of_life(mesh):
    Z = (np.random.default_rng(2).random((9, 10)) > 0.6).astype(np.int64)
    check(life, Z, 3, mesh=mesh, static=(1,))


@pytest.mark.parametrize("mesh", list(MESHES))
@pytest.mark.parametrize("shape", list(SHAPES))
def test_writes_through_views(mesh, shape):
    rng = np.random.default_rng(3)
    check(views, rng.random(SHAPES[shape]), rng.random((4, 6)), mesh=mesh, shard=(0, 1))


@pytest.mark.parametrize("mesh", ["1", "2x2"])
def test_gray_scott_views(mesh):
    rng = np.random.default_rng(4)
    check(gray_scott, rng.random((10, 9)), rng.random((10, 9)), 3, mesh=mesh, shard=(0, 1), static=(2,))


@pytest.mark.parametrize("mesh", list(MESHES))
def test_softmax_backprop(mesh):
    rng = np.random.default_rng(5)
    x, W = rng.normal(size=(10, 5)), rng.normal(size=(5, 3))
    y = rng.integers(0, 3, size=10)
    check(softmax_backprop, x, W, y, mesh=mesh)


@pytest.mark.parametrize("mesh", ["1", "2x2"])
def test_rnn_backprop_buffers(mesh, compiler):
    rng = np.random.default_rng(6)
    check(rnn_backprop, rng.normal(size=(5, 4)), rng.normal(size=(4, 3)) * 0.5, rng.normal(size=(3, 3)) * 0.5,
          mesh=mesh, backend=compiler)


@pytest.mark.parametrize("mesh", list(MESHES))
def test_preallocated_buffers(mesh):
    check(buffers, np.random.default_rng(7).random((6, 5)), mesh=mesh)


@pytest.mark.parametrize("mesh", list(MESHES))
@pytest.mark.parametrize("shape", list(SHAPES))
def test_argument_mutated_in_place(mesh, shape):
    check(center, np.random.default_rng(8).random(SHAPES[shape]), mesh=mesh)


def test_spmd_array_argument_takes_the_write():
    mesh = spmd.Mesh((2, 2), ("a", "b"))
    x = np.random.default_rng(9).random((5, 6))
    a = spmd.device_put(x, mesh.sharding("a", "b"))
    spmd.jit(center)(a)
    want = x.copy()
    center(want)
    np.testing.assert_allclose(a.numpy(), want)


@pytest.mark.parametrize("mesh", list(MESHES))
def test_fancy_indexing(mesh):
    rng = np.random.default_rng(10)
    check(indexing, rng.random((7, 4)), np.array([3, 0, -1, 5]), mesh=mesh, shard=(0, 1))


@pytest.mark.parametrize("mesh", ["1", "2x2"])
def test_separated_index_arrays_go_first(mesh):
    rng = np.random.default_rng(11)
    check(separated, rng.random((3, 4, 5)), np.array([2, 0, 1]), mesh=mesh, shard=(0, 1))


@pytest.mark.parametrize("mesh", list(MESHES))
def test_write_functions(mesh, compiler):
    rng = np.random.default_rng(12)
    check(writes, rng.random((5, 4)), np.array([1, 3, 1]), mesh=mesh, shard=(0, 1), backend=compiler)


# -- what numpy refuses, or spmd cannot do: clear errors --------------------------------------
def test_mask_read_names_the_alternative():
    with pytest.raises(spmd.TraceError, match=r"np\.where\(mask, x, fill\).*spmd\.numpy\.nonzero"):
        spmd.jit(lambda x: x[x > 0].reshape(-1, 1), fallback=False)(np.ones(3))


def test_mask_read_compacted_by_a_graph_break():
    x = np.array([1.0, -2.0, 3.0, 0.5])
    with pytest.warns(spmd.errors.FallbackWarning, match="graph break"):
        got = spmd.jit(lambda x: x[x > 0].reshape(-1, 1))(x)
    np.testing.assert_array_equal(np.asarray(got), x[x > 0].reshape(-1, 1))


def test_in_place_cast_follows_same_kind():
    def f(x):
        x += 1.5
        return x
    with pytest.raises(TypeError, match="same_kind"):
        spmd.jit(f)(np.arange(3))
    with pytest.raises(TypeError, match="same_kind"):
        np.add(np.arange(3), 1.5, out=np.arange(3))      # numpy agrees


def test_scalars_rebind_arrays_alias():
    def f(x):
        s = x.sum()                  # a numpy scalar: += makes a new one
        t = s
        s += 1
        v = x[0]                     # a view: += writes x
        v += 1
        return s, t, x
    check(f, np.arange(4.0), mesh="1")


def test_numpy_buffer_takes_a_traced_row():
    def f(x):
        buf = np.zeros((2, 3))
        buf[0] = x
        return buf
    np.testing.assert_array_equal(np.asarray(spmd.jit(f, fallback=False)(np.ones(3))), f(np.ones(3)))


def test_item_and_trace():
    with pytest.raises(spmd.TraceError):
        spmd.jit(lambda x: x.item(1), fallback=False)(np.ones(3))
    x = np.arange(12.0).reshape(3, 4)
    np.testing.assert_allclose(spmd.jit(lambda x: x.trace(1))(x), x.trace(1))


def test_aliased_written_arguments_are_refused():
    def f(a, b):
        a += 1
        return b.sum()
    x = np.ones(4)
    with pytest.raises(spmd.SpmdError, match="shares memory"):
        spmd.jit(f)(x, x[1:])
    y = np.ones(4)
    assert spmd.jit(f)(y, np.ones(4)) == 4.0 and (y == 2).all()


@pytest.mark.parametrize("mesh", ["1", "2x2"])
def test_masked_in_place_update(mesh):
    def f(x, y):
        m = x > 0.5
        x[m] += 1.0
        x[m] *= y[m]
        y[y < 0.2] -= 10
        return x, y
    rng = np.random.default_rng(13)
    check(f, rng.random((5, 6)), rng.random((5, 6)), mesh=mesh, shard=(0, 1))


def test_masked_selection_takes_math_and_reductions_not_its_compacted_shape():
    x = np.array([1.0, -2.0, 3.0])
    got = spmd.jit(lambda x: ((x[x > 0] * 2).sum(), np.sum(x[x > 0])))(x)
    assert [float(g) for g in got] == [8.0, 4.0]
    with pytest.raises(spmd.TraceError, match="np.where"):
        spmd.jit(lambda x: x[x > 0] * 2, fallback=False)(x)   # returning it
