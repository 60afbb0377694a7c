"""spmd.random: counter-based keys give the same numbers eagerly, under jit, on any mesh
and backend; np.random inside traced code is an error naming the line, except after
np.random.seed(constant) in the same function (then numpy's numbers, as constants)."""
import warnings

import numpy as np
import pytest

import spmd
import spmd.random as R


def test_threefry_known_answers():
    # Random123's known-answer vectors for Threefry-2x32, 20 rounds
    cases = [((0, 0), (0, 0), (0x6B200159, 0x99BA4EFE)),
             ((0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF), (0x1CB996FC, 0xBB002BE7)),
             ((0x13198A2E, 0x03707344), (0x243F6A88, 0x85A308D3), (0xC4923A9C, 0x483DF7A0))]
    for (k0, k1), (c0, c1), want in cases:
        got = R.threefry2x32(np.int64(k0), np.int64(k1), np.int64(c0), np.int64(c1))
        assert tuple(int(v) for v in got) == want


def _draws(k):
    return (R.normal(k, (7, 9)), R.uniform(k, (5, 6), dtype="float32"), R.integers(k, 3, 11, (9, 4)),
            R.bernoulli(k, 0.3, (6, 5)), R.split(k, 3), R.permutation(k, 7), R.fold_in(k, 5))


@pytest.mark.parametrize("mesh,compiler", [(None, "llvm"), (None, "numpy"), ((2,), "numpy"), ((4,), "numpy"),
                                           ((2, 2), "numpy"), pytest.param((2, 2), "llvm", marks=pytest.mark.slow)])
def test_same_numbers_on_any_mesh_and_backend(mesh, compiler):
    k = R.key(1234)
    want = _draws(k)
    if mesh is None:
        f = spmd.jit(_draws, backend=compiler)
    else:
        m = spmd.Mesh(mesh, ("a", "b")[:len(mesh)])
        outs = tuple(m.sharding(*(m.axis_names + (None,) * 2)[:w.ndim]) if w.ndim >= len(mesh) else None
                     for w in want)
        f = spmd.jit(_draws, out_shardings=outs, backend=compiler)
    got = f(k)
    for g, w in zip(got, want):
        g = np.asarray(g.numpy() if hasattr(g, "numpy") else g)
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g, w)
    if mesh is not None:
        # each device makes its own part from iotas: no communication for the samples
        rep = f.lower(k).report()
        assert not [c for c in rep["collectives"] if np.prod(c["in_shape"]) > 49], rep["collectives"]


def test_normal_has_the_same_bits_eagerly_and_compiled_at_scale():
    # numpy's SIMD log and cos and a kernel's libm differ in the last bit on about one
    # value in 500: Box-Muller is written in ops IEEE rounds exactly, so none may differ
    k = R.key(99)
    want = R.normal(k, (400, 500))
    got = spmd.jit(lambda k: R.normal(k, (400, 500)), backend="llvm")(k)
    np.testing.assert_array_equal(np.asarray(got), want)


def test_normal_is_box_muller_to_a_few_ulps():
    k = R.key(5)
    x0, x1 = R.bits(k, (300_000,), salt=0x4E4F524D)
    u1 = (x0 + 1).astype(np.float64) * 2.0 ** -32
    textbook = np.sqrt(-2 * np.log(u1)) * np.cos(x1.astype(np.float64) * (2 * np.pi * 2.0 ** -32))
    z = R.normal(k, (300_000,))
    assert np.abs(z - textbook).max() < 1e-14 * np.abs(textbook).max()
    # the largest draw, from the smallest u1, and the quadrants of the angle
    assert np.abs(z).max() <= np.sqrt(-2 * np.log(2.0 ** -32))
    assert (z > 0).mean() == pytest.approx(0.5, abs=0.005)


def test_distributions():
    k = R.key(7)
    z = R.normal(k, (200_000,))
    assert abs(z.mean()) < 0.01 and abs(z.std() - 1) < 0.01
    u = R.uniform(k, (200_000,))
    assert 0 <= u.min() and u.max() < 1 and abs(u.mean() - 0.5) < 0.005
    i = R.integers(k, 0, 10, (100_000,))
    assert set(np.unique(i)) == set(range(10))
    assert abs(R.bernoulli(k, 0.25, (100_000,)).mean() - 0.25) < 0.01
    assert sorted(R.permutation(k, 50).tolist()) == list(range(50))
    a, b = R.split(k)
    assert not np.array_equal(R.normal(a, (4,)), R.normal(b, (4,)))
    np.testing.assert_array_equal(R.normal(a, (4,)), R.normal(a, (4,)))        # keys are values


def test_dropout_changes_every_step():
    def step(k, x):
        k, sub = R.split(k)
        return k, np.where(R.bernoulli(sub, 0.5, x.shape), x, 0.0)
    f = spmd.jit(step, backend="numpy")
    k, x = R.key(0), np.ones(64)
    k, a = f(k, x)
    k, b = f(k, x)
    assert not np.array_equal(a, b)


def test_np_random_in_jit_names_the_line():
    def f(x):
        return x * np.random.rand(*x.shape)        # MARK
    with pytest.raises(spmd.TraceError, match=r"np\.random\.rand at test_random\.py:\d+.*spmd\.random"):
        spmd.jit(f)(np.ones(3))
    with pytest.raises(spmd.TraceError, match="default_rng at .* without a seed"):
        spmd.jit(lambda x: x + np.random.default_rng().normal(size=3))(np.ones(3))
    assert np.random.default_rng(0).random(2).shape == (2,)     # outside jit, numpy as ever


def seeded(x):
    np.random.seed(7)
    a = np.random.rand(*x.shape)
    b = np.random.normal(size=x.shape)
    return x * a + b + np.random.default_rng(3).random(x.shape)


@pytest.mark.parametrize("mesh", [None, (2,)])
def test_np_random_after_a_seed_in_the_function_gives_numpys_numbers(mesh, compiler):
    """np.random.seed(constant) first in the function: numpy gives the same numbers on
    every call, so the draws are constants of the program, numpy's; numpy's global state
    after each call is the one the function's draws leave, as in numpy."""
    x = np.arange(6.0).reshape(2, 3)
    want = seeded(x)
    after = np.random.get_state()[1].copy()
    m = spmd.Mesh(mesh, ("x",)) if mesh else None
    f = spmd.jit(seeded, in_shardings=(m.sharding("x", None),) if m else None, backend=compiler)
    for _ in range(3):
        np.random.seed(123)                       # whatever came before
        got = f(x)
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-15)
        assert np.array_equal(np.random.get_state()[1], after)


class _Model:
    def fit(self, X, y, steps):
        self.w = np.random.uniform(-0.5, 0.5, (X.shape[1],))        # numpy's draw ...
        self.b = np.random.default_rng(3).normal(size=2)
        for _ in range(steps):
            g = X.T @ (X @ self.w - y) / len(y)
            self.w -= 0.1 * g                                         # ... then written traced values
            self.b[0] += g.sum()
            self.b[1:] = np.maximum(self.b[1:], g.max())
        return self.w, self.b


def fit_seeded(X, y):
    np.random.seed(0)
    return _Model().fit(X, y, 3)


@pytest.mark.parametrize("mesh", [None, (2,)])
def test_seeded_draws_are_arrays_the_function_made_and_take_traced_writes(mesh, compiler):
    # model code draws its initial weights with numpy, then updates them in place
    rng = np.random.default_rng(1)
    X, y = rng.standard_normal((8, 3)), rng.standard_normal(8)
    m = spmd.Mesh(mesh, ("x",)) if mesh else None
    f = spmd.jit(fit_seeded, in_shardings=(m.sharding("x", None), m.sharding("x")) if m else None, backend=compiler)
    for got, want in zip(f(X, y), fit_seeded(X, y)):
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12)


def shuffled(x):
    np.random.seed(1)
    a = x * 2
    np.random.shuffle(a)                          # a traced array: shuffled in place
    b = np.random.permutation(x[:, 0])
    g = np.random.default_rng(5)
    c = x + 1
    g.shuffle(c, axis=1)
    z = np.zeros(x.shape[0])
    z[:] = x[:, 1]                                # a numpy buffer holding traced values
    np.random.shuffle(z)
    return a, b, c, g.permutation(x, axis=1), g.permutation(x), z, np.random.rand(2), g.random(2)


@pytest.mark.parametrize("mesh", [None, (2,)])
@pytest.mark.parametrize("rows", [1, 2, 8, 300])
def test_shuffle_and_permutation_of_traced_arrays_give_numpys_order(mesh, rows, compiler):
    """numpy shuffles what is not an ndarray one swap at a time: on a traced array that was
    one traced write per row; spmd takes the rows at the permutation numpy draws for the
    same state, which is numpy's order and leaves numpy's state."""
    x = np.arange(rows * 4.0).reshape(rows, 4) * 3 - 5
    want = shuffled(x.copy())
    m = spmd.Mesh(mesh, ("x",)) if mesh and rows % 2 == 0 else None
    f = spmd.jit(shuffled, in_shardings=(m.sharding("x", None),) if m else None, backend=compiler)
    got = f(x.copy())
    for g, w in zip(got, want):
        assert np.array_equal(np.asarray(g), w)
    assert len(f.lower(x).graph.ops) < 200        # not a write per swap


def test_shuffle_and_permutation_of_spmd_arrays_eagerly():
    """numpy shuffled an spmd.Array one eager swap per row, with a warning about duplicates
    (3 s for 1,000 rows); it is taken at numpy's permutation, numpy's order and state."""
    x = np.arange(600.0).reshape(300, 2)
    m = spmd.Mesh((2,), ("x",))
    a = spmd.device_put(x.copy(), m.sharding("x", None))
    np.random.seed(4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.random.shuffle(a)
        p = np.random.permutation(a[:, 0])
    after = np.random.rand()
    np.random.seed(4)
    y = x.copy()
    np.random.shuffle(y)
    assert np.array_equal(a.numpy(), y)
    assert np.array_equal(p.numpy(), np.random.permutation(y[:, 0]))
    assert np.random.rand() == after


def test_np_random_draws_need_the_seed_in_the_same_function_first():
    def before(x):
        a = np.random.rand(3)                     # MARK
        np.random.seed(0)
        return x + a

    def entropy(x):
        np.random.seed()
        return x + np.random.rand(3)

    def in_a_loop_body(x):
        np.random.seed(0)
        return spmd.fori_loop(0, 3, lambda i, c: c + np.random.rand(3), x)

    with pytest.raises(spmd.TraceError, match=r"np\.random\.rand at test_random\.py:\d+.*np\.random\.seed"):
        spmd.jit(before)(np.ones(3))
    with pytest.raises(spmd.TraceError, match="seed at .* without a seed"):
        spmd.jit(entropy)(np.ones(3))
    with pytest.raises(spmd.TraceError, match="np.random.rand"):       # runs 3 times: not one constant
        spmd.jit(in_a_loop_body)(np.ones(3))
