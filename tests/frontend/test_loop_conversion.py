"""Loops on traced data (frontend/loop_conversion.py): a while loop whose test needs the
data, or a `for i in range(n)` left by `if <data>: break`, is traced as one while loop under
spmd.jit (no graph break, no FallbackWarning), with numpy's values, dtypes and Python types;
loops it refuses keep their graph breaks, with numpy's values."""
import warnings

import numpy as np
import pytest
from hypothesis import example, given, settings, strategies as st

import spmd
from spmd.errors import FallbackWarning

MESH = spmd.Mesh((2,), ("d",))


def run(f, *args, static=()):
    """(results of spmd.jit(f) called twice, number of FallbackWarnings)"""
    jf = spmd.jit(f, mesh=MESH, static_argnums=static)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        got = [jf(*args), jf(*args)]
    return got, sum(issubclass(w.category, FallbackWarning) for w in rec)


def same(got, want):
    """numpy's result: values, dtypes, and Python numbers as Python numbers"""
    if isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want)
        for g, w in zip(got, want):
            same(g, w)
        return
    if isinstance(want, (int, float)) and not isinstance(want, np.generic):
        assert type(got) is type(want), (type(got), type(want))
        assert got == want
        return
    g = np.asarray(got)
    assert g.dtype == np.asarray(want).dtype and g.shape == np.shape(want)
    # (float32 sums over 2 shards round differently from numpy's)
    tol = 1e-4 if g.dtype == np.float32 else 1e-12
    np.testing.assert_allclose(g, want, rtol=tol, atol=tol)


def halving(w, g, target):
    t = 4.0
    while (w - t * g).sum() < target:
        t *= 0.5
    return w - t * g, t


def armijo(w, g, iters):
    for _ in range(iters):
        t = 1.0
        while np.sum((w - t * g) ** 2) > np.sum(w ** 2) - 0.5 * t * (g @ g):
            t = t * 0.5
        w = w - t * g
    return w


def counting(x, limit):
    n = 0
    s = x.copy()
    while s.max() < limit:
        s = s * 1.5 + 0.1
        n += 1
    return s, n


def cg_like(x, tol, maxiter):
    acc = np.zeros_like(x)
    its = 0
    scale = 1.0
    for i in range(maxiter):
        acc += x * scale
        its += 1
        if np.abs(acc).sum() > tol:
            break
        scale = scale * 0.5
        x = x + 1
    return acc, its, scale, x


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 99), dt=st.sampled_from([np.float32, np.float64]),
       below=st.floats(0.5, 30))
def test_while_on_data_with_a_python_float_carry(seed, dt, below):
    rng = np.random.default_rng(seed)
    w = (1 + rng.random(8)).astype(dt)
    g = rng.random(8).astype(dt)
    target = float(w.sum()) - below          # (t = 0 would end it: the loop ends)
    want = halving(w, g, target)
    got, warned = run(halving, w, g, target, static=(2,))
    assert warned == 0
    for r in got:
        same(r, want)
        assert np.asarray(r[0]).dtype == dt        # t * g stays g's dtype: t is a Python float


@settings(max_examples=6, deadline=None)
@given(seed=st.integers(0, 99), dt=st.sampled_from([np.float32, np.float64]))
def test_while_nested_in_a_static_for(seed, dt):
    rng = np.random.default_rng(seed)
    w, g = rng.standard_normal(8).astype(dt), rng.standard_normal(8).astype(dt)
    got, warned = run(armijo, w, g, 3, static=(2,))
    assert warned == 0
    for r in got:
        same(r, armijo(w, g, 3))


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 99), limit=st.floats(0.5, 40))
def test_while_carrying_an_array_and_a_python_int(seed, limit):
    x = np.random.default_rng(seed).random(6)
    got, warned = run(counting, x, limit, static=(1,))
    assert warned == 0
    for r in got:
        same(r, counting(x, limit))        # n is a Python int, as numpy's


@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 99), tol=st.sampled_from([0.0, 1.0, 5.0, 12.0, 1e9]),
       dt=st.sampled_from([np.float32, np.float64]), maxiter=st.integers(1, 6))
def test_for_range_with_a_break_on_data(seed, tol, dt, maxiter):
    # tol 0: breaks on the first iteration; 1e9: never; between: in the middle
    x = np.random.default_rng(seed).random(4).astype(dt)
    got, warned = run(cg_like, x, tol, maxiter, static=(1, 2))
    assert warned == 0
    want = cg_like(x, tol, maxiter)
    for r in got:
        same(r, want)


def index_after(x, tol, start, stop, step):
    i = -7
    for i in range(start, stop, step):
        x = x * 0.5 + i
        if np.abs(x).max() > tol:
            break
    return x * i, i, i + 1


@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 99), tol=st.sampled_from([0.0, 3.0, 20.0, 1e9]),
       rng=st.sampled_from([(0, 6, 1), (2, 20, 3), (10, 0, -2), (4, 4, 1)]))
def test_the_loops_index_read_after_it_is_the_breaking_or_last_one(seed, tol, rng):
    # (4, 4, 1) runs no iteration (no test on the data): i keeps -7, as in Python
    x = np.random.default_rng(seed).random(3)
    got, warned = run(index_after, x, tol, *rng, static=(1, 2, 3, 4))
    assert warned == 0
    want = index_after(x, tol, *rng)
    for r in got:
        same(r, want)


def in_place_into_an_argument(x, limit):
    while x.sum() < limit:
        x *= 2.0
    return x


def test_an_argument_written_in_place_in_the_loop_is_written_for_the_caller():
    x = np.arange(1.0, 5.0)
    want = in_place_into_an_argument(x.copy(), 100.0)
    jf = spmd.jit(in_place_into_an_argument, mesh=MESH, static_argnums=(1,))
    a = x.copy()
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        r = jf(a, 100.0)
    np.testing.assert_array_equal(a, want)
    np.testing.assert_array_equal(np.asarray(r), want)


def appends(x):
    out = []
    while x.sum() < 10:
        x = x + 1
        out.append(x.sum())
    return x, out


def returns_inside(x):
    while x.sum() < 10:
        x = x + 1
        if x[0] > 3:
            return x * 0
    return x


def changes_dtype(x):
    t = 0
    while x.sum() < 10:
        x = x + 1
        t = t + 0.5                    # an int, then a float
    return x, t


def reads_a_view(x):
    x = x.copy()
    v = x[:2]
    while v.sum() < 10:               # v sees the writes into x
        x += 1
    return x


@pytest.mark.parametrize("f", [appends, returns_inside, changes_dtype, reads_a_view])
def test_refused_loops_keep_numpys_values_through_graph_breaks(f):
    x = np.arange(4.0)
    got, warned = run(f, x)
    assert warned > 0                 # the loop's graph breaks, as before
    for r in got:
        want = f(x.copy())
        if isinstance(want, tuple):
            for g, w in zip(got[0], want):
                np.testing.assert_allclose(np.asarray(g, dtype=float), np.asarray(w, dtype=float))
        else:
            np.testing.assert_allclose(np.asarray(r), want)


def test_python_operators_on_python_numbers_promote_like_them():
    # s * 2 on a Python float argument is a Python float: x32 * it stays float32 (NEP 50)
    def f(x, s):
        return x * (s * 2.0), s * 2.0
    x = np.ones(4, np.float32)
    r, s = spmd.jit(f, mesh=MESH)(x, 1.5)
    assert np.asarray(r).dtype == np.float32 and type(s) is float and s == 3.0


@pytest.mark.parametrize("name", ["backtracking", "conjugate_gradient"])
def test_corpus_loops_compile_whole(name):
    import sys
    from paths import ROOT
    import os
    sys.path.insert(0, os.path.join(ROOT, "tests", "programs"))
    import corpus
    assert corpus.run(name) == "compiled"


def test_one_program_for_every_iteration_count():
    jf = spmd.jit(counting, mesh=MESH, static_argnums=(1,))
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        for scale in (1.0, 0.1, 0.01, 2.0):
            x = np.linspace(0.1, 1.0, 6) * scale
            same(jf(x, 3.0), counting(x, 3.0))
    assert len(jf._cache) == 1          # one signature, one program: no tree of breaks


def test_converted_under_fallback_false_and_refused_loops_still_raise():
    from spmd.errors import ConcreteValueError
    x = np.linspace(0.1, 1.0, 6)
    jf = spmd.jit(counting, mesh=MESH, static_argnums=(1,), fallback=False)
    same(jf(x, 3.0), counting(x, 3.0))
    with pytest.raises(ConcreteValueError):
        spmd.jit(appends, mesh=MESH, fallback=False)(np.arange(4.0))


class Stepper:
    def __init__(self, rate):
        self.rate = rate

    def run(self, x):
        i = 0
        for j in range(10):
            x = x * self.rate
            if x.sum() > 40:
                break
            i = i + j
        return x, i


def closure(scale):
    def f(x):
        while x.max() < 10:
            x = x * scale
        return x
    return f


@pytest.mark.parametrize("rate", [1.5, 3.0, 50.0])
def test_methods_and_closures_are_converted(rate):
    x = np.arange(1.0, 5.0)
    (r1, r2), warned = run(Stepper(rate).run, x)
    assert warned == 0
    same(r1, Stepper(rate).run(x))
    (r1, _), warned = run(closure(rate), x)
    assert warned == 0
    same(r1, closure(rate)(x))


def until_small_or_counted(x, tol, maxit):
    it = 0
    err = np.abs(x).sum()
    while err > tol and it < maxit:
        x = x * 0.5 + 0.01
        err = np.abs(x).sum()
        it += 1
    return x, it


def unless_small_or_counted(x, tol, maxit):
    it = 0
    while not (np.abs(x).sum() < tol or it >= maxit):
        x = x * 0.5
        it += 1
    return x, it


def doubling_until(x, tol, big, n):
    acc = x.sum() * 0
    for i in range(n):
        acc = acc + x.sum()
        if acc > tol or x.max() > big and i > 1:
            break
        x = x * 2
    return x, acc


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 99), tol=st.sampled_from([0.0, 0.5, 2.0, 1e9]), maxit=st.integers(0, 9),
       big=st.sampled_from([1.0, 50.0, 1e9]), dt=st.sampled_from([np.float32, np.float64]))
@example(seed=0, tol=0.0, maxit=0, big=1.0, dt=np.float32)     # it and maxit: one int object
def test_and_or_not_in_loop_tests(seed, tol, maxit, big, dt):
    # Python's and / or / not on traced tests: one compiled loop with numpy's iterations,
    # whichever operand ends it (the data, the Python counter, both, or neither)
    x = (1 + np.random.default_rng(seed).random(6)).astype(dt)
    for f, args, static in [(until_small_or_counted, (x, tol, maxit), (1, 2)),
                            (unless_small_or_counted, (x, tol, maxit), (1, 2)),
                            (doubling_until, (x, tol * 40, big, maxit), (1, 2, 3))]:
        got, warned = run(f, *args, static=static)
        assert warned == 0, f.__name__
        for r in got:
            same(r, f(*args))


def and_on_a_whole_array(x):
    while x < 10 and x.sum() < 100:       # numpy: the truth of a 6-element array is ambiguous
        x = x + 1
    return x


def test_and_on_an_array_test_raises_as_numpy():
    x = np.arange(6.0)
    with pytest.raises(ValueError):
        and_on_a_whole_array(x)
    with pytest.raises(ValueError), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        spmd.jit(and_on_a_whole_array, mesh=MESH)(x)


def shrink_until(x, limit):
    n = 0
    while np.abs(x).sum() > limit:
        x = x * 0.5
        n += 1
    return x, n


def calls_shrink(x, limit):
    y, n = shrink_until(x + 1, limit)
    return y * 2, n


def calls_calls_shrink(x, limit):
    a, n = calls_shrink(x, limit)
    b, m = shrink_until(a, limit / 2)
    return a + b, n + m


COUNTER = 0


def counts_in_a_global(x, limit):
    global COUNTER
    COUNTER += 1
    return shrink_until(x, limit)


@settings(max_examples=6, deadline=None)
@given(seed=st.integers(0, 99), limit=st.sampled_from([0.5, 3.0, 1e9]))
def test_loops_in_functions_the_jitted_function_calls(seed, limit):
    # a loop on data in a module-level function called by name (and one called from that)
    # is converted too: one compiled program, numpy's values and Python ints
    x = np.random.default_rng(seed).standard_normal(6)
    for f in (calls_shrink, calls_calls_shrink):
        jf = spmd.jit(f, mesh=MESH, static_argnums=(1,))
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            got = [jf(x, limit), jf(x, limit)]
        assert not [w for w in rec if issubclass(w.category, FallbackWarning)], f.__name__
        for r in got:
            same(r, f(x, limit))


def test_a_function_assigning_globals_keeps_its_breaks_and_numpys_values():
    # its helpers' globals would be a copy: the global it assigns would be lost
    x = np.arange(1.0, 7.0)
    got, warned = run(counts_in_a_global, x, 2.0, static=(1,))
    assert warned > 0
    for r in got:
        same(r, shrink_until(x, 2.0))


def _converted_then_a_path_walk(g):
    while g[0] < 100.0:                       # converted: a traced while loop
        g = g * 1.1 + 0.01
    path, i = [], 0
    while i < g.shape[0] - 1:                 # a Python walk on the data: no conversion
        i = i + 1 + int(np.argmax(g[i:i + 2]))
        path.append(i)
    return g, path


def test_the_fallback_warning_names_the_code_that_needs_values_not_a_converted_loop():
    # tracing with the first loop converted stops in the walk; the warning (and the user's
    # fix) is about the walk, not the loop jit converted
    g = np.linspace(1.0, 2.0, 60)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        got = spmd.jit(_converted_then_a_path_walk)(g)
    want = _converted_then_a_path_walk(g)
    np.testing.assert_allclose(np.asarray(got[0]), want[0])
    assert got[1] == want[1]
    msgs = [str(w.message) for w in rec if issubclass(w.category, FallbackWarning)]
    line = _converted_then_a_path_walk.__code__.co_firstlineno + 5
    assert len(msgs) == 1 and f"test_loop_conversion.py:{line}" in msgs[0], msgs


# ----------------------------------------------------------------- if statements on data
def clip_step(u, v, cap):
    dt = 0.5 * np.min(1.0 / (np.abs(v) + 1.0))
    capped = False
    if dt > cap:                                   # a CFL-like clip
        dt = dt * 0 + cap
        capped = True
    u = u + dt * v
    if np.max(np.abs(u)) > 10.0:                   # both branches assign
        u = u / np.max(np.abs(u)) * 10.0
    elif u.sum() < 0:
        u = -u
    else:
        u = u + 1.0
    return u, dt, capped


def in_a_loop(x, k):
    acc = 0.0 * x
    for i in range(k):
        if x[i] > 0.5 and x.sum() > 1:
            acc = acc + x * i
        y = acc * 2                                # assigned in the branch's absence: not carried
    return acc, y


def assigned_in_both(x):
    if x.mean() > 0:
        z = x * 2
    else:
        z = x - 3
    return z


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 99), scale=st.sampled_from([0.01, 1.0, 100.0]), sign=st.sampled_from([1.0, -1.0]),
       dt=st.sampled_from([np.float32, np.float64]), cap=st.sampled_from([0.01, 0.3]))
def test_an_if_on_data_is_a_cond_with_numpys_values(seed, scale, sign, dt, cap):
    rng = np.random.default_rng(seed)
    u, v = (sign * rng.random(8) * scale).astype(dt), (rng.random(8) * scale).astype(dt)
    want = clip_step(u.copy(), v, cap)
    arg = u.copy()
    got, warned = run(clip_step, arg, v, cap, static=(2,))
    assert warned == 0
    for r in got:
        same(r[0], want[0])
        same(r[1], want[1])
        assert bool(r[2]) == want[2]


@pytest.mark.parametrize("f,args,static", [(in_a_loop, (np.linspace(0, 1, 6), 6), (1,)),
                                           (assigned_in_both, (np.arange(4.0) - 1,), ()),
                                           (assigned_in_both, (np.arange(4.0) - 3,), ())])
def test_ifs_in_loops_and_names_bound_only_in_the_branches(f, args, static):
    got, warned = run(f, *args, static=static)
    assert warned == 0
    want = f(*args)
    for r in got:
        for g, w in zip(r if isinstance(r, tuple) else (r,), want if isinstance(want, tuple) else (want,)):
            np.testing.assert_allclose(np.asarray(g), w, rtol=1e-13)


def test_an_if_whose_branches_leave_a_python_number_and_an_array_stays_a_graph_break():
    """t is a Python float on one side and numpy's float on the other: with a float32 array
    they promote differently, so no cond can give both: the graph break, numpy's values."""
    def f(u, v, t):
        dt = 0.5 * np.min(v)
        if t + dt > 1.0:
            dt = 1.0 - t
        return u + dt * u, t + dt
    u, v = np.arange(4, dtype=np.float32), np.ones(4)
    for t in (0.0, 0.9):
        got, warned = run(f, u, v, t)
        assert warned > 0
        want = f(u, v, t)
        for r in got:
            same(r[0], want[0])
            np.testing.assert_allclose(float(np.asarray(r[1])), want[1])


def if_in_a_while(x, s):
    while s.sum() < 10:
        s = s + x                      # x, read at the loop's top, is the if's to carry
        if x.sum() > 0:
            x = x - 0.1
    return s, x


def if_in_a_static_for(x):
    s = x * 0
    for _ in range(5):
        s = s + x
        if x.sum() > 1:
            x = x * 0.5
    return s, x


@pytest.mark.parametrize("f,args", [(if_in_a_while, (np.ones(3), np.zeros(3))),
                                    (if_in_a_while, (-np.ones(3), np.full(3, 11.0))),
                                    (if_in_a_static_for, (np.ones(3),)), (if_in_a_static_for, (np.full(3, 0.1),))])
def test_an_if_in_a_loop_carries_what_the_next_iteration_reads(f, args):
    got, warned = run(f, *args)
    assert warned == 0
    want = f(*[a.copy() for a in args])
    for r in got:
        for g, w in zip(r, want):
            np.testing.assert_allclose(np.asarray(g), w, rtol=1e-13)
