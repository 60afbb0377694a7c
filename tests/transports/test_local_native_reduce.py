"""All-reduces between the local runtime's threads as native instructions
(backends/llvm/exchange_reduce.py): all_reduce, and all_reduce_start / done with another
all-reduce of the same group in flight between them, in a program and inside a scan
(the counts grow run after run), on meshes 1x2, 2x1, 2x2 over one axis and both, with the
ranks on their own threads or hosted in lockstep (SPMD_LOCAL_CORES): the results are the
Python communicator's (SPMD_NATIVE=0) and a plain-numpy left fold's in group order, bit
for bit. Reductions the fold loops do not cover (floats' max) run through the
communicator. A rank that finishes early, raises, or never arrives ends the run
promptly, named."""
from __future__ import annotations

import functools
import threading
import time

import numpy as np
import pytest

from spmd.backends.llvm import compile_llvm
from spmd.errors import CollectiveError
from spmd.ir import Graph
from spmd.ir.ops.names import ADD, ALL_REDUCE, ALL_REDUCE_DONE, ALL_REDUCE_START, CONSTANT, MULTIPLY, RESHAPE, SCAN
from spmd.sharding import Mesh
from spmd.transports.local.local_runtime import LocalRuntime

RT = LocalRuntime()
FOLD = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}


def body_graph(shape, dtype, red, a1, a2, G1, G2):
    """r = all_reduce(x * 3 over a1); s = r + x; start s over a2; m = all_reduce(r over
    a1) while s is in flight; out = done(s) + m."""
    g = Graph("step")
    x = g.add_input(shape, dtype)
    a = g.emit(MULTIPLY, x, g.emit(CONSTANT, value=np.full(shape, 3, dtype)))
    r = g.emit(ALL_REDUCE, a, axes=a1, reduction=red, group_size=G1)
    s = g.emit(ADD, r, x)
    h = g.emit(ALL_REDUCE_START, s, axes=a2, reduction=red, group_size=G2)
    m = g.emit(ALL_REDUCE, r, axes=a1, reduction=red, group_size=G1)
    d = g.emit(ALL_REDUCE_DONE, h, s, axes=a2, reduction=red, group_size=G2)
    g.outputs = [g.emit(ADD, d, m)]
    return g


def in_a_scan(body, shape, dtype, length):
    g = Graph("loop")
    x = g.add_input(shape, dtype)
    g.outputs = [g.emit(SCAN, x, body=body, num_carry=1, num_xs=0, length=length, reverse=False)]
    return g


def groups(mesh, axes):
    """device -> the devices of its group over `axes`, in group order"""
    names = mesh.axis_names
    devs = np.asarray(mesh.devices)
    out = {}
    for idx in np.ndindex(devs.shape):
        sel = tuple(slice(None) if names[k] in axes else idx[k] for k in range(devs.ndim))
        line = devs[sel]
        # group order: the named axes major to minor, as the mesh lays them out
        order = [names.index(a) for a in axes]
        kept = [k for k in range(devs.ndim) if names[k] in axes]
        line = np.transpose(line, [kept.index(k) for k in order])
        out[int(devs[idx])] = [int(v) for v in line.ravel()]
    return out


def numpy_step(mesh, xs, red, a1, a2):
    f = FOLD[red]

    def allred(vals, axes):
        gs = groups(mesh, axes)
        return {d: functools.reduce(f, [vals[e] for e in gs[d]]) for d in vals}
    a = {d: x * np.asarray(3, x.dtype) for d, x in xs.items()}
    r = allred(a, a1)
    s = {d: r[d] + xs[d] for d in xs}
    done = allred(s, a2)
    m = allred(r, a1)
    return {d: done[d] + m[d] for d in xs}


CASES = {"1x2": ((1, 2), ("y",), ("y",)), "2x1": ((2, 1), ("x",), ("x",)),
         "2x2": ((2, 2), ("y",), ("x",)), "2x2 both": ((2, 2), ("x", "y"), ("y",))}


def data(rng, shape, dtype, red):
    if np.dtype(dtype).kind == "f":
        return (rng.uniform(0.3, 0.6, shape) if red == "prod" else rng.standard_normal(shape)).astype(dtype)
    hi = 3 if red == "prod" else 1000
    return rng.integers(-hi, hi, size=shape).astype(dtype)


@pytest.mark.parametrize("cores", ["1", "2", "64"])
@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("dtype,red", [("float32", "sum"), ("float64", "prod"), ("int32", "max"),
                                       ("int64", "min"), ("int64", "sum"), ("float32", "max")])
def test_native_all_reduces_equal_python_and_numpy(case, dtype, red, cores, monkeypatch):
    monkeypatch.setenv("SPMD_LOCAL_CORES", cores)
    monkeypatch.setenv("SPMD_COLLECTIVE_TIMEOUT", "60")
    mshape, a1, a2 = CASES[case]
    mesh = Mesh(mshape, ("x", "y"))
    G1, G2 = mesh.axes_size(a1), mesh.axes_size(a2)
    rng = np.random.default_rng(7)
    for shape, length in (((5, 3), 0), ((700,), 3), ((), 2)):
        body = body_graph(shape, dtype, red, a1, a2, G1, G2)
        exe = compile_llvm(body if not length else in_a_scan(body, shape, dtype, length))
        native = red != "max" or dtype != "float32"
        assert (exe.schedule(1, True, "process").only_segment() is not None) == native
        xs = {d: data(rng, shape, dtype, red) for d in range(mesh.size)}
        want = dict(xs)
        for _ in range(max(length, 1)):
            want = numpy_step(mesh, want, red, a1, a2)
        for run in range(2):      # a second run on the same world: the counts go on
            got = RT.run(exe, mesh, {d: [xs[d].copy()] for d in range(mesh.size)})
            for d in range(mesh.size):
                assert got[d][0].dtype == want[d].dtype and got[d][0].shape == want[d].shape
                np.testing.assert_array_equal(got[d][0], want[d])
        monkeypatch.setenv("SPMD_NATIVE", "0")
        stepwise = RT.run(exe, mesh, {d: [xs[d].copy()] for d in range(mesh.size)})
        monkeypatch.delenv("SPMD_NATIVE")
        for d in range(mesh.size):
            np.testing.assert_array_equal(stepwise[d][0], want[d])


def test_an_all_reduce_in_place_over_its_operand_and_a_view_operand():
    """The memory plan writes a done's result over its dying operand, and an all_reduce's
    over its own: the mailbox copy makes both safe; a reshaped (viewed) operand is read
    where it lies."""
    mesh = Mesh((1, 2), ("x", "y"))
    g = Graph("views")
    x = g.add_input((4, 6), "float64")
    a = g.emit(MULTIPLY, x, x)
    v = g.emit(RESHAPE, a, shape=(24,))
    r = g.emit(ALL_REDUCE, v, axes=("y",), reduction="sum", group_size=2)
    h = g.emit(ALL_REDUCE_START, r, axes=("y",), reduction="sum", group_size=2)
    d = g.emit(ALL_REDUCE_DONE, h, r, axes=("y",), reduction="sum", group_size=2)
    g.outputs = [g.emit(ADD, d, d)]
    exe = compile_llvm(g)
    assert exe.schedule(1, True, "process").only_segment() is not None
    xs = {d: np.arange(24.0).reshape(4, 6) * (d + 1) for d in range(2)}
    got = RT.run(exe, mesh, {d: [xs[d]] for d in range(2)})
    total = ((xs[0] * xs[0]) + (xs[1] * xs[1])).reshape(24)
    for d in range(2):
        np.testing.assert_array_equal(got[d][0], 2 * (total + total))


@pytest.mark.parametrize("cores", ["1", "64"])
def test_all_reduces_started_together_from_one_line_keep_their_own_regions(cores, monkeypatch):
    """Two all-reduces in flight at once, of one description (one op, axes and user
    line: a layer loop's gradient buckets): each has a region of its own, so neither
    reads the other's mailbox."""
    monkeypatch.setenv("SPMD_LOCAL_CORES", cores)
    monkeypatch.setenv("SPMD_COLLECTIVE_TIMEOUT", "20")
    mesh = Mesh((1, 2), ("x", "y"))
    g = Graph("buckets")
    x = g.add_input((6,), "float64")
    y = g.emit(MULTIPLY, x, x)
    hs = [g.emit(ALL_REDUCE_START, v, axes=("y",), reduction="sum", group_size=2, loc="train.py:12") for v in (x, y)]
    ds = [g.emit(ALL_REDUCE_DONE, h, v, axes=("y",), reduction="sum", group_size=2) for h, v in zip(hs, (x, y))]
    g.outputs = ds
    exe = compile_llvm(g)
    assert exe.schedule(1, True, "process").only_segment() is not None
    xs = {d: np.arange(6.0) + 10 * d for d in range(2)}
    for _ in range(2):
        got = RT.run(exe, mesh, {d: [xs[d].copy()] for d in range(2)})
        for d in range(2):
            np.testing.assert_array_equal(got[d][0], xs[0] + xs[1])
            np.testing.assert_array_equal(got[d][1], xs[0] * xs[0] + xs[1] * xs[1])


def test_a_process_that_lowers_a_program_again_notes_no_new_ops():
    """The ids a stopped native wait reports are one per description (op, axes, line):
    a process that lowers programs again and again (spmd.AUTO's search) does not grow
    its table of them."""
    from spmd.backends.llvm.exchange import note_op, noted_op
    g = body_graph((5, 3), "float64", "sum", ("y",), ("x", "y"), 2, 4)
    for op in g.ops:
        op.loc = "train.py:7"
    ids = [[note_op(op) for op in compile_llvm(g).graph.ops if "axes" in op.attrs] for _ in range(3)]
    assert ids[0] == ids[1] == ids[2]
    assert [noted_op(k)[0] for k in ids[0]] == [
        f"{op.name} over {tuple(op.attrs['axes'])} at train.py:7" for op in g.ops if "axes" in op.attrs]


@pytest.fixture
def step(monkeypatch):
    monkeypatch.setenv("SPMD_COLLECTIVE_TIMEOUT", "60")
    return compile_llvm(in_a_scan(body_graph((64,), "float64", "sum", ("y",), ("y",), 2, 2), (64,), "float64", 20))


@pytest.mark.parametrize("cores", ["1", "64"])
def test_a_rank_that_finishes_early_is_named(step, cores, monkeypatch):
    monkeypatch.setenv("SPMD_LOCAL_CORES", cores)
    mesh = Mesh((2, 2), ("x", "y"))

    def prog(inputs, comm):
        if comm.rank == 1:
            return inputs
        return step(inputs, comm)

    t0 = time.monotonic()
    with pytest.raises(CollectiveError, match=r"rank\(s\) \[1\] finished the program without"):
        RT.run(prog, mesh, {d: [np.ones(64)] for d in range(4)})
    assert time.monotonic() - t0 < 5


@pytest.mark.parametrize("cores", ["1", "64"])
def test_a_rank_that_raises_ends_the_others_promptly(step, cores, monkeypatch):
    monkeypatch.setenv("SPMD_LOCAL_CORES", cores)
    mesh = Mesh((2, 2), ("x", "y"))

    def prog(inputs, comm):
        out = step(inputs, comm)
        if comm.rank == 3:
            raise ValueError("boom on purpose")
        return step(out, comm)

    t0 = time.monotonic()
    with pytest.raises(ValueError, match="boom on purpose"):
        RT.run(prog, mesh, {d: [np.ones(64)] for d in range(4)})
    assert time.monotonic() - t0 < 5


def test_a_rank_that_never_arrives_times_out_naming_it(step, monkeypatch):
    monkeypatch.setenv("SPMD_COLLECTIVE_TIMEOUT", "0.3")
    monkeypatch.setenv("SPMD_LOCAL_CORES", "64")
    mesh = Mesh((1, 2), ("x", "y"))
    release = threading.Event()

    def prog(inputs, comm):
        if comm.rank == 1:
            release.wait(10)
        return step(inputs, comm)

    t0 = time.monotonic()
    with pytest.raises(CollectiveError, match=r"all_reduce.*timed out after 0.3 s waiting for rank\(s\) \[1\]"):
        RT.run(prog, mesh, {d: [np.ones(64)] for d in range(2)})
    assert time.monotonic() - t0 < 3
    release.set()
    want = {d: np.ones(64) for d in range(2)}
    for _ in range(20):
        want = numpy_step(mesh, want, "sum", ("y",), ("y",))
    got = RT.run(step, mesh, {d: [np.ones(64)] for d in range(2)})
    np.testing.assert_array_equal(got[1][0], want[1])


def test_a_dropped_programs_shared_memory_goes_with_it():
    """The group keeps a native all-reduce's region as long as the schedule that asked
    for it: a long-lived world does not collect the mailboxes of every program run on it.
    The group's all-reduces share one region, the started one has its own."""
    import gc
    mesh = Mesh((1, 2), ("x", "y"))
    rt = LocalRuntime()
    worlds = []
    exe = compile_llvm(body_graph((1000,), "float64", "sum", ("y",), ("y",), 2, 2))

    def prog(inputs, comm):
        worlds.append(comm.world)
        return exe(inputs, comm)
    rt.run(prog, mesh, {d: [np.ones(1000)] for d in range(2)})
    shared = worlds[0].group((0, 1)).shared
    regions = next(iter(shared.values()))
    assert len(shared) == 1 and len(regions) == 2 and all(x.nbytes >= 2 * 8000 for x in regions.values())
    del exe, prog
    gc.collect()
    assert len(shared) == 0
