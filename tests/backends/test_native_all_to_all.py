"""all_to_all between the local runtime's threads as native instructions
(backends/llvm/exchange_reduce.py all_to_all_instrs): where the operand's blocks along
the split dim are rows a reader takes, the all-gather's copy reads this member's block of
every member's operand where it lies; else each block is read there by a strided copy;
between Ray's processes of one host (a schedule of scope "host", built here; run in
tests/transports/test_ray_driver_rank.py) the post lays the blocks out in the region's
mailbox. For split dims before, at and after the concatenated one, 1-D to 7-D operands,
transposed (strided) operands, groups of 2 and 4 (a 2x2 mesh over one axis and both),
every dtype's bytes, with the ranks on their own threads or hosted in lockstep
(SPMD_LOCAL_CORES): the whole program is one native segment, no rank meets the others
from Python (the communicator's all_to_all is never called), and the results are
numpy's split-and-concatenate in group order and the Python communicator's
(SPMD_NATIVE=0), bit for bit. What the native code leaves to Python (more dims than the
copy loops have) still runs, right."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collective_checks import independent_collectives, overwritten_operand, value
from spmd.backends.llvm import compile_llvm
from spmd.ir import Graph
from spmd.ir.ops.names import ADD, ALL_TO_ALL, CONSTANT, MULTIPLY, SCAN, TRANSPOSE
from spmd.sharding import Mesh
from spmd.transports.local.local_communicator import LocalCommunicator
from spmd.transports.local.local_runtime import LocalRuntime

RT = LocalRuntime()
MESHES = {"1x2": ((1, 2), ("x", "y")), "2x2": ((2, 2), ("x", "y")), "4": ((4,), ("x",))}
AXES = {"1x2": [("y",)], "2x2": [("y",), ("x",), ("x", "y"), ("y", "x")], "4": [("x",)]}
DTYPES = ["float32", "float64", "int32", "int64", "int8", "float16", "bool", "complex128"]


class Counted:
    """How often the local communicator ran an all_to_all from Python"""

    def __init__(self, monkeypatch):
        self.calls = 0
        inner = LocalCommunicator._all_to_all

        def counted(comm, *a, **k):
            self.calls += 1
            return inner(comm, *a, **k)
        monkeypatch.setattr(LocalCommunicator, "_all_to_all", counted)


def a2a_graph(shape, dtype, axes, G, sd, cd, transposed=False):
    """r = all_to_all(x * 3) (x itself if bool; x's transpose, a strided view the native
    code reads where it lies, if `transposed`), and back: all_to_all(r) with split and
    concat swapped: both"""
    g = Graph("a2a")
    x = g.add_input(shape[::-1] if transposed else shape, dtype)
    if transposed:
        a = g.emit(TRANSPOSE, x, permutation=tuple(range(len(shape)))[::-1])
    else:
        a = x if dtype == "bool" else g.emit(MULTIPLY, x, g.emit(CONSTANT, value=np.full(shape, 3, dtype)))
    r = g.emit(ALL_TO_ALL, a, axes=axes, split_dimension=sd, concat_dimension=cd, group_size=G)
    g.outputs = [r, g.emit(ALL_TO_ALL, r, axes=axes, split_dimension=cd, concat_dimension=sd, group_size=G)]
    return g


def numpy_a2a(mesh, a, axes, sd, cd):
    """device -> member i's result: block i along sd of each member's operand, in group
    order, concatenated along cd"""
    G = mesh.axes_size(axes)
    return {d: np.concatenate([np.split(a[e], G, axis=sd)[mesh.index_in_group(d, axes)]
                               for e in mesh.group(d, axes)], axis=cd) for d in a}


def same_bits(got, want):
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape, want.dtype, want.shape)
    assert got.tobytes() == want.tobytes(), (got, want)


def check(mesh_name, axes, shape, sd, cd, dtype, monkeypatch, transposed=False, native=True, host=None):
    """`host`: is it native between Ray's processes of one host (no operand read where it
    lies, every message laid out in the region); where not given, `native`"""
    mesh = Mesh(*MESHES[mesh_name])
    G = mesh.axes_size(axes)
    exe = compile_llvm(a2a_graph(shape, dtype, axes, G, sd, cd, transposed))
    assert (exe.schedule(1, True, "process").only_segment() is not None) == native
    assert (exe.schedule(1, True, "host").only_segment() is not None) == (native if host is None else host)
    xs = {d: value(d, shape[::-1] if transposed else shape, dtype) for d in range(mesh.size)}
    a = {d: xs[d].T if transposed else xs[d] if dtype == "bool" else xs[d] * np.asarray(3, dtype) for d in xs}
    want = numpy_a2a(mesh, a, axes, sd, cd)
    counted = Counted(monkeypatch)
    for _ in range(2):          # a second run on the same world: the counts go on
        counted.calls = 0
        got = RT.run(exe, mesh, {d: [xs[d].copy()] for d in range(mesh.size)})
        from_python = counted.calls
        assert (from_python == 0) == native, from_python
        monkeypatch.setenv("SPMD_NATIVE", "0")
        stepwise = RT.run(exe, mesh, {d: [xs[d].copy()] for d in range(mesh.size)})
        monkeypatch.delenv("SPMD_NATIVE")
        assert counted.calls - from_python == 2 * mesh.size       # (every rank's two, stepwise)
        for d in range(mesh.size):
            for res in (got[d], stepwise[d]):
                same_bits(res[0], want[d])
                same_bits(res[1], a[d])


# (shape with the split dim's size a multiple of G, split dim, concatenated dim): the
# blocks a run of bytes (the dims before the split one 1), each a G-th of every row (split
# at the concatenated dim, ones between), and laid out block by block (the rest)
def cases(G):
    return [((2 * G,), 0, 0), ((G, 3), 0, 1), ((3, G), 1, 0), ((3, 2 * G), 1, 1), ((2, G, 3), 1, 1),
            ((1, 2 * G, 3), 1, 2), ((2, 3, G), 2, 0), ((2, 1, G, 3), 2, 1), ((2, G, 3, 2), 1, 3),
            ((2, 3, 2, G), 3, 0), ((2, 3, 2 * G, 2), 2, 2)]


@pytest.mark.parametrize("cores", ["1", "64"])
@pytest.mark.parametrize("mesh_name", sorted(MESHES))
@pytest.mark.parametrize("dtype", ["float32", "int64"])
def test_native_all_to_alls_equal_python_and_numpy(mesh_name, dtype, cores, monkeypatch):
    monkeypatch.setenv("SPMD_LOCAL_CORES", cores)
    monkeypatch.setenv("SPMD_COLLECTIVE_TIMEOUT", "60")
    for axes in AXES[mesh_name]:
        G = Mesh(*MESHES[mesh_name]).axes_size(axes)
        for shape, sd, cd in cases(G):
            check(mesh_name, axes, shape, sd, cd, dtype, monkeypatch)


@pytest.mark.parametrize("dtype", DTYPES)
def test_an_all_to_all_of_any_dtype_is_native(dtype, monkeypatch):
    """The gather copies bytes, and so do the strided reads between threads (2 and
    16-byte elements as their bytes): every dtype is native. Between processes, blocks
    laid out in the mailbox are copied as 1, 4 or 8-byte elements: 2 and 16-byte ones
    run through the communicator there (right)."""
    monkeypatch.setenv("SPMD_COLLECTIVE_TIMEOUT", "60")
    moves = np.dtype(dtype).itemsize in (1, 4, 8)
    # (both ways: there and back with split and concat swapped need no laying out)
    for shape, sd, cd in (((8, 3), 0, 0), ((3, 8), 1, 1), ((1, 8, 3), 1, 1)):
        check("2x2", ("x", "y"), shape, sd, cd, dtype, monkeypatch)
    check("2x2", ("x", "y"), (3, 8), 1, 0, dtype, monkeypatch, host=moves)
    check("2x2", ("y",), (2, 3, 4), 2, 1, dtype, monkeypatch, host=moves)


@pytest.mark.parametrize("dtype", ["float64", "int32", "int8", "float16"])
def test_a_strided_operand_is_copied_into_the_mailbox(dtype, monkeypatch):
    """A transpose feeding the all_to_all is a view the native code reads where it lies,
    strided: between threads each member's block is read there, between processes the
    post copies it into the mailbox, laid out block by block or as it is (a copy of
    2-byte elements there runs through the communicator). Right either way."""
    monkeypatch.setenv("SPMD_COLLECTIVE_TIMEOUT", "60")
    for mesh_name, axes in (("2x2", ("x", "y")), ("2x2", ("x",)), ("4", ("x",))):
        G = Mesh(*MESHES[mesh_name]).axes_size(axes)
        for shape, sd, cd in (((2 * G, 6), 0, 1), ((6, 2 * G), 1, 0), ((6, 2 * G), 1, 1), ((3, G, 2), 1, 2)):
            check(mesh_name, axes, shape, sd, cd, dtype, monkeypatch, transposed=True, host=dtype != "float16")


def test_more_dims_than_the_copy_loops_have_run_from_python(monkeypatch):
    """A 7-D operand's block read strided takes 7 dims (laid out block by block, 8), more
    than the copy loops' (native.COPY_DIMS): it runs through the communicator. Its dims
    of one element take none: a 6-D operand with ones is read natively between threads,
    though laid out it would take 7. Blocks that need neither run natively."""
    monkeypatch.setenv("SPMD_COLLECTIVE_TIMEOUT", "60")
    check("4", ("x",), (2, 2, 2, 2, 2, 2, 8), 6, 0, "float32", monkeypatch, native=False)
    check("4", ("x",), (2, 1, 2, 1, 4, 2), 4, 0, "float32", monkeypatch, host=False)
    check("4", ("x",), (2, 1, 2, 1, 4, 2), 4, 4, "float32", monkeypatch)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mesh_name=st.sampled_from(sorted(MESHES)), draw=st.data())
def test_all_to_alls_of_any_shape_equal_numpy(mesh_name, draw, monkeypatch):
    monkeypatch.setenv("SPMD_COLLECTIVE_TIMEOUT", "60")
    axes = draw.draw(st.sampled_from(AXES[mesh_name]))
    G = Mesh(*MESHES[mesh_name]).axes_size(axes)
    shape = draw.draw(st.lists(st.integers(0, 3), min_size=1, max_size=4))
    sd = draw.draw(st.integers(0, len(shape) - 1))
    cd = draw.draw(st.integers(0, len(shape) - 1))
    shape[sd] *= G
    dtype = draw.draw(st.sampled_from(["float32", "int64", "int8", "float64"]))
    # (an empty array's transpose is no view: the program is not one segment)
    transposed = draw.draw(st.booleans()) and 0 not in shape
    check(mesh_name, axes, tuple(shape), sd, cd, dtype, monkeypatch, transposed=transposed)


def scan_graph(shape, axes, G, length):
    """a scan whose body is c -> all_to_all(all_to_all(c * 3, 1 -> 0), 0 -> 1) + c"""
    body = Graph("body")
    c = body.add_input(shape, "float64")
    m = body.emit(MULTIPLY, c, body.emit(CONSTANT, value=np.full(shape, 3.0)))
    t = body.emit(ALL_TO_ALL, m, axes=axes, split_dimension=1, concat_dimension=0, group_size=G)
    back = body.emit(ALL_TO_ALL, t, axes=axes, split_dimension=0, concat_dimension=1, group_size=G)
    body.outputs = [body.emit(ADD, back, c)]
    g = Graph("loop")
    x = g.add_input(shape, "float64")
    g.outputs = [g.emit(SCAN, x, body=body, num_carry=1, num_xs=0, length=length, reverse=False)]
    return g


@pytest.mark.parametrize("cores", ["1", "64"])
def test_in_a_scan_the_counts_go_on(cores, monkeypatch):
    """Two all_to_alls a step, there and back: each step's value is c * 4"""
    monkeypatch.setenv("SPMD_LOCAL_CORES", cores)
    monkeypatch.setenv("SPMD_COLLECTIVE_TIMEOUT", "60")
    mesh = Mesh(*MESHES["2x2"])
    for axes in (("y",), ("x", "y")):
        exe = compile_llvm(scan_graph((4, 8), axes, mesh.axes_size(axes), 5))
        assert exe.schedule(1, True, "process").only_segment() is not None
        xs = {d: value(d, (4, 8), "float64") for d in range(4)}
        counted = Counted(monkeypatch)
        for _ in range(2):
            got = RT.run(exe, mesh, {d: [xs[d].copy()] for d in range(4)})
            for d in range(4):
                want = xs[d]
                for _ in range(5):
                    want = want * 3.0 + want
                same_bits(got[d][0], want)
        assert counted.calls == 0


@pytest.mark.parametrize("sd,cd", [(0, 0), (1, 1), (1, 0)])
def test_an_operand_read_where_it_lies_is_not_written_before_every_member_read_it(sd, cd, monkeypatch):
    """The operand of an all_to_all between threads is read by the other members where
    it lies (its blocks as rows, or strided); the kernel right after writes over it (x *
    3 dies there, and its product with 5 takes its buffer). Each member waits (the
    drain) until every other has read it, as the all-gather's do (checked by leaving the
    drain out: the results then differ in some runs)."""
    monkeypatch.setenv("SPMD_LOCAL_CORES", "64")
    monkeypatch.setenv("SPMD_COLLECTIVE_TIMEOUT", "20")
    mesh = Mesh(*MESHES["4"])
    shape = (64, 4096)
    exe = overwritten_operand(ALL_TO_ALL, shape, axes=("x",), split_dimension=sd, concat_dimension=cd, group_size=4)
    sched = exe.schedule(1, True, "process")
    assert sched.only_segment() is not None
    assert sched.slot_bytes == {("group", ("x",)): 128}      # (no mailbox: read where it lies)
    xs = {d: value(d, shape, "float32") for d in range(4)}
    a3 = {d: xs[d] * np.float32(3) for d in range(4)}
    want = numpy_a2a(mesh, a3, ("x",), sd, cd)
    for _ in range(20):
        got = RT.run(exe, mesh, {d: [xs[d].copy()] for d in range(4)})
        for d in range(4):
            same_bits(got[d][0], want[d])
            same_bits(got[d][1], a3[d] * np.float32(5))


@pytest.mark.parametrize("cores", ["1", "64"])
def test_a_groups_collectives_share_one_region_in_their_order(cores, monkeypatch):
    """Independent all_to_alls (read as rows, read strided), an all-gather, a
    reduce-scatter and an all-reduce of one group share its region, each posted only once
    the one before was read; no mailbox holds an all_to_all's operand between threads
    (the all-reduce's alone: one cache line)."""
    from spmd.ir.ops.names import ALL_GATHER, ALL_REDUCE, REDUCE_SCATTER
    monkeypatch.setenv("SPMD_LOCAL_CORES", cores)
    monkeypatch.setenv("SPMD_COLLECTIVE_TIMEOUT", "20")
    mesh = Mesh(*MESHES["2x2"])
    axes = ("y",)
    sched, xs, ys, run = independent_collectives(lambda g, x, y: [
        g.emit(ALL_TO_ALL, x, axes=axes, split_dimension=0, concat_dimension=1, group_size=2),
        g.emit(ALL_GATHER, y, axes=axes, dimension=0, group_size=2),
        g.emit(ALL_TO_ALL, x, axes=axes, split_dimension=1, concat_dimension=0, group_size=2),
        g.emit(REDUCE_SCATTER, x, axes=axes, dimension=0, reduction="sum", group_size=2),
        g.emit(ALL_REDUCE, y, axes=axes, reduction="sum", group_size=2),
        g.emit(ALL_TO_ALL, x, axes=("x", "y"), split_dimension=0, concat_dimension=1, group_size=4)], RT, mesh)
    assert sched.only_segment() is not None
    assert sched.slot_bytes == {("group", ("y",)): 128 + 128, ("group", ("x", "y")): 128}
    for _ in range(2):
        got = run()
        for d in range(4):
            grp, i = mesh.group(d, axes), mesh.index_in_group(d, axes)
            want = [numpy_a2a(mesh, xs, axes, 0, 1)[d], np.concatenate([ys[e] for e in grp], axis=0),
                    numpy_a2a(mesh, xs, axes, 1, 0)[d],
                    np.split(xs[grp[0]] + xs[grp[1]], 2, axis=0)[i], ys[grp[0]] + ys[grp[1]],
                    numpy_a2a(mesh, xs, ("x", "y"), 0, 1)[d]]
            for r, w in zip(got[d], want):
                same_bits(r, w)
