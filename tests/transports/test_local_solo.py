"""A small program that exchanges nothing runs its ranks one after another on the caller's
thread (transports/local/local_runtime.py, SOLO_BYTES, Executable.talks): its results are
the threaded run's, bit for bit, hosted or not; and were the judgement wrong (a program
that does exchange run that way), the run raises CollectiveError promptly instead of a
rank waiting for one that only runs after it."""
from __future__ import annotations

import time

import numpy as np
import pytest
from test_local_native import ring_program

from spmd.backends.llvm import compile_llvm
from spmd.errors import CollectiveError
from spmd.ir import Graph
from spmd.ir.ops.names import ADD, ALL_REDUCE, MULTIPLY, SCAN
from spmd.sharding import Mesh
from spmd.transports.local import local_runtime
from spmd.transports.local.local_runtime import LocalRuntime

MESH = Mesh((2, 2), ("x", "y"))


def local_program(shape=(8,)):
    """x * x + x, then a scan adding x three times: no collective anywhere."""
    body = Graph("body")
    c = body.add_input(shape, "float64")
    body.outputs = [body.emit(ADD, c, c)]
    g = Graph("local")
    x = g.add_input(shape, "float64")
    y = g.emit(ADD, g.emit(MULTIPLY, x, x), x)
    g.outputs = [y, g.emit(SCAN, y, body=body, num_carry=1, num_xs=0, length=3, reverse=False)]
    return g


def reduce_program(shape=(8,)):
    g = Graph("reduce")
    x = g.add_input(shape, "float64")
    g.outputs = [g.emit(ADD, g.emit(ALL_REDUCE, x, axes=("x",), reduction="sum", group_size=2), x)]
    return g


@pytest.mark.parametrize("cores", ["1", "2", "64"])
def test_a_small_local_program_runs_its_ranks_in_turn(cores, monkeypatch):
    monkeypatch.setenv("SPMD_LOCAL_CORES", cores)
    rt = LocalRuntime()
    exe = compile_llvm(local_program())
    assert not exe.talks and exe.work_bytes <= local_runtime.SOLO_BYTES
    rng = np.random.default_rng(0)
    xs = {d: rng.standard_normal(8) for d in range(4)}
    monkeypatch.setattr(LocalRuntime, "_worker", lambda self, d: pytest.fail("a device thread was used"))
    for _ in range(2):
        got = rt.run(exe, MESH, {d: [xs[d].copy()] for d in range(4)})
        for d in range(4):
            y = xs[d] * xs[d] + xs[d]
            np.testing.assert_array_equal(got[d][0], y)
            np.testing.assert_array_equal(got[d][1], y * 8)


def test_programs_that_exchange_are_judged_to_talk():
    assert compile_llvm(ring_program((5,), "float64", "x", 2, 4)).talks
    assert compile_llvm(reduce_program()).talks


@pytest.mark.parametrize("cores", ["1", "64"])
@pytest.mark.parametrize("make", [lambda: ring_program((5,), "float64", "x", 2, 4), reduce_program],
                         ids=["native_permute", "all_reduce"])
def test_a_wrong_judgement_raises_instead_of_hanging(make, cores, monkeypatch):
    """A program that exchanges, wrongly judged not to, run rank by rank: the first rank's
    wait for its peer raises at once (the world is solo), hosted segments or not."""
    monkeypatch.setenv("SPMD_LOCAL_CORES", cores)
    monkeypatch.setenv("SPMD_COLLECTIVE_TIMEOUT", "60")
    exe = compile_llvm(make())
    exe.__dict__["_talks"] = False
    rt = LocalRuntime()
    t0 = time.monotonic()
    with pytest.raises(CollectiveError, match="one after another"):
        rt.run(exe, MESH, {d: [np.ones(5 if "ring" in exe.graph.name else 8)] for d in range(4)})
    assert time.monotonic() - t0 < 10
    # the runtime is still usable: the next run, threaded, is right
    exe.__dict__["_talks"] = True
    got = rt.run(exe, MESH, {d: [np.ones(5 if "ring" in exe.graph.name else 8)] for d in range(4)})
    assert len(got) == 4


def test_a_long_scan_is_work_enough_for_threads_and_a_while_loop_is_never_small():
    """A scan's body counts once an iteration; a while loop's trip count is unknown, so it
    never runs in turn (the caller in native code would see a Ctrl-C only after it)."""
    from spmd.ir.ops.names import COMPARE, WHILE
    short, long_ = compile_llvm(local_program()), compile_llvm(local_program())
    long_.graph.ops[-1].attrs["length"] = 100_000
    assert short.work_bytes <= local_runtime.SOLO_BYTES < long_.work_bytes
    cond, body = Graph("cond"), Graph("body")
    c = cond.add_input((), "float64")
    cond.outputs = [cond.emit(COMPARE, c, c, direction="LT")]
    b = body.add_input((), "float64")
    body.outputs = [body.emit(ADD, b, b)]
    g = Graph("loop")
    x = g.add_input((), "float64")
    g.outputs = [g.emit(WHILE, x, cond=cond, body=body, num_carry=1)]
    assert g.ops[-1].opdef.family == "control"
    from spmd.backends.executor import Executable
    e = Executable.__new__(Executable)
    e.graph = g
    assert not e.talks and e.work_bytes == float("inf")
