"""spmd.debug.print prints the values a program has when it runs: numpy's (a split array
whole), once per call, in program order, on every backend and launcher; printing never
changes how the rest of the program is split. spmd.debug.breakpoint stops eagerly, and
says why it cannot inside jit. The float() and buffer-write errors say what is wrong first."""
import contextlib
import inspect
import io
import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import spmd
from paths import ROOT, SCRIPTS
from spmd.transports.mpi.mpi_launch import find_mpiexec

MESH = spmd.Mesh((2, 2), ("a", "b"))


def printed(capsys):
    return capsys.readouterr().out.splitlines()


def test_split_values_print_whole_once_per_call_in_order(capsys, compiler):
    def step(x, w):
        h = x @ w
        spmd.debug.print("h = {}", h)
        spmd.debug.print("sum {:.3f} max {m}", h.sum(), m=(h * 2).max())
        return np.tanh(h)

    f = spmd.jit(step, in_shardings=(MESH.sharding("a", None), MESH.sharding(None, "b")), backend=compiler)
    x = np.arange(12.0).reshape(4, 3) / 10
    w = np.linspace(-1, 1, 12).reshape(3, 4)
    want = []
    for k in range(3):
        print(f"call {k}")
        f(x * (k + 1), w)
        h = (x * (k + 1)) @ w
        want += [f"call {k}", f"h = {h}", f"sum {h.sum():.3f} max {(h * 2).max()}"]
    # numpy's own str of the whole array, exactly, between the caller's lines
    assert printed(capsys) == [ln for block in want for ln in block.splitlines()]


@settings(max_examples=10, deadline=None)
@given(shape=st.sampled_from([(5, 3), (4, 4), (7, 2), (1, 6)]),
       spec=st.sampled_from([("a", None), (None, "b"), ("a", "b"), (("a", "b"), None), (None, None)]))
def test_any_split_prints_numpys_value(shape, spec):
    def f(x):
        spmd.debug.print("{}|{}", x * 2, x.sum(axis=0))
        return x + 1

    x = np.arange(np.prod(shape), dtype=np.float64).reshape(shape) - 3
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        spmd.jit(f, in_shardings=MESH.sharding(*spec))(x)
    assert out.getvalue() == f"{x * 2}|{x.sum(axis=0)}\n"


def test_printing_does_not_change_how_the_rest_is_split():
    def plain(x, w):
        return np.tanh(x @ w).sum(axis=1)

    def noisy(x, w):
        h = x @ w
        spmd.debug.print("{}", h)
        return np.tanh(h).sum(axis=1)

    shard = (MESH.sharding("a", None), MESH.sharding(None, "b"))
    args = (spmd.ShapeDtype((8, 6), "float32"), spmd.ShapeDtype((6, 4), "float32"))
    a = spmd.jit(plain, in_shardings=shard).lower(*args).stages["propagated"]
    b = spmd.jit(noisy, in_shardings=shard).lower(*args).stages["propagated"]
    sh = lambda g: [v.sharding.text() for op in g.ops for v in op.results if op.name != "debug_print"]  # noqa: E731
    assert sh(a) == sh(b)


def test_prints_in_loops_and_under_grad_and_without_a_mesh(capsys):
    def body(i, c):
        spmd.debug.print("i={} c={}", i, c)
        return c * 2

    def loss(w, x):
        y = x @ w
        spmd.debug.print("loss {:.4f}", (y ** 2).mean())
        return (y ** 2).mean()

    out = spmd.jit(lambda c: spmd.fori_loop(0, 3, body, c))(np.float64(1.0))
    assert float(out) == 8.0
    g = spmd.jit(spmd.grad(loss), in_shardings=(None, MESH.sharding("a", None)))(np.ones(3), np.ones((4, 3)))
    np.testing.assert_allclose(np.asarray(g), np.full(3, 6.0))
    assert printed(capsys) == ["i=0 c=1.0", "i=1 c=2.0", "i=2 c=4.0", "loss 9.0000"]


def test_outside_jit_it_prints_now(capsys):
    a = spmd.device_put(np.arange(8.0), spmd.Mesh((4,), ("x",)).sharding("x"))
    spmd.debug.print("a = {}, total {:.1f}", a, a.sum())
    assert printed(capsys) == [f"a = {np.arange(8.0)}, total 28.0"]


def test_a_format_that_cannot_take_the_values_fails_at_the_users_line():
    def f(x):
        spmd.debug.print("{} and {}", x)            # MARK
        return x
    line = inspect.getsourcelines(f)[1] + 1
    with pytest.raises(spmd.TraceError, match=rf"spmd.debug.print at test_debug.py:{line}: '\{{}} and \{{}}' cannot"):
        spmd.jit(f)(np.ones(2))


def test_breakpoint_inside_jit_says_to_run_eagerly():
    def f(x):
        spmd.debug.breakpoint()
        return x
    with pytest.raises(spmd.TraceError, match="without spmd.jit") as e:
        spmd.jit(f)(np.ones(2))
    assert "spmd.debug.print" in str(e.value)


def test_breakpoint_outside_jit_stops_at_the_callers_line(monkeypatch):
    import pdb
    stopped = []
    monkeypatch.setattr(pdb.Pdb, "set_trace", lambda self, frame=None: stopped.append(frame))
    monkeypatch.delenv("PYTHONBREAKPOINT", raising=False)

    def user():
        x = spmd.device_put(np.ones(4), spmd.Mesh((2,), ("x",)).sharding("x"))  # noqa: F841 - inspected in pdb
        spmd.debug.breakpoint()

    user()
    (frame,) = stopped
    assert frame.f_code is user.__code__ and "x" in frame.f_locals
    monkeypatch.setenv("PYTHONBREAKPOINT", "0")
    user()
    assert len(stopped) == 1


# -- errors that say what is wrong first ------------------------------------------------
def test_a_traced_value_written_into_a_numpy_array_from_outside_says_so_first():
    made_outside = np.zeros((4, 2))

    def fill(x):
        out = made_outside
        for i in range(4):
            out[i] = x[i].sum(), x[i].max()     # MARK
        return out

    def fill1(x):
        out = np.fromiter(range(4), float)      # not a function spmd watches
        for i in range(4):
            out[i] = x[i].sum()                 # MARK
        return out

    for f in (fill, fill1):
        line = inspect.getsourcelines(f)[1] + 3
        with pytest.raises(spmd.TraceError) as e:
            spmd.jit(f, fallback=False)(np.ones((4, 3)))
        msg = str(e.value)
        assert msg.startswith(f"a traced value is written into a plain numpy array at test_debug.py:{line}"), msg
        assert "np.array(a)" in msg and "float()" not in msg.split(":")[0]
    assert not made_outside.any()


def test_float_of_a_traced_value_names_spmd_debug_print():
    with pytest.raises(spmd.TraceError) as e:
        spmd.jit(lambda x: float(x.sum()), fallback=False)(np.ones(3))
    msg = str(e.value)
    assert msg.startswith("float() of a traced value") and 'spmd.debug.print("{}", value)' in msg


# -- launchers ---------------------------------------------------------------------------
def _want_lines():
    x = np.arange(16.0).reshape(4, 4)
    out = []
    for i in range(3):
        y = x * (i + 1)
        out += [f"call {i}", *f"y = {y}".splitlines(), f"sum {y.sum():.2f} max {y.max()}"]
    return out + ["done"]


def test_debug_print_script_locally():
    p = subprocess.run([sys.executable, os.path.join(SCRIPTS, "debug_print.py")], capture_output=True, text=True,
                       timeout=120, env=dict(os.environ, PYTHONPATH=ROOT))
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == _want_lines()


@pytest.mark.mpi
@pytest.mark.timeout(120)
@pytest.mark.skipif(find_mpiexec() is None, reason="no mpiexec")
def test_debug_print_under_mpiexec_prints_once_by_rank_0():
    env = dict(os.environ, PYTHONPATH=ROOT)
    env.pop("SPMD_BACKEND", None)
    p = subprocess.run([find_mpiexec(), "-n", "4", sys.executable, os.path.join(SCRIPTS, "debug_print.py")],
                       capture_output=True, text=True, timeout=100, env=env)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == _want_lines()        # no line from another rank, none twice
