"""spmd.random values through numpy's views and layout ops under jit: each gives what the
same op gives in numpy on the materialised random array, and tracing it finishes fast.

(These hung, with no message: every op of Threefry's rounds carried a lazy layout hint
that asked its operands' layouts anew, so working one out took 2^rounds steps. A
per-example deadline makes a hang a failure here.)"""
import contextlib
import os
import signal
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import spmd
import spmd.random as R
from spmd.errors import TraceError

KEY = R.key(0)
DEADLINE = 20.0      # seconds for one example; a fixed program takes well under one


@contextlib.contextmanager
def deadline(seconds, what):
    """Fail (TimeoutError) if the block runs longer than `seconds`: a hang in tracing is
    Python code, which the alarm interrupts. pytest-timeout's own alarm is put back after."""
    def boom(signum, frame):
        raise TimeoutError(f"{what} took over {seconds}s: tracing hangs")
    start = time.monotonic()
    old_handler = signal.signal(signal.SIGALRM, boom)
    old_timer = signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old_handler)
        if old_timer[0] > 0:
            signal.setitimer(signal.ITIMER_REAL, max(old_timer[0] - (time.monotonic() - start), 1e-3))


def same(got, want):
    got = np.asarray(got.numpy() if hasattr(got, "numpy") else got)
    want = np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, got.dtype, want.shape, want.dtype)
    if want.dtype.kind == "f":
        # a transcendental (Box-Muller's log and cos) may differ in its last bit between two
        # compiled programs; a wrong element or order is off by far more
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    else:
        np.testing.assert_array_equal(got, want)


# -- the reproductions of issue 35, item 1 ----------------------------------------------------
def _draw(k):
    return R.normal(k, (64, 64))


def _set_row(k):
    x = _draw(k)
    x[0] = 5.0
    return x


def _dropout_flat(k, x):
    # docs/user_guide.md's dropout mask, then flattened
    key, sub = R.split(k)
    mask = R.bernoulli(sub, 0.9, x.shape)
    return np.where(mask, x / 0.9, 0.0).reshape(-1), mask.reshape(-1)


REPRODUCTIONS = {
    "zeros_like": (lambda k: np.zeros_like(_draw(k)), lambda z: np.zeros_like(z)),
    "ones_like": (lambda k: np.ones_like(_draw(k)), lambda z: np.ones_like(z)),
    "T": (lambda k: _draw(k).T, lambda z: z.T),
    "reshape": (lambda k: _draw(k).reshape(32, 128), lambda z: z.reshape(32, 128)),
    "ravel": (lambda k: _draw(k).ravel(), lambda z: z.ravel()),
    "setitem": (_set_row, lambda z: np.concatenate([np.full((1, 64), 5.0), z[1:]])),
}


@pytest.fixture(scope="module")
def drawn():
    """The random array itself, materialised: what the numpy side of each case starts from."""
    return np.asarray(spmd.jit(_draw)(KEY))


@pytest.mark.parametrize("name", sorted(REPRODUCTIONS))
def test_issue_35_reproductions_return_numpy_values(name, drawn):
    f, numpy_op = REPRODUCTIONS[name]
    with deadline(DEADLINE, name):
        got = spmd.jit(f)(KEY)
    same(got, numpy_op(drawn))


def test_empty_like_of_a_random_value_has_its_shape_and_dtype():
    with deadline(DEADLINE, "empty_like"):
        got = np.asarray(spmd.jit(lambda k: np.empty_like(_draw(k)))(KEY))
    assert got.shape == (64, 64) and got.dtype == np.float64


def test_dropout_from_the_user_guide_runs_under_jit_and_flattens():
    x = np.arange(64 * 64, dtype=np.float64).reshape(64, 64) / 7

    def step(key, x):            # as docs/user_guide.md writes it
        key, sub = R.split(key)
        mask = R.bernoulli(sub, 0.9, x.shape)
        return key, np.where(mask, x / 0.9, 0.0)

    with deadline(DEADLINE, "dropout"):
        new_key, y = spmd.jit(step)(KEY, x)
        flat, mask = spmd.jit(_dropout_flat)(KEY, x)
    want_key, want_y = step(KEY, x)              # the same code eagerly, on numpy arrays
    same(new_key, want_key)
    same(y, want_y)
    mask_2d = np.asarray(mask).reshape(64, 64)
    assert 0.85 < mask_2d.mean() < 0.95
    same(mask_2d, R.bernoulli(R.split(KEY)[1], 0.9, x.shape))
    same(flat, np.where(mask_2d, x / 0.9, 0.0).reshape(-1))


def test_a_long_chain_after_a_strided_view_works_out_its_layout_once():
    # x.T is not C order, so each op after it has a layout hint; a chain of them deeper
    # than Python's recursion limit, whose ops share operands, must not recurse or repeat
    def f(a):
        x = y = a.T
        for _ in range(600):
            x, y = x * 0.5 + y, x - y * 0.25
        return (x + y).reshape(-1)
    a = np.random.default_rng(0).random((6, 4))
    with deadline(DEADLINE, "chain"):
        got = spmd.jit(f, backend="numpy")(a)
    same(got, f(a))


# -- the guard: a runaway in tracing's bookkeeping is an error naming the call and line -----
def test_a_layout_hint_that_waits_on_itself_is_a_trace_error():
    from spmd.frontend.trace import Hint

    def f(a):
        y = a.T + 1.0
        z = y * 2.0
        y._hint = Hint(lambda lay: lay, (z,))          # planted: y's layout waits on z's, z's on y's
        return z.reshape(-1)
    with pytest.raises(TraceError, match=r"test_random_views\.py:\d+.*depends on itself"):
        with deadline(DEADLINE, "cycle"):
            spmd.jit(f)(np.ones((3, 4)))


def test_spmd_running_away_is_a_trace_error_naming_the_call_and_the_line(monkeypatch):
    from spmd.frontend import views
    # a recursion planted in spmd's own code (compiled as a file of spmd's, so the frames count as spmd's)
    ns = {}
    exec(compile("def layout(*a):\n    return layout(*a)\n",
                 os.path.join(os.path.dirname(views.__file__), "planted.py"), "exec"), ns)
    monkeypatch.setattr(views, "layout", ns["layout"])

    def f(a):
        return a.reshape(-1)            # reshape asks a's layout: is it a view?
    line = f.__code__.co_firstlineno + 1
    with pytest.raises(TraceError, match=rf"ndarray\.reshape at test_random_views\.py:{line} ran away"):
        spmd.jit(f)(np.ones((3, 4)))


def test_the_users_own_recursion_stays_a_recursion_error():
    def down(x, n):
        return down(x + 1, n + 1)
    with pytest.raises(RecursionError):
        spmd.jit(lambda x: down(x, 0))(np.ones(3))


# -- property: every view and layout op of a random value, as numpy gives it -----------------
DRAWS = {
    "normal": lambda k, s: R.normal(k, s),
    "uniform32": lambda k, s: R.uniform(k, s, dtype="float32"),
    "mask": lambda k, s: R.bernoulli(k, 0.3, s),
}


def _factor(n, data):
    """A shape of size n (rank 1-3), one entry perhaps -1."""
    dims, rest = [], n
    for _ in range(data.draw(st.integers(0, 2), label="extra dims")):
        divs = [d for d in range(1, rest + 1) if rest % d == 0]
        d = data.draw(st.sampled_from(divs), label="dim")
        dims.append(d)
        rest //= d
    dims.append(rest)
    if data.draw(st.booleans(), label="with -1"):
        dims[data.draw(st.integers(0, len(dims) - 1), label="-1 at")] = -1
    return tuple(dims)


def _index(shape, data):
    """A basic index: per axis an int, a slice (negative steps too) or nothing."""
    key = []
    for n in shape:
        kind = data.draw(st.sampled_from(["all", "int", "slice"]), label="index kind")
        if kind == "int":
            key.append(data.draw(st.integers(-n, n - 1), label="i"))
        elif kind == "slice":
            key.append(slice(data.draw(st.none() | st.integers(-n - 1, n + 1), label="start"),
                             data.draw(st.none() | st.integers(-n - 1, n + 1), label="stop"),
                             data.draw(st.sampled_from([None, 1, 2, -1, -2]), label="step")))
        else:
            key.append(slice(None))
    return tuple(key)


def _op(shape, data):
    """(name, op) for one view or layout op on an array of `shape`; op works alike on a
    numpy array and on a traced one."""
    nd = len(shape)
    axis = st.integers(-nd, nd - 1)
    name = data.draw(st.sampled_from(["T", "transpose", "reshape", "ravel", "flatten", "swapaxes", "moveaxis",
                                      "squeeze", "expand_dims", "slice", "setitem", "zeros_like", "ones_like",
                                      "empty_like", "full_like", "astype", "copy"]), label="op")
    if name == "T":
        return name, lambda x: x.T
    if name == "transpose":
        perm = tuple(data.draw(st.permutations(range(nd)), label="axes"))
        if data.draw(st.booleans(), label="method"):
            return f"x.transpose{perm}", lambda x: x.transpose(*perm)
        return f"np.transpose(x, {perm})", lambda x: np.transpose(x, perm)
    if name == "reshape":
        to = _factor(int(np.prod(shape)), data)
        return f"reshape{to}", lambda x: x.reshape(to)
    if name == "ravel":
        return name, lambda x: np.ravel(x)
    if name == "flatten":
        return name, lambda x: x.flatten()
    if name == "swapaxes":
        a, b = data.draw(axis, label="a"), data.draw(axis, label="b")
        return name, lambda x: np.swapaxes(x, a, b)
    if name == "moveaxis":
        a, b = data.draw(axis, label="from"), data.draw(axis, label="to")
        return name, lambda x: np.moveaxis(x, a, b)
    if name == "squeeze":
        return name, lambda x: np.squeeze(np.expand_dims(x, 0))
    if name == "expand_dims":
        a = data.draw(st.integers(-nd - 1, nd), label="axis")
        return name, lambda x: np.expand_dims(x, a)
    if name == "slice":
        key = _index(shape, data)
        return f"[{key}]", lambda x: x[key]
    if name == "setitem":
        key = _index(shape, data)

        def setitem(x):
            x[key] = 7
            return x
        return f"[{key}] = 7", setitem
    if name == "full_like":
        return name, lambda x: np.full_like(x, 3)
    if name == "astype":
        dt = data.draw(st.sampled_from(["float32", "float64", "int64", "bool"]), label="dtype")
        return f"astype({dt})", lambda x: x.astype(dt)
    if name == "copy":
        order = data.draw(st.sampled_from(["C", "F", "A", "K"]), label="order")
        return f"copy({order})", lambda x: np.copy(x, order=order)
    return name, getattr(np, name)


def _then(data):
    """What follows the op: nothing, a flattening reshape (a view or a copy by the layout
    the op left), or a write into the random array itself (seen through a view, not a copy)."""
    return data.draw(st.sampled_from(["", "reshape(-1)", "write base"]), label="then")


def _program(draw, shape, op, then):
    def f(k):
        x = draw(k, shape)
        y = op(x)
        if then == "reshape(-1)":
            return x, y.reshape(-1)
        if then == "write base":
            x[(0,) * x.ndim] = 1
        return x, y
    return f


def _numpy(base, shape, op, then):
    x = base.copy()
    y = op(x)
    if then == "reshape(-1)":
        return x, y.reshape(-1)
    if then == "write base":
        x[(0,) * x.ndim] = 1
    return x, y


MESH = spmd.Mesh((4,), ("d",))
SHAPES = st.lists(st.integers(1, 6), min_size=1, max_size=3).map(tuple)


@pytest.mark.slow
@pytest.mark.parametrize("sharded", [False, True], ids=["unsharded", "mesh4"])
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shape=SHAPES, kind=st.sampled_from(sorted(DRAWS)), data=st.data())
def test_random_values_through_views_and_layout_ops(sharded, shape, kind, data):
    draw = DRAWS[kind]
    name, op = _op(shape, data)
    then = _then(data)
    # sharded: the random array is an output split over the mesh, so propagation splits
    # it, and the op's operand, from the iotas up
    outs = dict(out_shardings=(MESH.sharding("d", *(None,) * (len(shape) - 1)), None)) if sharded else {}
    base = np.asarray(spmd.jit(lambda k: draw(k, shape))(KEY))      # the random array, materialised
    try:
        want = _numpy(base, shape, op, then)
    except (IndexError, ValueError) as e:          # numpy refuses this op here: so must spmd
        with deadline(DEADLINE, name), pytest.raises(type(e)):
            spmd.jit(_program(draw, shape, op, then), **outs)(KEY)
        return
    with deadline(DEADLINE, f"{kind}{list(shape)} {name} {then}"):
        got = spmd.jit(_program(draw, shape, op, then), **outs)(KEY)
    same(got[0], want[0])
    if name == "empty_like":      # numpy leaves its values unset: its shape and dtype are the answer
        g = np.asarray(got[1])
        assert (g.shape, g.dtype) == (want[1].shape, want[1].dtype)
    else:
        same(got[1], want[1])
