"""The local runtime, spmd.init and jit's run step (runtime/execute.py).

execute() is driven here by hand-built per-device programs holding collectives, declared
as the runtime takes them (`fake_program`: a runtime Program from the traced global
graph's shapes, the per-device graph, the mesh and the per-leaf shardings), so it is
tested without the partitioner.
"""
from __future__ import annotations

import threading

import numpy as np
import pytest

import spmd
from spmd.backends import compile_graph
from spmd.errors import SpmdError
from spmd.ir import Graph
from spmd.ir.graph import Value
from spmd.ir.ops.names import (
    ADD, ALL_GATHER, ALL_REDUCE, AXIS_INDEX, BROADCAST_IN_DIM, COMPARE, CONSTANT, IOTA, MULTIPLY,
    NEGATE, REDUCE, RESHAPE, SELECT, SLICE
)
from spmd.runtime import current_runtime as rinit
from spmd.runtime.execute import execute as run_program
from spmd.runtime.program import make_program
from spmd.transports.local.local_runtime import LocalRuntime
from spmd.sharding import Mesh, Sharding


@pytest.fixture
def fresh_runtime():
    """Let a test call spmd.init; put the previous runtime back afterwards."""
    before = rinit._runtime
    rinit._runtime = None
    yield
    rt = rinit._runtime
    if rt is not None and rt is not before:
        rt.shutdown()
    rinit._runtime = before


# ----------------------------------------------------------------------- LocalRuntime
def test_run_gives_each_device_its_inputs_and_a_thread():
    rt = LocalRuntime()
    mesh = Mesh((2, 3), ("a", "b"))
    seen = {}

    def prog(inputs, comm):
        seen[comm.rank] = threading.current_thread().name
        return [inputs[0] * 10 + comm.rank, comm.group_index(("b",))]

    out = rt.run(prog, mesh, {d: [np.float64(d)] for d in range(6)})
    assert sorted(out) == list(range(6))
    assert all(out[d][0] == 11 * d and out[d][1] == d % 3 for d in range(6))
    assert len(set(seen.values())) == 6          # one thread per device
    assert rt.local_devices(mesh) == list(range(6)) and rt.get({0: 1}) == {0: 1}


def test_run_needs_inputs_for_every_device():
    with pytest.raises(SpmdError, match=r"no inputs for device\(s\) \[1\]"):
        LocalRuntime().run(lambda i, c: [], Mesh((2,), ("x",)), {0: []})


def test_runs_are_independent_after_a_failure():
    """A failed run leaves nothing behind: the next run's collectives start clean."""
    rt = LocalRuntime()
    mesh = Mesh((3,), ("x",))

    def bad(inputs, comm):
        if comm.rank == 0:
            raise KeyError("first")
        return [comm.all_reduce(inputs[0], ("x",))]

    for _ in range(3):
        with pytest.raises(KeyError):
            rt.run(bad, mesh, {d: [np.ones(1)] for d in range(3)})
        out = rt.run(lambda i, c: [c.all_reduce(i[0], ("x",))], mesh, {d: [np.ones(1)] for d in range(3)})
        assert all(out[d][0][0] == 3 for d in range(3))


def test_a_rank_whose_results_cannot_be_read_fails_the_run_and_the_next_runs():
    """A rank's program that returns something that is not a sequence of outputs fails on
    its worker after the program returned: that is the run's error, reported, never a
    caller left waiting for the rank (its report went missing, and the run hung)."""
    rt = LocalRuntime()
    mesh = Mesh((2,), ("x",))

    def odd(inputs, comm):
        return 7 if comm.rank == 1 else [inputs[0]]

    with pytest.raises(TypeError, match="not iterable"):
        rt.run(odd, mesh, {d: [np.ones(1)] for d in range(2)})
    out = rt.run(lambda i, c: [c.all_reduce(i[0], ("x",))], mesh, {d: [np.ones(1)] for d in range(2)})
    assert all(out[d][0][0] == 2 for d in range(2))


def test_a_rank_that_never_reports_is_an_error_naming_it():
    """Were a rank's task lost (its worker idle, nothing queued, no report), the run raises
    an error naming the rank within seconds instead of waiting for it forever."""
    rt = LocalRuntime()
    mesh = Mesh((2,), ("x",))
    rt.run(lambda i, c: [i[0]], mesh, {d: [np.ones(1)] for d in range(2)})
    dropped = rt._workers[1]
    dropped.tasks.put = lambda task: None          # the task handed to rank 1 vanishes
    with pytest.raises(SpmdError, match=r"rank\(s\) \[1\] of .* never reported a result: their device thread is idle"):
        rt.run(lambda i, c: [i[0]], mesh, {d: [np.ones(1) * 2] for d in range(2)})
    assert 1 not in rt._workers or rt._workers[1] is not dropped      # retired: a new worker serves rank 1
    out = rt.run(lambda i, c: [c.all_reduce(i[0], ("x",))], mesh, {d: [np.ones(1)] for d in range(2)})
    assert all(out[d][0][0] == 2 for d in range(2))


@pytest.mark.timeout(60)
def test_a_start_no_rank_finished_does_not_stall_the_next_run_on_the_mesh():
    """A run whose ranks start an all_reduce and return without waiting for it ends clean;
    its world serves the next run on the mesh, whose ranks count their starts from 0 again.
    The flight left behind must not be taken for the next run's first (it was: its count
    of arrivals was already full, so the next run's first started all_reduce waited
    forever)."""
    rt = LocalRuntime()
    mesh = Mesh((2,), ("x",))
    rt.run(lambda i, c: [np.asarray(c.all_reduce_start(i[0], ("x",)))], mesh, {d: [np.ones(1)] for d in range(2)})
    out = rt.run(lambda i, c: [c.wait(c.all_reduce_start(i[0] * (c.rank + 1), ("x",)))], mesh,
                 {d: [np.ones(1)] for d in range(2)})
    assert all(out[d][0][0] == 3 for d in range(2))


@pytest.mark.timeout(60)
def test_ranks_that_wait_for_each_other_in_a_cycle_are_a_deadlock_error_not_a_hang(monkeypatch):
    """On a 2x2 mesh, ranks 0 and 3 reduce over "a" then "b", ranks 1 and 2 over "b" then
    "a": each waits for a rank that waits for another, in a cycle. The run raises an error
    naming every rank's wait, and the next run on the mesh is clean."""
    from spmd.errors import CollectiveError
    from spmd.transports.local import local_runtime
    monkeypatch.setattr(local_runtime, "DEADLOCK_SECONDS", 0.5)
    rt = LocalRuntime()
    mesh = Mesh((2, 2), ("a", "b"))

    def crossed(inputs, comm):
        first, second = (("a",), ("b",)) if comm.rank in (0, 3) else (("b",), ("a",))
        x = comm.all_reduce(inputs[0], first)
        return [comm.all_reduce(x, second)]

    with pytest.raises(CollectiveError, match=r"a deadlock: .*rank 0 in all_reduce over \('a',\).*"
                                              r"rank 1 in all_reduce over \('b',\)"):
        rt.run(crossed, mesh, {d: [np.ones(1)] for d in range(4)})
    out = rt.run(lambda i, c: [c.all_reduce(i[0], ("a", "b"))], mesh, {d: [np.ones(1)] for d in range(4)})
    assert all(out[d][0][0] == 4 for d in range(4))


# ----------------------------------------------------------------------- init
def test_init_and_process_queries(fresh_runtime, monkeypatch):
    monkeypatch.delenv("SPMD_BACKEND", raising=False)
    rt = spmd.init()
    assert rt.name == "local" and spmd.init() is rt
    assert spmd.process_index() == 0 and spmd.process_count() == 1
    assert spmd.device_count() == rt.num_devices >= 1
    rt3 = spmd.init(num_devices=3)
    assert spmd.device_count() == 3 and spmd.init(backend="local") is rt3 and spmd.init() is rt3
    with pytest.raises(SpmdError, match="unknown backend 'nccl'"):
        spmd.init(backend="nccl")
    with pytest.raises(SpmdError, match="positive int"):
        spmd.init(num_devices=0)
    monkeypatch.setenv("SPMD_BACKEND", "bogus")
    assert rinit.detect_backend() == "bogus"


def test_default_runtime_without_init(fresh_runtime):
    a = spmd.device_put(np.arange(4.0), Mesh((2,), ("x",)).sharding("x"))
    assert rinit._runtime is not None and a._runtime is rinit._runtime


# ----------------------------------------------------------------------- execute
class Calls(list):
    """The (rank, inputs) of every per-device run of a fake program."""


def fake_program(mesh, global_in, in_shardings, global_out, out_shardings, local_graph):
    """A runtime Program (runtime/program.py) as jit declares one; its `calls` record each
    device's run."""
    g = Graph("fake")
    for shape, dt in global_in:
        g.add_input(shape, dt)
    g.outputs = [Value(shape, dt) for shape, dt in global_out]
    exe = compile_graph(local_graph)
    calls = Calls()

    def run(inputs, comm=None):
        calls.append((comm.rank if comm else None, list(inputs)))
        return exe(inputs, comm)
    return make_program("fake", run, mesh, g, local_graph, in_shardings, out_shardings), calls


def execute(program_and_calls, leaves):
    """runtime.execute on the current runtime."""
    return run_program(program_and_calls[0], leaves, rinit.get_runtime())


def column_sums_program(local_rows, cols, n_rows, G):
    """x {x,_} (local rows padded) -> (x gathered [n_rows, cols] replicated,
    column sums replicated, 2*x {x,_}, this device's index {x})."""
    g = Graph("colsum")
    x = g.add_input((local_rows, cols), "float32")
    gathered = g.emit(ALL_GATHER, x, axes=("x",), dimension=0, group_size=G)
    gathered = g.emit(SLICE, gathered, start=(0, 0), limit=(n_rows, cols), stride=(1, 1))
    # padding is unspecified in general: mask rows past the end before summing
    io = g.emit(IOTA, shape=(local_rows, cols), dtype="int64", dimension=0)
    start = g.emit(MULTIPLY, g.emit(AXIS_INDEX, axes=("x",)), g.emit(CONSTANT, value=np.array(local_rows, np.int64)))
    pos = g.emit(ADD, io, g.emit(BROADCAST_IN_DIM, start, shape=(local_rows, cols), broadcast_dimensions=()))
    inside = g.emit(COMPARE, pos, g.emit(BROADCAST_IN_DIM, g.emit(CONSTANT, value=np.array(n_rows, np.int64)),
                                           shape=(local_rows, cols), broadcast_dimensions=()), direction="LT")
    zeros = g.emit(BROADCAST_IN_DIM, g.emit(CONSTANT, value=np.array(0, np.float32)), shape=(local_rows, cols),
                   broadcast_dimensions=())
    part = g.emit(REDUCE, g.emit(SELECT, inside, x, zeros), kind="sum", axes=(0,))
    sums = g.emit(ALL_REDUCE, part, axes=("x",), reduction="sum", group_size=G)
    twice = g.emit(ADD, x, x)
    idx = g.emit(RESHAPE, g.emit(AXIS_INDEX, axes=("x",)), shape=(1,))
    g.outputs = [gathered, sums, twice, idx]
    return g


@pytest.mark.parametrize("n_rows", [8, 7, 2])
def test_execute_on_a_mesh(n_rows):
    mesh = Mesh((4,), ("x",))
    row = mesh.sharding("x", None)
    rep = mesh.sharding(None, None)
    cols = 3
    local_rows = -(-n_rows // 4)
    low = fake_program(mesh, [((n_rows, cols), "float32")], [row],
                      [((n_rows, cols), "float32"), ((cols,), "float32"), ((n_rows, cols), "float32"),
                       ((4,), "int64")],
                      [rep, mesh.sharding(None, partial="x"), row, mesh.sharding("x")],
                      column_sums_program(local_rows, cols, n_rows, 4))
    x = np.arange(n_rows * cols, dtype=np.float32).reshape(n_rows, cols)
    for arg in (x, spmd.device_put(x, row), spmd.device_put(x, rep), spmd.device_put(x, mesh.sharding(None, "x"))):
        outs = execute(low, [arg])
        assert all(isinstance(o, spmd.Array) for o in outs)
        gathered, sums, twice, idx = outs
        assert gathered.sharding == rep and np.array_equal(gathered.numpy(), x)
        assert sums.sharding == mesh.sharding(None) and np.array_equal(sums.numpy(), x.sum(0))
        assert twice.sharding == row and np.array_equal(np.asarray(twice), 2 * x)
        assert np.array_equal(idx.numpy(), np.arange(4))
        if isinstance(arg, spmd.Array) and arg.sharding == row:
            # an Array already split as the program wants is handed over as it is
            assert all(inputs[0] is arg._handles[d] for d, inputs in low[1][-4:])
        assert sorted(d for d, _ in low[1][-4:]) == [0, 1, 2, 3]
    # results feed the next call without a copy
    outs2 = execute(low, [twice])
    assert all(inputs[0] is twice._handles[d] for d, inputs in low[1][-4:])
    assert np.array_equal(outs2[2].numpy(), 4 * x)


def test_execute_places_scalars_and_none_shardings():
    mesh = Mesh((2, 2), ("x", "y"))
    g = Graph("scale")
    x = g.add_input((2, 3), "float64")
    s = g.add_input((), "float64")
    y = g.emit(MULTIPLY, x, g.emit(BROADCAST_IN_DIM, s, shape=(2, 3), broadcast_dimensions=()))
    g.outputs = [g.emit(ALL_REDUCE, y, axes=("y",), reduction="max", group_size=2)]
    low = fake_program(mesh, [((4, 3), "float64"), ((), "float64")], [mesh.sharding("x", None), None],
                      [((4, 3), "float64")], [mesh.sharding("x", None)], g)
    x = np.arange(12.0).reshape(4, 3)
    (out,) = execute(low, [x, 2.5])
    assert np.array_equal(out.numpy(), 2.5 * x)
    assert float(spmd.device_put(out, mesh.sharding())[1, 1]) == 10.0


def test_execute_without_a_mesh_is_numpy_in_numpy_out():
    g = Graph("f")
    x = g.add_input((3,), "float32")
    g.outputs = [g.emit(NEGATE, x)]
    low = fake_program(None, [((3,), "float32")], [None], [((3,), "float32")], [None], g)
    a = spmd.device_put(np.arange(3, dtype=np.float32), Mesh((2,), ("x",)).sharding("x"))
    for arg in (np.arange(3, dtype=np.float32), [0, 1, 2], a):
        (out,) = execute(low, [arg])
        assert type(out) is np.ndarray and np.array_equal(out, -np.arange(3, dtype=np.float32))


def test_execute_reports_the_failing_rank():
    mesh = Mesh((2,), ("x",))
    g = Graph("bad")
    x = g.add_input((2,), "float32")
    g.outputs = [g.emit(ALL_REDUCE, x, axes=("x",), reduction="sum", group_size=4)]   # wrong group size
    low = fake_program(mesh, [((4,), "float32")], [mesh.sharding("x")], [((4,), "float32")],
                      [mesh.sharding("x")], g)
    with pytest.raises(SpmdError, match=r"rank \d: all_reduce .*groups of 4 devices"):
        execute(low, [np.ones(4, np.float32)])


def test_a_program_is_checked_against_its_local_shapes():
    """Declaring the Program (before any run) checks each split against the per-device
    program's shapes."""
    mesh = Mesh((2,), ("x",))
    g = Graph("f")
    x = g.add_input((3,), "float32")                  # wrong: (4,) split over 2 is (2,)
    g.outputs = [x]
    with pytest.raises(SpmdError, match=r"local shape \[2\], the per-device program takes \[3\]"):
        fake_program(mesh, [((4,), "float32")], [mesh.sharding("x")], [((4,), "float32")],
                     [mesh.sharding("x")], g)
    assert Sharding(mesh, ("x",)).local_shape((4,)) == (2,)
