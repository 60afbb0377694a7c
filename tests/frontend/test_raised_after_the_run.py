"""numpy's errors that depend on the data, raised after the run, naming the line
(core.error_at_run), where spmd computed numbers silently: a traced index outside its
axis (IndexError, frontend/index_bounds.py; indices the trace bounds -- argmax, argsort,
k % n, clip -- carry no check), np.choose out of range, np.average of weights summing
to zero."""
import numpy as np
import pytest

import spmd

MESH = spmd.Mesh((4,), ("d",))


def _set(x, i):
    y = x.copy()
    y[i] = -1.0
    return y


def _put(x, i):
    y = x.copy()
    np.put(y, i, -1.0)
    return y


FORMS = {
    "getitem": lambda x, i: x[i],
    "getitem_2d": lambda x, i: x.reshape(2, 4)[:, i],
    "scalar": lambda x, i: x[i[0]] + x[i[1]],
    "take": lambda x, i: np.take(x, i),
    "take_along_axis": lambda x, i: np.take_along_axis(x, i, 0),
    "setitem": _set,
    "put": _put,
}
IN_RANGE = np.array([7, -8, 0, 3])
OUT = [np.array([8, 0, 1, 2]), np.array([0, -9, 1, 2]), np.array([100, -100, 0, 0])]


def _axis_of(name, i):
    return i if name != "getitem_2d" else np.array([3, -4, 0, 1]) if i is IN_RANGE else i // 2


@pytest.mark.parametrize("name", FORMS)
@pytest.mark.parametrize("mesh", [None, MESH])
def test_a_traced_index_out_of_range_raises_numpys_index_error(name, mesh):
    f, x = FORMS[name], np.arange(8.0)
    sh = None if mesh is None else (mesh.sharding("d"), mesh.sharding("d"))
    jf = spmd.jit(f, in_shardings=sh, mesh=mesh)
    i = _axis_of(name, IN_RANGE)
    np.testing.assert_array_equal(np.asarray(jf(x, i)), f(x, i))
    for bad in OUT:
        bad = _axis_of(name, bad)
        with pytest.raises(IndexError):
            f(x, bad)
        with pytest.raises(IndexError, match=r"out of bounds for axis \d with size \d.*test_raised_after_the_run\.py:\d+"):
            jf(x, bad)
    np.testing.assert_array_equal(np.asarray(jf(x, i)), f(x, i))          # and runs on after


def test_indices_the_trace_bounds_carry_no_check():
    x = np.arange(12.0).reshape(3, 4)
    bounded = [lambda x: x[np.argmax(x[:, 0])], lambda x: np.take_along_axis(x, np.argmax(x, 1, keepdims=True), 1),
               lambda x: x[np.arange(3), np.argmin(x, 1)], lambda x: np.take_along_axis(x, np.argsort(x, 1), 1),
               lambda x: x.ravel()[np.clip(x.astype(np.int64).ravel(), 0, 11)],
               lambda x: x[x.astype(np.int64) % 3, 0]]
    for f in bounded:
        low = spmd.jit(f).lower(x)
        assert low.errors == [], low.errors
        np.testing.assert_array_equal(np.asarray(spmd.jit(f)(x)), f(x))
    assert len(spmd.jit(lambda x, i: x[i]).lower(x, np.array([0])).errors) == 1


def test_inside_a_loop_body_an_index_clamps_as_documented():
    # a loop body runs many times: nothing can be raised there (user guide)
    def f(x, i):
        return spmd.fori_loop(0, 2, lambda k, acc: acc + x[i], np.zeros(1))
    np.testing.assert_array_equal(np.asarray(spmd.jit(f)(np.arange(4.0), np.array([9]))), [6.0])


def test_choose_out_of_range_raises_numpys_value_error():
    c = [np.arange(6.0), -np.arange(6.0), np.ones(6)]
    f = spmd.jit(lambda i: np.choose(i, c))
    ok = np.array([0, 1, 2, 0, 1, 2])
    np.testing.assert_array_equal(np.asarray(f(ok)), np.choose(ok, c))
    for bad in (np.array([0, 3, 2, 0, 1, 2]), np.array([0, -1, 2, 0, 1, 2])):
        with pytest.raises(ValueError, match="invalid entry in choice array"):
            np.choose(bad, c)
        with pytest.raises(ValueError, match=r"invalid entry in choice array.*test_raised_after_the_run\.py:\d+"):
            f(bad)
    np.testing.assert_array_equal(np.asarray(spmd.jit(lambda i: np.choose(i, c, mode="clip"))(bad)),
                                  np.choose(bad, c, mode="clip"))
    assert spmd.jit(lambda i: np.choose(i % 3, c)).lower(ok).errors == []


def test_average_of_weights_summing_to_zero_raises_numpys_zero_division_error():
    x = np.arange(6.0).reshape(2, 3)
    f = spmd.jit(lambda x, w: np.average(x, axis=1, weights=w))
    np.testing.assert_allclose(np.asarray(f(x, np.array([1.0, 2.0, 3.0]))), np.average(x, 1, [1.0, 2.0, 3.0]))
    with pytest.raises(ZeroDivisionError, match=r"Weights sum to zero.*test_raised_after_the_run\.py:\d+"):
        f(x, np.array([1.0, -1.0, 0.0]))


def test_nanargmax_of_an_all_nan_slice_raises_numpys_value_error():
    x = np.array([[1.0, np.nan, 3.0], [np.nan, np.nan, -np.inf]])
    f = spmd.jit(lambda x: np.nanargmax(x, axis=1))
    np.testing.assert_array_equal(np.asarray(f(x[:, [0, 2, 1]])), np.nanargmax(x[:, [0, 2, 1]], axis=1))
    with pytest.raises(ValueError, match="All-NaN slice"):
        np.nanargmax(x, axis=0)
    with pytest.raises(ValueError, match=r"All-NaN slice.*test_raised_after_the_run\.py:\d+"):
        spmd.jit(lambda x: np.nanargmin(x, axis=0))(x)
