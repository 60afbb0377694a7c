"""`x[key] op= v` where the key holds a boolean mask over some of x's dims (numpy: a mask
of shape x.shape[i:i+k] selects along those k dims), alone or with slices and integers
around it, for `=` and every in-place operator, with v a scalar or one value per selected
row (broadcast against numpy's selection (n_true, *rest)). With a traced mask this is a
select; a v with one entry per selected element takes the count from the data (a graph
break; a TraceError without them).
Concrete (numpy) masks are index arrays and take any v numpy takes. Compared with numpy
on sharded inputs."""
import operator
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import spmd
from spmd.errors import TraceError

OPS = {"=": None, "+=": operator.iadd, "-=": operator.isub, "*=": operator.imul, "/=": operator.itruediv,
       "//=": operator.ifloordiv, "%=": operator.imod, "**=": operator.ipow}


def random_key(rng, shape):
    """(key with a placeholder "M" for the mask, mask shape, position of N in numpy's selection)."""
    nd = len(shape)
    i = int(rng.integers(0, nd))
    k = int(rng.integers(1, nd - i + 1))
    key, kinds = [], []
    for d in range(i):
        if rng.random() < 0.3:
            key.append(int(rng.integers(-shape[d], shape[d])))
            kinds.append("int")
        else:
            a, b = sorted(rng.integers(0, shape[d] + 1, size=2).tolist())
            key.append(slice(a, b + 1, int(rng.choice([1, 2, -1]))) if rng.random() < 0.5 else slice(None))
            kinds.append("slice")
    key.append("M")
    kinds.append("mask")
    for d in range(i + k, nd):
        if rng.random() < 0.25:
            break                              # numpy fills the rest with full slices
        if rng.random() < 0.3:
            key.append(int(rng.integers(-shape[d], shape[d])))
            kinds.append("int")
        else:
            a, b = sorted(rng.integers(0, shape[d] + 1, size=2).tolist())
            key.append(slice(a, b + 1, int(rng.choice([1, -1, 2]))))
            kinds.append("slice")
    # numpy: the mask and the integers are the advanced indices; side by side, their
    # dim (n_true) replaces them, else it goes first
    adv = [j for j, t in enumerate(kinds) if t != "slice"]
    n_pos = sum(1 for t in kinds[:i] if t == "slice") if adv == list(range(adv[0], adv[-1] + 1)) else 0
    return key, tuple(shape[i:i + k]), n_pos


def fill(key, mask):
    return tuple(mask if k == "M" else k for k in key)


def program(key, opname, v):
    def f(x, m):
        k = fill(key, m)
        if OPS[opname] is None:
            x[k] = v
        else:
            t = x[k]
            t = OPS[opname](t, v)
            x[k] = t
        return x
    return f


def value(rng, sel, n_pos, opname, dtype):
    """A scalar or an array that broadcasts against the selection without its n_true dim."""
    lo = 1 if opname in ("/=", "//=", "%=") else -3
    if rng.random() < 0.35 or len(sel) == 0:
        return dtype(rng.integers(lo, 4) or 1) if opname != "**=" else dtype(2)
    s1 = [1 if j == n_pos else n for j, n in enumerate(sel)]
    start = int(rng.integers(0, len(s1) + 1))
    shape = [n if rng.random() < 0.7 else 1 for n in s1[start:]]
    if opname == "**=":
        return rng.integers(0, 3, size=shape).astype(dtype)
    v = rng.integers(lo, 4, size=shape).astype(dtype)
    return np.where(v == 0, 1, v).astype(dtype) if opname in ("/=", "//=", "%=") else v


MESHES = [None, (2,), (4,), (2, 2)]


def _jit(f, mesh, ndim):
    if mesh is None:
        return spmd.jit(f)
    m = spmd.Mesh(mesh, ("a", "b")[:len(mesh)])
    spec = tuple(m.axis_names[d] if d < len(mesh) else None for d in range(ndim))
    return spmd.jit(f, in_shardings=(m.sharding(*spec), None))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2 ** 20), shape=st.sampled_from([(4, 6), (5, 3), (4, 4, 3), (3, 5, 2), (6,), (2, 3, 2, 2)]),
       opname=st.sampled_from(sorted(OPS)), mesh=st.sampled_from(MESHES),
       dtype=st.sampled_from([np.float64, np.float32, np.int64]))
def test_partial_mask_writes_match_numpy(seed, shape, opname, mesh, dtype):
    rng = np.random.default_rng(seed)
    if dtype is np.int64 and opname == "/=":
        opname = "//="
    key, mshape, n_pos = random_key(rng, shape)
    mask = rng.random(mshape) < 0.5
    x = rng.integers(-5, 6, size=shape).astype(dtype)
    sel = x[fill(key, mask)].shape
    v = value(rng, sel, n_pos, opname, dtype)
    f = program(key, opname, v)
    want = f(x.copy(), mask)
    got = np.asarray(_jit(f, mesh, len(shape))(x.copy(), mask))
    np.testing.assert_array_equal(got, want, err_msg=f"x{fill(key, 'M')} {opname} {np.shape(v)}, mask {mshape}")


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2 ** 20), shape=st.sampled_from([(4, 6), (4, 4, 3), (3, 5, 2)]),
       opname=st.sampled_from(["=", "+=", "*="]), mesh=st.sampled_from(MESHES))
def test_concrete_partial_masks_take_any_value_numpy_takes(seed, shape, opname, mesh):
    """A numpy mask is known when tracing: v may also have one entry per selected element."""
    rng = np.random.default_rng(seed)
    key, mshape, n_pos = random_key(rng, shape)
    mask = rng.random(mshape) < 0.5
    x = rng.integers(-5, 6, size=shape).astype(np.float64)
    sel = x[fill(key, mask)].shape
    v = rng.integers(-3, 4, size=sel).astype(np.float64)

    def f(x):
        k = fill(key, mask)
        if opname == "=":
            x[k] = v
        else:
            t = x[k]
            t = OPS[opname](t, v)
            x[k] = t
        return x
    want = f(x.copy())
    if mesh is None:
        got = spmd.jit(f)(x.copy())
    else:
        m = spmd.Mesh(mesh, ("a", "b")[:len(mesh)])
        got = spmd.jit(f, in_shardings=(m.sharding(*(m.axis_names + (None,) * 3)[:len(shape)]),))(x.copy())
    np.testing.assert_array_equal(np.asarray(got), want)


def test_examples_from_the_issue():
    x = np.arange(24.0).reshape(4, 6)
    m = np.array([True, False, True, True])

    def f(x, m):
        x[m, 1:3] += np.array([10.0, 20.0])
        x[m] *= 2
        x[~m, ::2] = -1
        return x
    want = f(x.copy(), m)
    mesh = spmd.Mesh((2,), ("a",))
    np.testing.assert_array_equal(np.asarray(spmd.jit(f, in_shardings=(mesh.sharding("a", None), None))(x.copy(), m)),
                                  want)


@pytest.mark.parametrize("opname", ["=", "+="])
def test_one_value_per_selected_element_takes_the_count_from_the_data(opname):
    x = np.zeros((4, 3))
    m = np.array([True, False, True, False])
    v = np.arange(6.0).reshape(2, 3)             # numpy: one row per True; traced: the count from the data

    def f(x, m):
        if opname == "=":
            x[m] = v
        else:
            x[m] += v
        return x
    with pytest.warns(spmd.FallbackWarning, match="graph break"):
        got = spmd.jit(f)(x.copy(), m)
    np.testing.assert_array_equal(np.asarray(got), f(x.copy(), m))
    with pytest.raises(ValueError, match="cannot assign 2 input values to the 3"):
        spmd.jit(f)(x.copy(), np.array([True, True, True, False]))     # numpy raises a ValueError too
    # without graph breaks: the error names the line and the alternatives
    with pytest.raises(TraceError, match=r"test_mask_writes\.py:\d+.*n_true.*np\.where"):
        spmd.jit(f, fallback=False)(x, m)
    np.testing.assert_array_equal(np.asarray(spmd.jit(program(["M"], opname, np.ones(3)))(x.copy(), m)),
                                  program(["M"], opname, np.ones(3))(x.copy(), m))


def boundary_bounce_back(F, m, perm):
    """lattice Boltzmann's obstacle: its cells' populations, compacted, permuted and written back."""
    b = F[m, :]
    b = b[:, perm]
    F *= 0.5
    F[m, :] = b
    return F


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2 ** 31 - 1), st.integers(1, 7))
def test_a_compacted_selection_worked_on_and_written_back_has_numpys_values(seed, n):
    rng = np.random.default_rng(seed)
    F = rng.standard_normal((n, 4, 3))
    perm = rng.permutation(3)
    row = spmd.Mesh((2,), ("a",)).sharding("a", None, None)
    f = spmd.jit(boundary_bounce_back, in_shardings=(row, None, None))
    for _ in range(3):                       # a new count each call: the program for it, as numpy's values
        m = rng.random((n, 4)) < 0.4
        want = boundary_bounce_back(F.copy(), m, perm)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", spmd.FallbackWarning)
            got = f(F.copy(), m, perm)
        np.testing.assert_array_equal(np.asarray(got), want)


def test_mask_shape_mismatch_and_other_combinations_are_clear_errors():
    x = np.zeros((4, 3))
    with pytest.raises(IndexError, match="boolean index did not match"):
        spmd.jit(lambda x, m: x.__setitem__(m, 1) or x)(x, np.ones(3, bool))
    with pytest.raises(NotImplementedError, match="np.where"):
        spmd.jit(lambda x, m: x.__setitem__((m, [0, 1]), 1) or x)(x, np.ones(4, bool))
    with pytest.raises(ValueError, match="cannot broadcast"):
        spmd.jit(lambda x, m: x.__setitem__(m, np.ones(2)) or x)(x, np.ones(4, bool))
    with pytest.raises(TraceError, match="depends on the data"):
        spmd.jit(lambda x, m: x[m], fallback=False)(x, np.ones(4, bool))
