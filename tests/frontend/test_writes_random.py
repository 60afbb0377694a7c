"""Property test of numpy's write semantics: random sequences of views (basic indexing
with any steps, .T, transpose, reshape/ravel -- views or copies as numpy decides) and
writes through them (setitem with basic and advanced keys, in-place operators, copyto)
run under spmd.jit on a random mesh and sharding must leave the base and every view
exactly as numpy leaves them."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import spmd
from write_programs import VIEW_FUNCTIONS, make_program, run, write_through


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2 ** 20), shape=st.sampled_from([(5, 6), (4, 4, 3), (7,), (6, 5)]),
       steps=st.integers(1, 8), mesh=st.sampled_from([None, (2,), (2, 2)]))
def test_random_writes_through_views(seed, shape, steps, mesh):
    prog = make_program(seed, shape, steps)
    x = np.random.default_rng(seed).random(shape)
    want_x = x.copy()
    want = run(prog, want_x)
    if mesh is None:
        f = spmd.jit(lambda x: run(prog, x), backend="numpy")
    else:
        m = spmd.Mesh(mesh, ("a", "b")[:len(mesh)])
        spec = tuple(m.axis_names[d] if d < len(mesh) else None for d in range(len(shape)))
        f = spmd.jit(lambda x: run(prog, x), in_shardings=(m.sharding(*spec[:len(shape)]),), backend="numpy")
    got_x = x.copy()
    got = f(got_x)
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        g = np.asarray(g.numpy() if hasattr(g, "numpy") else g)
        np.testing.assert_array_equal(g, w, err_msg=f"pool[{k}] after {prog}")
    np.testing.assert_array_equal(got_x, want_x, err_msg=f"the argument after {prog}")


def test_program_generator_makes_views_and_copies():
    kinds = {s[0] for seed in range(30) for s in make_program(seed, (5, 6), 8)}
    assert {"view", "T", "setitem", "setadv", "iadd"} <= kinds


@pytest.mark.parametrize("key", [(slice(None, None, -1), 2), (slice(1, None, 2), slice(None, None, -2)),
                                 (Ellipsis, 1), (None, 3, slice(1, 4))])
def test_write_through_reversed_and_strided_views(key):
    def f(x):
        v = x[key]
        v += 10
        return x, v
    x = np.arange(42.0).reshape(6, 7)
    want = f(x.copy())
    got = spmd.jit(f, backend="numpy")(x.copy())
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def _adv_key(rng, shape):
    """A random numpy key mixing ints, slices, None, index lists and arrays."""
    key = []
    for n in shape:
        r = rng.random()
        if r < 0.35:
            key.append(rng.integers(-n, n, size=int(rng.integers(1, 4))).tolist())
        elif r < 0.5:
            key.append(int(rng.integers(-n, n)))
        elif r < 0.6:
            key.append(range(0, n, 2))
        else:
            a, b = sorted(rng.integers(0, n + 1, size=2).tolist())
            key.append(slice(a, b, int(rng.choice([1, 2, -1]))) if a != b else slice(None))
        if rng.random() < 0.1:
            key.append(None)
    # index arrays broadcast together: give them one length
    lens = {len(k) for k in key if isinstance(k, list)}
    if len(lens) > 1:
        m = min(lens)
        key = [k[:m] if isinstance(k, list) else k for k in key]
    if sum(isinstance(k, range) for k in key) + sum(isinstance(k, list) for k in key) > 1:
        key = [list(k) if isinstance(k, range) else k for k in key]
        lens = {len(k) for k in key if isinstance(k, list)}
        m = min(lens)
        key = [k[:m] if isinstance(k, list) else k for k in key]
    return tuple(key)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2 ** 20), shape=st.sampled_from([(5, 6), (4, 3, 5), (6,)]),
       mesh=st.sampled_from([None, (2, 2)]))
def test_random_advanced_indexing_reads_and_writes(seed, shape, mesh):
    rng = np.random.default_rng(seed)
    key = _adv_key(rng, shape)
    x = rng.random(shape)
    want_get = x[key]
    val = float(rng.integers(1, 9)) if rng.random() < 0.5 else rng.random(np.shape(want_get))

    def f(x):
        r = x[key]
        x[key] = val
        return r, x
    w = x.copy()
    want = f(w)
    m = spmd.Mesh(mesh, ("a", "b")) if mesh else None
    sh = (m.sharding(*(("a", "b", None)[:len(shape)] if len(shape) > 1 else ("a",))),) if m else None
    got = spmd.jit(f, in_shardings=sh, backend="numpy")(x.copy())
    for g, v in zip(got, want):
        g = np.asarray(g.numpy() if hasattr(g, "numpy") else g)
        assert g.shape == np.shape(v), (key, g.shape, np.shape(v))
        np.testing.assert_array_equal(g, v, err_msg=str(key))


@pytest.mark.parametrize("name,view", VIEW_FUNCTIONS, ids=[n for n, _ in VIEW_FUNCTIONS])
def test_numpy_functions_that_return_views(name, view):
    x = np.arange(24.0).reshape(4, 6)
    want = write_through(view)(x.copy())
    mesh = spmd.Mesh((2,), ("a",))
    got = spmd.jit(write_through(view), in_shardings=(mesh.sharding("a", None),), backend="numpy")(x.copy())
    for g, w in zip(got, want):
        np.testing.assert_array_equal(np.asarray(g), w)
