"""When the processes compare programs (runtime/consistency.py, called by jit/running.py):
on a program's first run, not on every run; the runs in between are noted and compared
at the next exchange. Driven in one process by the local runtime posing as one of two
processes whose partner agrees (tests/runtime/test_multihost.py runs the real thing
under mpiexec, with ranks that differ)."""
import numpy as np
import pytest

import spmd
from spmd.jit import running
from spmd.runtime import consistency
from spmd.runtime.current_runtime import get_runtime


class TwoProcesses:
    """The current runtime, saying it is process 0 of 2; every exchange is recorded and
    the partner's bytes are this process's (it agrees)."""

    def __init__(self, rt):
        self.rt = rt
        self.exchanges = []

    def __getattr__(self, name):
        return getattr(self.rt, name)

    def process_count(self):
        return 2

    def process_index(self):
        return 0

    def allgather_bytes(self, data, what="exchanging values"):
        self.exchanges.append((what, bytes(data)))
        return [bytes(data), bytes(data)]


@pytest.fixture
def two(monkeypatch):
    fake = TwoProcesses(get_runtime())
    monkeypatch.setattr(running, "get_runtime", lambda: fake)
    consistency.RUNS.clear()
    yield fake
    consistency.RUNS.clear()


def _step():
    mesh = spmd.Mesh((2,), ("d",))
    sh = mesh.sharding("d")

    def step(w, g):
        return w - 0.1 * g, g * 0.5
    return spmd.jit(step, in_shardings=(sh, sh), out_shardings=(sh, sh)), np.arange(8.0), np.ones(8)


def test_a_program_is_compared_on_its_first_run_only(two):
    f, w, g = _step()
    w, g = f(w, g)
    assert [what for what, _ in two.exchanges] == ["running a program"]
    first = two.exchanges[0][1]
    assert first[12:24] == bytes(12)          # nothing ran before it
    for _ in range(5):
        w, g = f(w, g)
    assert len(two.exchanges) == 1            # later runs are not exchanged...
    assert consistency.RUNS.describe() == "step x5"      # ...but noted
    np.testing.assert_allclose(np.asarray(w), np.arange(8.0) - 0.1 * sum(0.5 ** k for k in range(6)))


def test_the_runs_between_exchanges_are_compared_at_the_next(two):
    f, w, g = _step()
    w, g = f(w, g)
    w, g = f(w, g)
    noted = consistency.RUNS.digest()
    assert noted != bytes(12)
    consistency.agree(two, "reading an spmd.Array", ("f8", (4,)))
    assert two.exchanges[-1][0] == "reading an spmd.Array" and two.exchanges[-1][1].endswith(noted)
    assert consistency.RUNS.describe() == "nothing"      # compared: the notes start again


def test_every_run_is_compared_when_asked(two, monkeypatch):
    monkeypatch.setenv("SPMD_CHECK_PROGRAMS", "every")
    f, w, g = _step()
    for _ in range(4):
        w, g = f(w, g)
    assert [what for what, _ in two.exchanges] == ["running a program"] * 4


def test_the_check_can_be_turned_off(two, monkeypatch):
    monkeypatch.setenv("SPMD_CHECK_PROGRAMS", "0")
    f, w, g = _step()
    for _ in range(3):
        w, g = f(w, g)
    assert two.exchanges == [] and consistency.RUNS.describe() == "nothing"


def test_the_notes_stay_small_and_tell_orders_apart():
    a, b = consistency.RunLog(), consistency.RunLog()
    for k in range(1000):
        a.note("f" if k % 2 else "g", "f" if k % 2 else "g")
        b.note("g" if k % 2 else "f", "g" if k % 2 else "f")
    assert len(a.entries) <= consistency.RunLog.LIMIT and a.digest() != b.digest()
    c = consistency.RunLog()
    for k in range(1000):
        c.note("f" if k % 2 else "g", "f" if k % 2 else "g")
    assert c.digest() == a.digest()
