"""numpy's x[mask] under spmd.jit with a traced mask (frontend/masked.py): the selection is
kept in place beside its mask, so elementwise math on it, reductions over it and writing it
back through the same mask give numpy's results on any mesh; uses that need numpy's
compacted array raise, naming the line and the alternatives. Also spmd.numpy's padded
nonzero, the alternative the errors name."""
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import spmd
import spmd.numpy as snp
from spmd.errors import TraceError

# keys with one mask "M" (over the dims it covers) and basic entries around it
KEYS = {
    (6,): [("M",)],
    (5, 4): [("M",), ("M1",), ("M1", slice(1, None)), ("M1", 2), (slice(None, None, -1), "M1b"), (1, "M1b")],
    (3, 4, 5): [("M",), ("M1",), ("M2",), ("M2", slice(None, 3)), (slice(1, 3), "M1b"), ("M1", 0, slice(1, 4))],
}


def mask_for(rng, shape, key):
    """The concrete mask for placeholder M (all dims), M1 / M2 (the leading 1 / 2), M1b (the 2nd dim)."""
    k = key[[i for i, e in enumerate(key) if isinstance(e, str)][0]]
    dims = {"M": shape, "M1": shape[:1], "M2": shape[:2], "M1b": shape[1:2]}[k]
    return rng.random(dims) < rng.choice([0.0, 0.3, 0.7, 1.0])


def fill(key, m):
    return tuple(m if isinstance(e, str) else e for e in key)


def elementwise(y, x, which):
    return [lambda: y * 2.5 - 1, lambda: y + y, lambda: np.abs(y) ** 1.5, lambda: np.where(y > 0, y, -y),
            lambda: np.sqrt(np.abs(y)) + y.astype(np.float32), lambda: -(y ** 2), lambda: np.maximum(y, 0.25),
            lambda: (y > 0.3) & (y < 0.9)][which]()


def reductions(z):
    return (z.sum(), np.mean(z), z.max(initial=-5.0) if z.dtype != bool else z.any(), np.min(z, initial=5.0),
            np.any(z > 0.5), np.all(z > -3), z.size, np.count_nonzero(z > 0.1), z.var(), np.std(z))


def program(key, which, write):
    def f(x, m):
        k = fill(key, m)
        y = x[k]
        z = elementwise(y, x, which)
        out = reductions(z) if z.dtype != bool else (np.sum(z), np.any(z), np.all(z), z.size)
        if write == "set":
            x[k] = z
        elif write == "iadd":
            x[k] += 1.5
        elif write == "same_twice":
            x[fill(key, m)] = x[fill(key, m)] * 3
        return out + (x,)
    return f


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2 ** 20), shape=st.sampled_from(sorted(KEYS)), which=st.integers(0, 7),
       write=st.sampled_from(["set", "iadd", "same_twice", None]), mesh=st.sampled_from([None, (2,), (2, 2)]))
def test_masked_reads_give_numpys_results(seed, shape, which, write, mesh):
    rng = np.random.default_rng(seed)
    key = KEYS[shape][int(rng.integers(len(KEYS[shape])))]
    x = rng.standard_normal(shape)
    m = mask_for(rng, shape, key)
    f = program(key, which, write if which != 7 else None)
    want = f(x.copy(), m)
    if mesh is None:
        jf = spmd.jit(f, backend="numpy")
    else:
        msh = spmd.Mesh(mesh, ("a", "b")[:len(mesh)])
        spec = tuple(msh.axis_names[d] if d < len(mesh) and d < len(shape) else None for d in range(len(shape)))
        jf = spmd.jit(f, in_shardings=(msh.sharding(*spec), msh.sharding(*spec[:m.ndim])), backend="numpy")
    with np.errstate(all="ignore"):
        got = jf(x.copy(), m)
    for i, (g, w) in enumerate(zip(got, want)):
        g = np.asarray(g.numpy() if hasattr(g, "numpy") else g)
        assert g.shape == np.shape(w) and g.dtype == np.asarray(w).dtype, (i, g.shape, np.shape(w), g.dtype)
        # sums and means add in another order than numpy's pairwise sum of the compacted array
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12, equal_nan=True, err_msg=f"result {i} of {key}")


def test_the_n_body_line_and_reductions_along_the_selected_dim():
    def f(x):
        d = x[:, None, :] - x[None, :, :]
        r3 = np.sum(d ** 2, axis=-1)
        r3[r3 > 0] = r3[r3 > 0] ** -1.5              # each side computes its own mask
        rows = x[x[:, 0] > 0]
        return r3, rows.sum(axis=0), rows.max(axis=0, initial=-np.inf), np.mean(rows, axis=0, keepdims=True)
    x = np.random.default_rng(0).standard_normal((6, 3))
    x[2] = x[4]                                    # a zero distance off the diagonal
    want = f(x)
    msh = spmd.Mesh((2,), ("a",))
    got = spmd.jit(f, in_shardings=(msh.sharding("a", None),), backend="numpy")(x)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.numpy(), w, rtol=1e-13)
        assert g.shape == w.shape


@pytest.mark.parametrize("use,what", [
    (lambda x: x[x > 0], "returning it"), (lambda x: x[x > 0].reshape(-1, 1), "reshape"),
    (lambda x: x[x > 0] @ x[x > 0], "matmul"), (lambda x: x[x > 0][1:], "indexing it"),
    (lambda x: np.sort(x[x > 0]), "np.sort"), (lambda x: np.cumsum(x[x > 0]), "np.cumsum"),
    (lambda x: x[x > 0].shape[0], "shape"), (lambda x: np.argmax(x[x > 0]), "np.argmax"),
    (lambda x: x + x[x > 0], "add"), (lambda x: x[x[:, 0] > 0].sum(axis=1), "axis 1"),
])
def test_uses_that_need_the_compacted_array_raise_naming_the_line(use, what):
    with pytest.raises((TraceError, NotImplementedError), match=r"test_masked\.py:\d+") as e:
        spmd.jit(use, backend="numpy", fallback=False)(np.ones((4, 3)))
    assert "np.where" in str(e.value) or "selected dim" in str(e.value), str(e.value)


def _sum_of_powers(z):
    """An array of numpy's compacted shape made in the step (fractal tutorials' sin_sum)."""
    total = np.zeros(z.size, dtype=z.dtype)
    for i in range(1, 3):
        total += np.power(np.sin(z), i)
    return total


def _write_compacted_back(x):
    m = x > 0
    x[m] = x[m] - _sum_of_powers(x[m]) / 4
    return x


@pytest.mark.parametrize("use", [
    lambda x: _sum_of_powers(x[x > 0]), _write_compacted_back, lambda x: x[x > 0] * np.arange(np.count_nonzero(x > 0)),
    lambda x: x[x > 0], lambda x: x[x > 0].reshape(-1, 1), lambda x: x[x > 0] @ x[x > 0],
    lambda x: x[x > 0][0], lambda x: np.sort(x[x > 0]), lambda x: np.cumsum(x[x > 0]),
    lambda x: x[x > 0].shape[0] * x, lambda x: np.argmax(x[x > 0]), lambda x: x[x[:, 0] > 0].sum(axis=1),
    lambda x: x[1:, x[0] > 0] * 2, lambda x: x[x[:, 1] > 0, 1:],
])
def test_uses_that_need_the_compacted_array_take_its_length_from_the_data(use):
    x = np.random.default_rng(3).standard_normal((4, 3))
    msh = spmd.Mesh((2,), ("a",))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", spmd.errors.FallbackWarning)
        got = spmd.jit(use, in_shardings=(msh.sharding("a", None),))(x)
    want = use(x)
    got = np.asarray(got)
    assert got.shape == np.shape(want) and got.dtype == np.asarray(want).dtype
    np.testing.assert_allclose(got, want, rtol=1e-13)


def test_selections_through_different_masks_do_not_combine():
    def f(x):
        x[x > 0] = x[x < 1] + 1
        return x
    with pytest.raises(TraceError, match=r"different masks.*test_masked\.py:\d+"):
        spmd.jit(f, backend="numpy")(np.ones(4))

    def g(x):
        y = x[x > 0]
        x[0] = 5.0                                   # the mask computed again differs: x changed
        x[x > 0] = y
        return x
    with pytest.raises(TraceError, match="different masks"):
        spmd.jit(g, backend="numpy")(np.ones(4))


def test_a_selection_is_numpys_copy_and_in_place_ops_change_it():
    def f(x):
        m = x > 0
        y = x[m]
        alias = y
        y *= 2                                       # numpy: y (and alias) change in place
        x[0] = 100.0                                 # not the copy
        x[m] = alias
        return x, alias.sum()
    x = np.array([1.0, -2.0, 3.0, 4.0])
    for g, w in zip(spmd.jit(f, backend="numpy")(x.copy()), f(x.copy())):
        np.testing.assert_array_equal(np.asarray(g), w)


@pytest.mark.parametrize("size", [0, 2, 4, 7])
def test_padded_nonzero(size):
    x = np.array([[0, 3, 0], [1, 0, 2]])
    f = lambda x: (snp.nonzero(x, size=size), snp.flatnonzero(x, size=size, fill_value=-1),  # noqa: E731
                   snp.argwhere(x, size=size, fill_value=9))
    msh = spmd.Mesh((2,), ("a",))
    got = spmd.jit(f, in_shardings=(msh.sharding("a", None),), backend="numpy")(x)
    flat = np.flatnonzero(x)
    pad = lambda v, fv: np.concatenate([v[:size], np.full(max(size - v.size, 0), fv)])  # noqa: E731
    want = (tuple(pad(i, 0) for i in np.nonzero(x)), pad(flat, -1),
            np.stack([pad(i, 9) for i in np.nonzero(x)], -1))
    for g, w in zip(got[0], want[0]):
        np.testing.assert_array_equal(g.numpy(), w)
    np.testing.assert_array_equal(got[1].numpy(), want[1])
    np.testing.assert_array_equal(got[2].numpy(), want[2].reshape(size, 2))
    np.testing.assert_array_equal(f(x)[1], want[1])             # outside of jit: numpy's, padded


def test_a_mask_with_none_in_the_key_reads_and_writes_as_numpy():
    """x[mask, None], x[None, mask], x[:, None, mask]: None adds a unit dim and separates
    the mask from nothing (numpy's shape); reductions and writes through such keys."""
    x = np.random.default_rng(3).standard_normal((6, 4))

    def f(x):
        m, c = x[:, 0] > 0, x[0] > 0
        y = x.copy()
        y[m, None] = 5.0
        y[m, None, 1:] += 1
        y[None, m] *= 3
        return ((x[m, None] * 2).sum(axis=0), (x[:, None, c] ** 2).sum(axis=(0, 1)),
                x[1, None, c].max(), x[m, None, 1:3].sum(axis=0), y)

    want = f(x)
    got = spmd.jit(f, backend="numpy")(x)
    for g, w in zip(got, want):
        g = np.asarray(g)
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-13)


def test_selections_of_one_mask_broadcast_as_numpy():
    """A[m] / d[m, None] (shapes (N, n) and (N, 1)) pairs rows as numpy does, in either
    order, read and written back through the mask; (N,) with (N, 1) would be (N, N) in
    numpy and still raises."""
    rng = np.random.default_rng(4)
    A, d = rng.standard_normal((6, 4)), rng.standard_normal(6)

    def f(A, d):
        m = d > 0
        M = np.zeros_like(A)
        M[m] = A[m] / d[m, None]
        return M, (d[m, None] * A[m]).sum(axis=0), np.maximum(A[m], d[m, None]).sum()

    want = f(A, d)
    got = spmd.jit(f, backend="numpy")(A, d)
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), w, rtol=1e-13)
    with pytest.raises(spmd.errors.TraceError, match="two boolean selections"):
        spmd.jit(lambda d: (d[d > 0] * d[d > 0, None]).sum(), backend="numpy", fallback=False)(d)
