"""all_gather and reduce_scatter between the local runtime's threads as native
instructions (backends/llvm/exchange_reduce.py): along every dimension (the rows before
it copied or folded one by one), every dtype a gather copies and every reduction the
fold loops cover, in a program and inside a scan (the counts grow run after run), on
meshes 1x2, 2x1, 2x2 over one axis and both, and 4, with the ranks on their own threads
or hosted in lockstep (SPMD_LOCAL_CORES): the whole program is one native segment and
its results are numpy's concatenation and left fold in group order, and the Python
communicator's (SPMD_NATIVE=0), bit for bit. What the native code leaves to Python (a
reduction the fold loops do not cover, an operand that is a strided view) still runs,
right. A rank that raises, finishes early or never arrives ends the run promptly,
named."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collective_checks import independent_collectives, overwritten_operand, reduce_in_order as fold_in_order, value
from spmd.backends.llvm import compile_llvm
from spmd.errors import CollectiveError
from spmd.ir import Graph
from spmd.ir.ops.names import ADD, ALL_GATHER, CONSTANT, MULTIPLY, REDUCE_SCATTER, SCAN, TRANSPOSE
from spmd.sharding import Mesh
from spmd.transports.local.local_runtime import LocalRuntime

RT = LocalRuntime()
MESHES = {"1x2": ((1, 2), ("x", "y")), "2x1": ((2, 1), ("x", "y")), "2x2": ((2, 2), ("x", "y")),
          "4": ((4,), ("x",))}
AXES = {"1x2": [("y",)], "2x1": [("x",)], "2x2": [("y",), ("x",), ("x", "y"), ("y", "x")], "4": [("x",)]}
# reductions the fold loops cover (exchange_ir.REDUCE_KINDS), and some they do not
NATIVE_REDUCTIONS = [("float32", "sum"), ("float64", "prod"), ("int32", "max"), ("int64", "min"),
                     ("int64", "sum"), ("int32", "prod")]
PYTHON_REDUCTIONS = [("float32", "max"), ("float16", "sum"), ("bool", "sum"), ("int8", "sum")]


def reduce_in_order(red, xs):
    """The left fold in group order; 2-byte floats' sums and products in float32,
    rounded once (communicator.reduce_arrays)"""
    if xs[0].dtype == np.float16 and red in ("sum", "prod"):
        return fold_in_order(red, [x.astype(np.float32) for x in xs]).astype(np.float16)
    return fold_in_order(red, xs)


def gather_scatter_graph(shape, dtype, axes, G, dim, red):
    """g = all_gather(x * 3 along dim) (x itself if bool); s = reduce_scatter(g along dim):
    both results"""
    g = Graph("step")
    x = g.add_input(shape, dtype)
    a = x if dtype == "bool" else g.emit(MULTIPLY, x, g.emit(CONSTANT, value=np.full(shape, 3, dtype)))
    gat = g.emit(ALL_GATHER, a, axes=axes, dimension=dim, group_size=G)
    g.outputs = [gat, g.emit(REDUCE_SCATTER, gat, axes=axes, dimension=dim, reduction=red, group_size=G)]
    return g


def scan_graph(shape, dtype, axes, G, dim, red, length):
    """a scan whose body is c -> reduce_scatter(all_gather(c) * 3) + c"""
    body = Graph("body")
    c = body.add_input(shape, dtype)
    gat = body.emit(ALL_GATHER, c, axes=axes, dimension=dim, group_size=G)
    big = list(shape)
    big[dim] *= G
    m = body.emit(MULTIPLY, gat, body.emit(CONSTANT, value=np.full(big, 3, dtype)))
    body.outputs = [body.emit(ADD, body.emit(REDUCE_SCATTER, m, axes=axes, dimension=dim, reduction=red,
                                             group_size=G), c)]
    g = Graph("loop")
    x = g.add_input(shape, dtype)
    g.outputs = [g.emit(SCAN, x, body=body, num_carry=1, num_xs=0, length=length, reverse=False)]
    return g


def numpy_gather_scatter(mesh, xs, axes, dim, red):
    G = mesh.axes_size(axes)
    a = {d: x if x.dtype == bool else x * np.asarray(3, x.dtype) for d, x in xs.items()}
    gat = {d: np.concatenate([a[e] for e in mesh.group(d, axes)], axis=dim) for d in xs}
    out = {}
    for d in xs:
        i = mesh.index_in_group(d, axes)
        out[d] = reduce_in_order(red, [np.split(gat[e], G, axis=dim)[i] for e in mesh.group(d, axes)])
    return gat, out


def numpy_scan(mesh, xs, axes, dim, red, length):
    G = mesh.axes_size(axes)
    c = dict(xs)
    for _ in range(length):
        gat = {d: np.concatenate([c[e] for e in mesh.group(d, axes)], axis=dim) * np.asarray(3, c[d].dtype)
               for d in c}
        c = {d: reduce_in_order(red, [np.split(gat[e], G, axis=dim)[mesh.index_in_group(d, axes)]
                                      for e in mesh.group(d, axes)]) + c[d] for d in c}
    return c


def data(dev, shape, dtype, red):
    if red == "prod" and np.dtype(dtype).kind in "iu":
        return np.random.default_rng(dev).integers(-3, 3, shape).astype(dtype)
    if red == "prod":
        return np.random.default_rng(dev).uniform(0.3, 0.6, shape).astype(dtype)
    return value(dev, shape, dtype)


def run_both(exe, mesh, xs, monkeypatch):
    """(native run, the same run from Python) of exe"""
    got = RT.run(exe, mesh, {d: [xs[d].copy()] for d in range(mesh.size)})
    monkeypatch.setenv("SPMD_NATIVE", "0")
    stepwise = RT.run(exe, mesh, {d: [xs[d].copy()] for d in range(mesh.size)})
    monkeypatch.delenv("SPMD_NATIVE")
    return got, stepwise


def same_bits(got, want):
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape, want.dtype, want.shape)
    assert got.tobytes() == want.tobytes(), (got, want)


def check(mesh_name, axes, shape, dim, dtype, red, monkeypatch, native=True):
    mesh = Mesh(*MESHES[mesh_name])
    G = mesh.axes_size(axes)
    exe = compile_llvm(gather_scatter_graph(shape, dtype, axes, G, dim, red))
    assert (exe.schedule(1, True, "process").only_segment() is not None) == native
    xs = {d: data(d, shape, dtype, red) for d in range(mesh.size)}
    gat, scat = numpy_gather_scatter(mesh, xs, axes, dim, red)
    for run in range(2):          # a second run on the same world: the counts go on
        got, stepwise = run_both(exe, mesh, xs, monkeypatch)
        for d in range(mesh.size):
            for res in (got[d], stepwise[d]):
                same_bits(res[0], gat[d])
                same_bits(res[1], scat[d])


@pytest.mark.parametrize("cores", ["1", "2", "64"])
@pytest.mark.parametrize("mesh_name", sorted(MESHES))
@pytest.mark.parametrize("dtype,red", NATIVE_REDUCTIONS)
def test_native_gathers_and_scatters_equal_python_and_numpy(mesh_name, dtype, red, cores, monkeypatch):
    monkeypatch.setenv("SPMD_LOCAL_CORES", cores)
    monkeypatch.setenv("SPMD_COLLECTIVE_TIMEOUT", "60")
    for axes in AXES[mesh_name]:
        G = Mesh(*MESHES[mesh_name]).axes_size(axes)
        # along dim 0, along a later dim with rows before it, with a leading 1, 3-D
        for shape, dim in (((2 * G, 3), 0), ((3, 2 * G), 1), ((1, G, 5), 1), ((2, 3, G), 2), ((G,), 0)):
            check(mesh_name, axes, shape, dim, dtype, red, monkeypatch)


@pytest.mark.parametrize("dtype", ["bool", "float16", "int8", "uint16", "complex128", "float64"])
def test_a_gather_of_any_dtype_is_native(dtype, monkeypatch):
    """A gather copies bytes: every dtype gathers natively. (The program's reduce-scatter
    of the gathered value sums it: natively where the fold loops cover the dtype.)"""
    monkeypatch.setenv("SPMD_COLLECTIVE_TIMEOUT", "60")
    mesh = Mesh(*MESHES["2x2"])
    for shape, dim in (((4, 3), 0), ((3, 2), 1)):
        g = Graph("gather")
        x = g.add_input(shape, dtype)
        g.outputs = [g.emit(ALL_GATHER, x, axes=("x", "y"), dimension=dim, group_size=4)]
        exe = compile_llvm(g)
        assert exe.schedule(1, True, "process").only_segment() is not None
        xs = {d: value(d, shape, dtype) for d in range(4)}
        got, stepwise = run_both(exe, mesh, xs, monkeypatch)
        want = np.concatenate([xs[e] for e in range(4)], axis=dim)
        for d in range(4):
            same_bits(got[d][0], want)
            same_bits(stepwise[d][0], want)


@pytest.mark.parametrize("dtype,red", PYTHON_REDUCTIONS)
def test_a_reduction_the_fold_loops_do_not_cover_runs_from_python(dtype, red, monkeypatch):
    monkeypatch.setenv("SPMD_COLLECTIVE_TIMEOUT", "60")
    check("2x2", ("x", "y"), (3, 8), 1, dtype, red, monkeypatch, native=False)
    check("1x2", ("y",), (4,), 0, dtype, red, monkeypatch, native=False)


@pytest.mark.parametrize("dtype,native", [("float64", True), ("int32", True), ("int8", True),
                                          ("complex128", False), ("float16", False)])
def test_a_strided_operand_is_copied_into_the_mailbox(dtype, native, monkeypatch):
    """A transposed input is a view the native code reads where it lies, strided: the
    post gathers it into the mailbox (a copy loop of 1, 4 or 8-byte elements); other
    sizes run through the communicator. Right either way."""
    monkeypatch.setenv("SPMD_COLLECTIVE_TIMEOUT", "60")
    mesh = Mesh(*MESHES["2x2"])
    axes = ("x", "y")
    for op, attrs in ((ALL_GATHER, {}), (REDUCE_SCATTER, {"reduction": "sum"})):
        for dim in (0, 1):
            g = Graph("strided")
            x = g.add_input((4, 8), dtype)
            t = g.emit(TRANSPOSE, x, permutation=(1, 0))
            g.outputs = [g.emit(op, t, axes=axes, dimension=dim, group_size=4, **attrs)]
            exe = compile_llvm(g)
            red_native = op == ALL_GATHER or dtype in ("float64", "int32")
            assert (exe.schedule(1, True, "process").only_segment() is not None) == (native and red_native)
            xs = {d: value(d, (4, 8), dtype) for d in range(4)}
            got, stepwise = run_both(exe, mesh, xs, monkeypatch)
            ts = [xs[e].T for e in mesh.group(0, axes)]
            for d in range(4):
                i = mesh.index_in_group(d, axes)
                want = np.concatenate(ts, axis=dim) if op == ALL_GATHER else \
                    np.split(reduce_in_order("sum", ts), 4, axis=dim)[i]
                same_bits(got[d][0], want)
                same_bits(stepwise[d][0], want)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mesh_name=st.sampled_from(sorted(MESHES)), draw=st.data())
def test_gathers_and_scatters_of_any_shape_equal_numpy(mesh_name, draw, monkeypatch):
    axes = draw.draw(st.sampled_from(AXES[mesh_name]))
    G = Mesh(*MESHES[mesh_name]).axes_size(axes)
    shape = draw.draw(st.lists(st.integers(0, 3), min_size=1, max_size=3))
    dim = draw.draw(st.integers(0, len(shape) - 1))
    shape[dim] *= G           # the reduce-scatter of the gather splits it; and the gather's operand
    dtype, red = draw.draw(st.sampled_from(NATIVE_REDUCTIONS + PYTHON_REDUCTIONS))
    check(mesh_name, axes, tuple(shape), dim, dtype, red, monkeypatch,
          native=(dtype, red) in NATIVE_REDUCTIONS)


@pytest.mark.parametrize("cores", ["1", "64"])
@pytest.mark.parametrize("dim", [0, 1])
def test_in_a_scan_the_counts_go_on(dim, cores, monkeypatch):
    monkeypatch.setenv("SPMD_LOCAL_CORES", cores)
    monkeypatch.setenv("SPMD_COLLECTIVE_TIMEOUT", "60")
    mesh = Mesh(*MESHES["2x2"])
    for axes in (("y",), ("x", "y")):
        exe = compile_llvm(scan_graph((4, 6), "float64", axes, mesh.axes_size(axes), dim, "sum", 5))
        assert exe.schedule(1, True, "process").only_segment() is not None
        xs = {d: value(d, (4, 6), "float64") for d in range(4)}
        want = numpy_scan(mesh, xs, axes, dim, "sum", 5)
        for _ in range(2):
            got, stepwise = run_both(exe, mesh, xs, monkeypatch)
            for d in range(4):
                same_bits(got[d][0], want[d])
                same_bits(stepwise[d][0], want[d])


@pytest.fixture
def step(monkeypatch):
    monkeypatch.setenv("SPMD_COLLECTIVE_TIMEOUT", "60")
    exe = compile_llvm(scan_graph((8, 6), "float64", ("y",), 2, 1, "sum", 20))
    assert exe.schedule(1, True, "process").only_segment() is not None     # (its waits are native)
    return exe


@pytest.mark.parametrize("cores", ["1", "64"])
def test_a_rank_that_raises_ends_the_others_promptly(step, cores, monkeypatch):
    monkeypatch.setenv("SPMD_LOCAL_CORES", cores)
    mesh = Mesh(*MESHES["2x2"])

    def prog(inputs, comm):
        out = step(inputs, comm)
        if comm.rank == 3:
            raise ValueError("boom on purpose")
        return step(out, comm)

    t0 = time.monotonic()
    with pytest.raises(ValueError, match="boom on purpose"):
        RT.run(prog, mesh, {d: [np.ones((8, 6))] for d in range(4)})
    assert time.monotonic() - t0 < 5


@pytest.mark.parametrize("cores", ["1", "64"])
def test_a_rank_that_finishes_early_is_named(step, cores, monkeypatch):
    monkeypatch.setenv("SPMD_LOCAL_CORES", cores)
    mesh = Mesh(*MESHES["2x2"])

    def prog(inputs, comm):
        if comm.rank == 1:
            return inputs
        return step(inputs, comm)

    t0 = time.monotonic()
    with pytest.raises(CollectiveError, match=r"rank\(s\) \[1\] finished the program without") as e:
        RT.run(prog, mesh, {d: [np.ones((8, 6))] for d in range(4)})
    assert time.monotonic() - t0 < 5
    # (hosted in lockstep, the host notices before the native code: it names the segment)
    assert ("all_gather over ('y',)" if cores == "64" else "a native segment") in str(e.value), e.value


def test_a_rank_that_never_arrives_times_out_naming_it(step, monkeypatch):
    monkeypatch.setenv("SPMD_COLLECTIVE_TIMEOUT", "0.3")
    monkeypatch.setenv("SPMD_LOCAL_CORES", "64")
    mesh = Mesh(*MESHES["1x2"])
    release = threading.Event()

    def prog(inputs, comm):
        if comm.rank == 1:
            release.wait(10)
        return step(inputs, comm)

    t0 = time.monotonic()
    with pytest.raises(CollectiveError, match=r"all_gather.*timed out after 0.3 s waiting for rank\(s\) \[1\]"):
        RT.run(prog, mesh, {d: [np.ones((8, 6))] for d in range(2)})
    assert time.monotonic() - t0 < 3
    release.set()
    xs = {d: np.ones((8, 6)) for d in range(2)}
    want = numpy_scan(mesh, xs, ("y",), 1, "sum", 20)
    got = RT.run(step, mesh, {d: [xs[d].copy()] for d in range(2)})
    same_bits(got[1][0], want[1])


@pytest.mark.parametrize("cores", ["1", "64"])
def test_a_groups_collectives_share_one_region_in_their_order(cores, monkeypatch):
    """Independent gathers, reduce-scatters and all-reduces of one group, of different
    sizes: they share one region whose slots fit the largest mailbox, each posted only
    once the one before was read (the segment keeps their halves in order: posted
    together, each would wait for reads that come after it)."""
    from spmd.ir.ops.names import ALL_REDUCE
    monkeypatch.setenv("SPMD_LOCAL_CORES", cores)
    monkeypatch.setenv("SPMD_COLLECTIVE_TIMEOUT", "20")
    mesh = Mesh(*MESHES["2x2"])
    axes = ("y",)
    sched, xs, ys, run = independent_collectives(lambda g, x, y: [
        g.emit(ALL_GATHER, x, axes=axes, dimension=1, group_size=2),
        g.emit(ALL_GATHER, y, axes=axes, dimension=0, group_size=2),
        g.emit(REDUCE_SCATTER, x, axes=axes, dimension=0, reduction="sum", group_size=2),
        g.emit(ALL_REDUCE, y, axes=axes, reduction="sum", group_size=2),
        g.emit(REDUCE_SCATTER, x, axes=("x", "y"), dimension=0, reduction="sum", group_size=4)], RT, mesh)
    assert sched.only_segment() is not None
    assert sorted(sched.slot_bytes) == [("group", ("x", "y")), ("group", ("y",))]
    # (the all-reduce's mailbox, rounded to a cache line: the gathers and reduce-scatters
    # read their operands where they lie)
    assert sched.slot_bytes == {("group", ("y",)): 128 + 128, ("group", ("x", "y")): 128}
    for _ in range(2):
        got = run()
        for d in range(4):
            grp, i = mesh.group(d, axes), mesh.index_in_group(d, axes)
            both = mesh.group(d, ("x", "y"))
            want = [np.concatenate([xs[e] for e in grp], axis=1), np.concatenate([ys[e] for e in grp], axis=0),
                    np.split(reduce_in_order("sum", [xs[e] for e in grp]), 2, axis=0)[i],
                    reduce_in_order("sum", [ys[e] for e in grp]),
                    np.split(reduce_in_order("sum", [xs[e] for e in both]), 4, axis=0)[mesh.index_in_group(d, ("x", "y"))]]
            for r, w in zip(got[d], want):
                same_bits(r, w)


@pytest.mark.parametrize("kind", [ALL_GATHER, REDUCE_SCATTER])
def test_an_operand_read_where_it_lies_is_not_written_before_every_member_read_it(kind, monkeypatch):
    """The operand of a gather or reduce-scatter between threads is read by the other
    members where it lies; the kernel right after writes over it (x * 3 dies there, and
    its product with 5 takes its buffer). Each member waits (the drain) until every other
    has read it: without that wait, about half the runs of this test read a block the
    kernel had already written (checked by leaving the drain out)."""
    monkeypatch.setenv("SPMD_LOCAL_CORES", "64")
    monkeypatch.setenv("SPMD_COLLECTIVE_TIMEOUT", "20")
    mesh = Mesh(*MESHES["4"])
    shape = (64, 4096)
    attrs = dict(reduction="sum") if kind == REDUCE_SCATTER else {}
    exe = overwritten_operand(kind, shape, axes=("x",), dimension=0, group_size=4, **attrs)
    assert exe.schedule(1, True, "process").only_segment() is not None
    xs = {d: value(d, shape, "float32") for d in range(4)}
    a3 = [xs[d] * np.float32(3) for d in range(4)]
    gat, scat = np.concatenate(a3), reduce_in_order("sum", a3)
    for _ in range(20):
        got = RT.run(exe, mesh, {d: [xs[d].copy()] for d in range(4)})
        for d in range(4):
            same_bits(got[d][0], gat if kind == ALL_GATHER else scat[16 * d:16 * d + 16])
            same_bits(got[d][1], a3[d] * np.float32(5))
