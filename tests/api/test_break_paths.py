"""A graph-break path taken twice runs whole (spmd/jit/graph_breaks.Path): the program at
its end gives the breaks' values too, and a call runs it alone and checks them, so the
part before a break is not run again on its own; a call whose values differ runs the
breaks' programs as before, with numpy's values and arguments written once."""
import warnings

import numpy as np
from hypothesis import given, settings, strategies as st

import spmd
from spmd.jit import graph_breaks as gb

MESH = spmd.Mesh((4,), ("d",))


def jitted(fn):
    return spmd.jit(fn, in_shardings=(MESH.sharding("d"),))


def counting_break_runs(monkeypatch):
    runs = []
    real = gb.Break.run

    def run(self, leaves):
        runs.append(self.loc)
        return real(self, leaves)
    monkeypatch.setattr(gb.Break, "run", run)
    return runs


def branchy(x):
    s = np.sum(x * x)
    if x.sum() > 0:
        n = float(s)            # (a break: a bare `return ..., float(s)` would be an output)
        return x / np.sqrt(s), n
    n = float(s)
    return -x, n


def test_a_path_taken_twice_runs_whole_without_its_breaks_programs(monkeypatch):
    runs = counting_break_runs(monkeypatch)
    x = np.linspace(-1, 2, 16)
    f = jitted(branchy)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", spmd.errors.FallbackWarning)
        for call in range(5):
            before = len(runs)
            got = f(x)
            want = branchy(x)
            np.testing.assert_allclose(np.asarray(got[0]), want[0], rtol=1e-13)
            np.testing.assert_allclose(float(np.asarray(got[1])), want[1], rtol=1e-13)
            # calls 1 and 2 run the two breaks' programs; from call 3 the path runs whole
            assert len(runs) - before == (2 if call < 2 else 0), (call, runs)


def test_a_call_off_the_guessed_path_runs_the_breaks_and_writes_arguments_once(monkeypatch):
    runs = counting_break_runs(monkeypatch)

    def step(x):
        if x.sum() > 0:            # (a return in the branch: a graph break, not a cond)
            x -= 1.0
            return x.max()
        x += 2.0
        return x.max()
    f = jitted(step)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", spmd.errors.FallbackWarning)
        for _ in range(3):
            f(np.ones(8))                  # the guess: the positive path
        x, want = -np.ones(8), -np.ones(8)
        before = len(runs)
        got = f(x)
        w = step(want)
    assert len(runs) - before == 1        # the check failed: the break's program ran
    np.testing.assert_array_equal(x, want)       # written once, by the path it took
    np.testing.assert_allclose(float(np.asarray(got)), float(w), rtol=1e-13)


@settings(max_examples=10, deadline=None)
@given(st.lists(st.sampled_from([-1.0, 1.0, 0.5]), min_size=2, max_size=7))
def test_any_sequence_of_paths_gives_numpys_values_and_writes(signs):
    def step(x, y):
        t = float(x.mean())
        if t > 0.7:
            y *= t
        elif t > 0:
            y -= x
        return y.sum() + t, x * t
    f = spmd.jit(step, in_shardings=(MESH.sharding("d"), MESH.sharding("d")))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", spmd.errors.FallbackWarning)
        for s in signs:
            x = np.full(8, s) + np.linspace(0, 0.01, 8)
            y, y_want = np.arange(8.0), np.arange(8.0)
            ya = spmd.device_put(y.copy(), MESH.sharding("d"))
            want = step(x, y_want)
            for arg in (y, ya):
                got = f(x, arg)
                np.testing.assert_allclose(float(np.asarray(got[0])), want[0], rtol=1e-13)
                np.testing.assert_allclose(np.asarray(got[1]), want[1], rtol=1e-13)
                np.testing.assert_allclose(np.asarray(arg), y_want, rtol=1e-13)
