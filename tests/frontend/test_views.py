"""numpy's functions that return views, under spmd.jit and in eager mode, against numpy:
a write through the view reaches its base, a write into the base shows in the view's
later reads, and numpy's read-only views (broadcast_to, diagonal, ...) read through and
raise numpy's ValueError when written. Inputs are complex, so real / imag are views of
one part; meshes split the base evenly and unevenly."""
import warnings

import numpy as np
import pytest

import spmd
from backend_env import numpy_compiler

# name -> a function of a (5, 6) array that returns a view of it, as numpy documents
VIEWS = {
    "atleast_1d": np.atleast_1d, "atleast_2d": np.atleast_2d, "atleast_3d": np.atleast_3d,
    "rot90": np.rot90, "rot90_2": lambda x: np.rot90(x, 2), "rot90_3": lambda x: np.rot90(x, -1, (1, 0)),
    "flip": np.flip, "flip_1": lambda x: np.flip(x, 1), "flipud": np.flipud, "fliplr": np.fliplr,
    "real": lambda x: x.real, "imag": lambda x: x.imag, "np.real": np.real, "np.imag": np.imag,
    "view": lambda x: x.view(), "view_dtype": lambda x: x.view(x.dtype),
    "swapaxes": lambda x: np.swapaxes(x, 0, 1), "moveaxis": lambda x: np.moveaxis(x[None], 0, 2),
    "squeeze": lambda x: np.squeeze(x[:, None]), "expand_dims": lambda x: np.expand_dims(x, 1),
    "T": lambda x: x.T, "mT": lambda x: x[None].mT, "reshape": lambda x: x.reshape(3, 10),
    "ravel": np.ravel, "real_of_flip": lambda x: np.flip(x, 0).real, "imag_T": lambda x: x.T.imag,
    "flip_of_real": lambda x: np.flipud(x.real), "split": lambda x: np.hsplit(x, 3)[1],
    "reshape_copy_false": lambda x: x.reshape(3, 10, copy=False),
    "np.reshape_copy_false": lambda x: np.reshape(x, (10, 3), copy=False),
}
# numpy's read-only views: they show writes into the base; writing one raises
READ_ONLY = {
    "broadcast_to": lambda x: np.broadcast_to(x[1], (3, 6)), "diagonal": np.diagonal,
    "diagonal_1": lambda x: np.diagonal(x, 1), "diag": np.diag, "diagonal_method": lambda x: x.diagonal(-1),
    "T_of_broadcast": lambda x: np.broadcast_to(x[0], (2, 6)).T, "imag_of_real": lambda x: x.real.imag,
}
MESHES = [None, ((2,), (0,)), ((4,), (1,)), ((2, 2), (0, 1))]      # (mesh shape, the dims split)


def base():
    rng = np.random.default_rng(0)
    return rng.integers(-9, 9, (5, 6)) + 1j * rng.integers(-9, 9, (5, 6))


def write_and_read(view):
    """Write through the view, then into the base; return the base and the view."""
    def f(x):
        v = view(x)
        v[0] = v[0] * 2 - 100
        x[-1] = x[-1] + (1 + 2j)
        return x, v
    return f


def read_through(view):
    def f(x):
        v = view(x)
        x[1:3] = x[1:3] * 3 + 1j
        return x, v + 0
    return f


def raising(view):
    def f(x):
        view(x)[...] = 0
        return x
    return f


def _jit(f, mesh):
    if mesh is None:
        return spmd.jit(f, backend="numpy")
    m = spmd.Mesh(mesh[0], ("a", "b")[:len(mesh[0])])
    spec = [None, None]
    for d, ax in zip(mesh[1], m.axis_names):
        spec[d] = ax
    return spmd.jit(f, in_shardings=(m.sharding(*spec),), backend="numpy")


def _eager(f, mesh):
    m = spmd.Mesh(mesh[0], ("a", "b")[:len(mesh[0])]) if mesh else spmd.Mesh((1,), ("a",))
    spec = [None, None]
    for d, ax in zip(mesh[1] if mesh else (), m.axis_names):
        spec[d] = ax

    def g(x):
        with numpy_compiler():
            return f(spmd.device_put(x, m.sharding(*spec)))
    return g


def check(f, run, x):
    want = f(x.copy())
    got = run(f)(x.copy())
    for g, w in zip(got, want):
        g = g.numpy() if hasattr(g, "numpy") else np.asarray(g)
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, g.dtype, w.shape, w.dtype)
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("mesh", MESHES, ids=str)
@pytest.mark.parametrize("name", sorted(VIEWS))
def test_views_write_through_and_read_through_under_jit(name, mesh):
    check(write_and_read(VIEWS[name]), lambda f: _jit(f, mesh), base())


@pytest.mark.parametrize("name", sorted(VIEWS))
def test_views_write_through_and_read_through_eagerly(name):
    check(write_and_read(VIEWS[name]), lambda f: _eager(f, ((2,), (0,))), base())


@pytest.mark.parametrize("mode", ["jit", "eager"])
@pytest.mark.parametrize("name", sorted(READ_ONLY))
def test_read_only_views_read_through_and_refuse_writes(name, mode):
    run = (lambda f: _jit(f, ((2,), (0,)))) if mode == "jit" else (lambda f: _eager(f, ((2,), (0,))))
    check(read_through(READ_ONLY[name]), run, base())
    with pytest.raises(ValueError, match="read-only"):
        raising(READ_ONLY[name])(base())          # numpy's own error
    with pytest.raises(ValueError, match=r"assignment destination is read-only.*test_views\.py:\d+"):
        run(raising(READ_ONLY[name]))(base())


@pytest.mark.parametrize("mode", ["jit", "eager"])
def test_reshape_copy_true_copies_and_copy_false_raises_where_numpy_copies(mode):
    """numpy 2.1's reshape(..., copy=): copy=True is a new array (a write into it stays
    there), copy=False raises numpy's ValueError where only a copy can give the shape."""
    run = (lambda f: _jit(f, ((2,), (0,)))) if mode == "jit" else (lambda f: _eager(f, ((2,), (0,))))

    def f(x):
        c, d = np.reshape(x, (3, 10), copy=True), x.reshape(10, 3, copy=True)
        c[0] = 0
        d[1] = 1
        return x, c, d
    check(f, run, base())
    for g in (lambda x: np.reshape(x.T, 30, copy=False), lambda x: x.T.reshape(30, copy=False)):
        with pytest.raises(ValueError, match="Unable to avoid creating a copy"):
            g(base())
        with pytest.raises(ValueError, match=r"Unable to avoid creating a copy.*test_views\.py:\d+"):
            run(g)(base())


def test_broadcast_arrays_are_read_only_views():
    """numpy's broadcast_arrays results are writable with a DeprecationWarning (a write
    reaches every element the broadcast repeats; numpy will make them read-only): spmd's
    read through and are read-only already, so such a write raises, naming the line."""
    view = lambda x: np.broadcast_arrays(x[:, :1], np.ones(6))[0]      # noqa: E731
    check(read_through(view), lambda f: _jit(f, ((2,), (0,))), base())
    with pytest.warns(DeprecationWarning):
        raising(view)(base())
    with pytest.raises(ValueError, match=r"read-only.*test_views\.py:\d+.*broadcast_arrays"):
        _jit(raising(view), None)(base())


def test_real_parts_of_real_arrays_are_the_array_and_a_write_keeps_the_other_part():
    def f(x, z):
        r = x.real                  # numpy: x itself
        r += 1
        z.imag = x                  # attribute assignment sets one part
        z.real[0] = np.inf
        return x, z, z.real, z.imag
    x, z = np.arange(6.0).reshape(2, 3), np.full((2, 3), 1 + np.nan * 1j)
    want = f(x.copy(), z.copy())
    got = spmd.jit(f, backend="numpy")(x.copy(), z.copy())
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_views_of_another_dtype_size_raise_naming_the_line():
    # (a view of the same size is numpy's bitcast: tests/frontend/test_bitcast_view.py)
    with pytest.raises(NotImplementedError, match=r"x.view\(int32\) at .*test_views\.py:\d+.*astype"):
        spmd.jit(lambda x: x.view(np.int32), backend="numpy")(np.zeros(3))


# new arrays numpy lays out in another order than C: a reshape of one copies, and a write
# into the copy leaves the array as it was (order="K": ufuncs, copies, sorts, cumsums, ffts,
# reductions and *_like follow their operand's order of axes)
NOT_C_ORDER = {
    "ufunc_of_T": lambda x: x.T + 1, "sort_of_T": lambda x: np.sort(x.T, axis=0),
    "np.copy_of_T": lambda x: np.copy(x.T), "cumsum_of_T": lambda x: np.cumsum(x.T, axis=1),
    "fft_of_T": lambda x: np.fft.fft(x.T, axis=0), "zeros_like_T": lambda x: np.zeros_like(x.T) + 0,
    "sum_of_transposed": lambda x: np.sum(np.transpose(x[None] + 0, (2, 0, 1)), axis=1),
    "copy_F": lambda x: x.T.copy(order="A"),
    "sum_over_an_empty_axis": lambda x: np.sum(x.T[:, :0, None] + 0, axis=1),
    # C order after all: a.copy(), a ufunc of mixed orders; and a broadcast operand
    "copy_method_of_T": lambda x: x.T.copy(), "mixed": lambda x: x.T + x.T.copy(),
    "T_plus_column": lambda x: x.T + x[:, 0],
    "argsort_of_T": lambda x: np.argsort(x.T, axis=0),
    "ufunc_of_broadcast": lambda x: np.negative(np.broadcast_to(x[:, None], (x.shape[0], 2) + x.shape[1:])),
    # a copy of one array alone puts a broadcast's repeated axes innermost (elementwise ops
    # above do not): a reshape of it copies
    "np.copy_of_broadcast": lambda x: np.copy(np.broadcast_to(x, (2,) + x.shape)),
    "np.array_of_broadcast": lambda x: np.array(np.broadcast_to(x[:, None], (x.shape[0], 2) + x.shape[1:])),
    "sort_of_broadcast": lambda x: np.sort(np.broadcast_to(x[:, None], (x.shape[0], 2) + x.shape[1:]), axis=-1),
    "astype_of_broadcast": lambda x: np.broadcast_to(x, (2,) + x.shape).astype(np.float32),
    "zeros_like_broadcast": lambda x: np.zeros_like(np.broadcast_to(x, (2,) + x.shape)) + 0,
    "fft_of_broadcast": lambda x: np.fft.fft(np.broadcast_to(x[:, None], (x.shape[0], 2) + x.shape[1:]), axis=0),
}


def reshape_and_write(make):
    def f(x):
        y = make(x)
        z = y.reshape(-1)           # numpy: a view of y only where y is C-contiguous
        z[0] = 100
        return x, y, z
    return f


@pytest.mark.parametrize("mode", ["jit", "eager"])
@pytest.mark.parametrize("name", sorted(NOT_C_ORDER))
def test_reshape_of_a_new_array_is_a_view_or_a_copy_as_numpy_lays_it_out(name, mode):
    run = (lambda f: _jit(f, ((2,), (0,)))) if mode == "jit" else (lambda f: _eager(f, ((2,), (0,))))
    check(reshape_and_write(NOT_C_ORDER[name]), run, base())


def test_an_arguments_own_strides_decide_reshape_views_and_are_part_of_jits_cache_key():
    def f(x):
        z = x.reshape(-1)
        z[0] = 100
        return z + 0
    j = spmd.jit(f, backend="numpy")
    for x in [np.arange(6.0).reshape(2, 3), np.asfortranarray(np.arange(6.0).reshape(2, 3)),
              np.arange(12.0).reshape(2, 6)[:, ::2], np.arange(6.0).reshape(2, 3)]:
        want, got = x.copy(order="K"), x.copy(order="K")
        np.testing.assert_array_equal(j(got), f(want))
        np.testing.assert_array_equal(got, want)


def test_eager_results_keep_numpy_s_order_for_later_programs():
    with numpy_compiler():
        a = spmd.device_put(base(), spmd.Mesh((2,), ("a",)).sharding("a", None))
        y = a.T * 2                 # numpy: F order, as a.T
        z = y.reshape(-1)
        z[0] = 0
        w = np.copy(y).reshape(-1)  # a copy of y, laid out as y: reshape copies again
        w[1] = 0
    want = base().T * 2
    np.testing.assert_array_equal(y.numpy(), want)


def test_a_numpy_scalar_has_no_memory_to_view():
    """x.sum() is a numpy scalar: its views and s.copy() are new scalars, while s[...],
    np.copy(s) and s.reshape(1) are new arrays a write changes alone."""
    def f(x):
        s = x.sum()
        a, b, c = s[...], np.copy(s), s.reshape(1)
        a[...] = 1
        b[...] = 2
        c[0] = 3
        v, t, k = s.view(), s.T, s.copy()
        return s, a, b, c, v + t + k
    for run in (lambda f: _jit(f, ((2,), (0,))), lambda f: _eager(f, ((2,), (0,)))):
        check(f, run, base())


def test_jits_eager_fallback_keeps_an_arguments_strides():
    """A function jit runs eagerly (it needs a value) reshapes its argument as numpy
    would: a Fortran-ordered argument's reshape is a copy, so the argument keeps its values."""
    def f(x):
        if float(x.sum()) > 0:
            z = x.reshape(-1)
            z[0] = 100
            return z + 0
        return x
    m = spmd.Mesh((2,), ("a",))
    j = spmd.jit(f, in_shardings=(m.sharding("a", None),))
    for x in [np.asfortranarray(np.arange(1.0, 7.0).reshape(2, 3)), np.arange(1.0, 7.0).reshape(2, 3)]:
        want, got = x.copy(order="K"), x.copy(order="K")
        with numpy_compiler(), warnings.catch_warnings():
            warnings.simplefilter("ignore", spmd.FallbackWarning)
            r = j(got)
        np.testing.assert_array_equal(r.numpy(), f(want))
        np.testing.assert_array_equal(got, want)


def test_eagerly_a_numpy_scalar_and_a_0d_array_of_the_same_kind_view_differently():
    """Eager programs are cached by their arguments' kind: a numpy scalar's squeeze is a
    new value, a 0-d array's is a view of it (which shows a later write)."""
    with numpy_compiler():
        a = spmd.device_put(base(), spmd.Mesh((2,), ("a",)).sharding("a", None))
        s = a.sum()
        t = np.squeeze(s)
        c = np.copy(s)
        v = np.squeeze(c)
        c[...] = 7
    assert complex(v.numpy()) == 7 and complex(t.numpy()) == complex(base().sum())


def set_shape_and_write(make, shape):
    """numpy's `y.shape = ...`: y itself becomes a view of its memory in the new shape (a
    write through it reaches y's base and other views of it), or AttributeError."""
    def f(x):
        y = make(x)
        other = y[..., :1]
        y.shape = shape
        y[(0,) * len(shape)] = 100
        return x, y, other + 0
    return f


@pytest.mark.parametrize("mode", ["jit", "eager"])
@pytest.mark.parametrize("case", [("new", lambda x: x + 1, (30,)), ("rows", lambda x: x[1:3], (2, 3, 2)),
                                  ("copy", lambda x: x.T.copy(), (-1, 5)), ("T", lambda x: x.T, (30,)),
                                  ("cols", lambda x: x[:, :2], (10,)), ("scalar_shape", lambda x: x[:1, :1], ())],
                         ids=lambda c: c[0])
def test_setting_shape_is_a_view_in_place_or_numpys_attribute_error(case, mode):
    _, make, shape = case
    f = set_shape_and_write(make, shape)
    if mode == "eager":
        # an eager Array's views derive from it by its shape: it keeps it, and says what to write
        with pytest.raises(NotImplementedError, match=r"a = a.reshape"):
            _eager(f, ((2,), (0,)))(base())
        return
    run = lambda f: _jit(f, ((2,), (0,)))
    try:
        f(base())
    except AttributeError:
        with pytest.raises(AttributeError, match="Incompatible shape"):
            run(f)(base())
        return
    check(f, run, base())


def test_setting_the_shape_of_a_jit_argument_says_the_caller_keeps_its_array():
    # numpy changes the caller's array object itself; jit gives the caller results, not a
    # changed object, so it says so and how to write it
    def f(x):
        x.shape = (30,)
        return x
    with pytest.raises(NotImplementedError, match=r"x = x.reshape\(\(30,\)\)"):
        _jit(f, ((2,), (0,)))(base())
