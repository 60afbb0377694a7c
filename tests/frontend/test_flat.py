"""x.flat: numpy's flat iterator (C order whatever the layout; reads are copies; writes
land in x, values repeated or cut to the positions written), on traced arrays, on numpy
arrays the function made, and on spmd.Arrays eagerly, against numpy."""
import warnings

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import spmd

MESH = spmd.Mesh((2,), ("d",))


def program(x, k):
    y = x * 1.0
    r1 = y.flat[5]
    r2 = y.flat[2:9:3]                 # a copy: the writes below do not reach it
    r3 = y.flat[[1, 7, 7]]
    r4 = y.flat[k]
    r5 = y.flat[(y > 5).ravel()].sum()
    r6 = y.flat[np.array([[1, 2], [3, 4]])]
    y.flat[::5] = -1.0
    y.flat[[0, 1, 2]] = [7.0, 8.0]     # repeated over the positions
    y.flat[k] = 100.0
    t = x.T * 1.0                      # C order of the transpose, not memory order
    t.flat[1] = 55.0
    z = np.zeros((3, 4))               # numpy's array: a traced value written through flat
    z.flat[::5] = x[0, 0]
    z.flat[1] = 3.0
    w = x * 1.0
    w.flat = [1.0, 2.0, 3.0]
    v = x * 1.0
    v.flat[(v > 6).ravel()] = 0.0
    u = x * 1.0
    u.flat[np.arange(12) % 3 == 0] = [5.0, 6.0]
    s = sum(e for e in x[0].flat)
    return r1, r2, r3, r4, r5, r6, y, t, z, w, v, u, s, len(x.flat), x.flat.copy()


X = np.arange(12.0).reshape(3, 4) - 2.5
K = np.array([3, 11])


def check(got, want):
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        g = np.asarray(g.numpy() if hasattr(g, "numpy") else g)
        assert np.array_equal(g, np.asarray(w)), (i, g, w)


@pytest.mark.parametrize("split", [False, True])
def test_flat_reads_and_writes_under_jit(split, compiler):
    sh = (MESH.sharding(None, "d"), MESH.sharding()) if split else None
    got = spmd.jit(program, in_shardings=sh, backend=compiler, fallback=False)(X.copy(), K)
    check(got, program(X.copy(), K))


def test_flat_reads_and_writes_eagerly_on_spmd_arrays():
    # the writes used to go into a gathered copy and were lost
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = program(spmd.device_put(X.copy(), MESH.sharding(None, "d")), spmd.device_put(K, MESH.sharding()))
    check(got, program(X.copy(), K))


def test_flat_errors_as_numpy():
    def two_d_mask(x):
        return x.flat[x > 0]

    def traced_mask_values(x):
        y = x * 1.0
        y.flat[(x > 0).ravel()] = np.array([1.0, 2.0])
        return y
    with pytest.raises(IndexError):
        two_d_mask(X)
    with pytest.raises(IndexError, match="flat iterator"):
        spmd.jit(two_d_mask, fallback=False)(X)
    with pytest.raises(NotImplementedError, match="data"):
        spmd.jit(traced_mask_values, fallback=False)(X)


@st.composite
def flat_writes(draw):
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
    n = int(np.prod(shape))
    kind = draw(st.sampled_from(["int", "slice", "ints", "mask"]))
    if kind == "int":
        key = draw(st.integers(-n, n - 1))
    elif kind == "slice":
        key = slice(draw(st.integers(-n, n)), draw(st.integers(-n, n)), draw(st.sampled_from([1, 2, 3, -1, -2])))
    elif kind == "ints":
        key = np.array(draw(st.lists(st.integers(-n, n - 1), min_size=1, max_size=6)))
    else:
        key = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)))
    count = np.arange(n)[key].size
    # one position takes one value (numpy refuses an array there)
    nvals = 0 if kind == "int" else draw(st.sampled_from([0, 1, 2, max(count, 1), count + 2]))
    return shape, key, nvals, draw(st.booleans())


@settings(max_examples=40, deadline=None)
@given(flat_writes())
def test_flat_writes_match_numpy(case):
    shape, key, nvals, transposed = case
    x = np.arange(np.prod(shape), dtype=np.float64).reshape(shape) * 1.5

    def f(a, vals):
        b = (a.T if transposed else a) * 1.0
        b.flat[key] = vals[0] if nvals == 0 else vals[:nvals]
        return b, b.flat[key]
    vals = -np.arange(1.0, max(nvals, 1) + 1)
    want = f(x, vals)
    check(spmd.jit(f, fallback=False)(x, vals), want)
    split = shape[0] % 2 == 0
    sh = MESH.sharding("d", *[None] * (len(shape) - 1)) if split else MESH.sharding(*[None] * len(shape))
    check(f(spmd.device_put(x, sh), spmd.device_put(vals, MESH.sharding(None))), want)
