"""Native collectives between the local runtime's threads (backends/llvm/exchange.py):
a collective_permute inside a scan runs as native instructions of one segment, with the
results of the Python communicator (SPMD_NATIVE=0) and of a plain-numpy statement, bit
for bit, over meshes 1x2, 2x1, 2x2, every dtype, uneven shapes; and the failure contract
of transports/local/local_communicator.py: a rank that raises before or while the others wait in a native
loop, one that finishes early, one that never arrives (SPMD_COLLECTIVE_TIMEOUT), end the
run promptly with the CollectiveError or the rank's own error, naming the rank."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from spmd.backends.llvm import compile_llvm, native
from spmd.errors import CollectiveError
from spmd.ir import Graph
from spmd.ir.ops.names import ADD, COLLECTIVE_PERMUTE, CONSTANT, MULTIPLY, SCAN, SLICE
from spmd.transports.local.local_runtime import LocalRuntime
from spmd.sharding import Mesh

RT = LocalRuntime()
MESHES = {"1x2": ((1, 2), "y"), "2x1": ((2, 1), "x"), "2x2": ((2, 2), "y")}
DTYPES = ["float32", "float64", "int32", "int64", "bool", "complex64", "complex128", "float16", "bfloat16"]


def ring_program(shape, dtype, axis, G, length):
    """A scan of `length` iterations: the carried value goes to the next member of the
    group (the last one gets zeros) and is added to what came in."""
    pairs = tuple((i, i + 1) for i in range(G - 1))
    body = Graph("body")
    c = body.add_input(shape, dtype)
    p = body.emit(COLLECTIVE_PERMUTE, c, axes=(axis,), pairs=pairs, group_size=G)
    body.outputs = [body.emit("or" if dtype == "bool" else "add", p, c)]
    g = Graph("ring")
    x = g.add_input(shape, dtype)
    g.outputs = [g.emit(SCAN, x, body=body, num_carry=1, num_xs=0, length=length, reverse=False)]
    return g


def numpy_ring(mesh, axis, xs, length):
    """The same, stated with the mesh's device array."""
    devs = np.asarray(mesh.devices)
    lines = [devs[i, :] for i in range(devs.shape[0])] if axis == "y" else [devs[:, j] for j in range(devs.shape[1])]
    cur = dict(xs)
    for _ in range(length):
        new = {}
        for line in lines:
            for k, d in enumerate(line):
                came = cur[line[k - 1]] if k > 0 else np.zeros_like(cur[d])
                new[d] = (came | cur[d]) if came.dtype == bool else came + cur[d]
        cur = new
    return cur


def rand(rng, shape, dtype):
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype == "bfloat16":
        import ml_dtypes
        return rng.standard_normal(shape).astype(ml_dtypes.bfloat16)
    if np.dtype(dtype).kind in "fc":
        return (rng.standard_normal(shape) + (1j * rng.standard_normal(shape) if dtype.startswith("complex") else 0)
                ).astype(dtype)
    return rng.integers(0, 50, size=shape).astype(dtype)


def is_native(exe) -> bool:
    """The whole program is one native segment (the loop and its exchanges included)."""
    return exe.schedule(1, True, "process").only_segment() is not None


@pytest.mark.parametrize("mesh_name", sorted(MESHES))
@pytest.mark.parametrize("dtype", DTYPES)
def test_native_permute_in_a_loop_equals_python_and_numpy(mesh_name, dtype, monkeypatch):
    shape, axis = MESHES[mesh_name]
    mesh = Mesh(shape, ("x", "y"))
    G = mesh.axis_size(axis)
    rng = np.random.default_rng(len(dtype))
    for shp, length in (((3, 5), 3), ((7,), 4), ((), 1), ((2, 0), 2)):
        xs = {d: rand(rng, shp, dtype) for d in range(mesh.size)}
        exe = compile_llvm(ring_program(shp, dtype, axis, G, length))
        if length > 1 and 0 not in shp:
            assert is_native(exe)
        got = RT.run(exe, mesh, {d: [xs[d].copy()] for d in range(mesh.size)})
        monkeypatch.setenv("SPMD_NATIVE", "0")
        stepwise = RT.run(exe, mesh, {d: [xs[d].copy()] for d in range(mesh.size)})
        monkeypatch.delenv("SPMD_NATIVE")
        want = numpy_ring(mesh, axis, xs, length)
        for d in range(mesh.size):
            assert got[d][0].dtype == want[d].dtype and got[d][0].shape == want[d].shape
            np.testing.assert_array_equal(got[d][0], want[d])
            np.testing.assert_array_equal(stepwise[d][0], want[d])


def test_runs_again_in_a_new_world_and_twice_in_one():
    """A run's board starts at zero; two programs in one run keep counting together."""
    mesh = Mesh((2, 2), ("x", "y"))
    exe = compile_llvm(ring_program((4,), "float64", "y", 2, 5))
    xs = {d: np.full(4, float(d + 1)) for d in range(4)}
    want = numpy_ring(mesh, "y", numpy_ring(mesh, "y", xs, 5), 5)

    def twice(inputs, comm):
        return exe(exe(inputs, comm), comm)
    for _ in range(2):
        got = RT.run(twice, mesh, {d: [xs[d]] for d in range(4)})
        for d in range(4):
            np.testing.assert_array_equal(got[d][0], want[d])


@pytest.fixture
def ring():
    return compile_llvm(ring_program((64,), "float64", "y", 2, 50))


def test_a_rank_that_raises_before_the_loop_ends_the_others_promptly(ring, monkeypatch):
    monkeypatch.setenv("SPMD_COLLECTIVE_TIMEOUT", "60")
    mesh = Mesh((1, 2), ("x", "y"))

    def prog(inputs, comm):
        if comm.rank == 1:
            raise ValueError("boom on purpose")
        return ring(inputs, comm)

    t0 = time.monotonic()
    with pytest.raises(ValueError, match="boom on purpose") as e:
        RT.run(prog, mesh, {d: [np.ones(64)] for d in range(2)})
    assert time.monotonic() - t0 < 5
    assert "rank 1" in " ".join(getattr(e.value, "__notes__", []))


def test_a_rank_that_raises_while_the_other_waits_inside_the_loop(ring, monkeypatch):
    """Rank 1 ends the first loop with rank 0, then fails while rank 0 waits in its
    second loop: rank 0 stops with CollectiveError naming rank 1; the run raises rank 1's."""
    monkeypatch.setenv("SPMD_COLLECTIVE_TIMEOUT", "60")
    mesh = Mesh((1, 2), ("x", "y"))
    seen = {}

    def prog(inputs, comm):
        out = ring(inputs, comm)
        if comm.rank == 1:
            time.sleep(0.2)
            raise ValueError("boom on purpose")
        try:
            return ring(out, comm)
        except CollectiveError as e:
            seen[comm.rank] = str(e)
            raise

    t0 = time.monotonic()
    with pytest.raises(ValueError, match="boom on purpose"):
        RT.run(prog, mesh, {d: [np.ones(64)] for d in range(2)})
    assert time.monotonic() - t0 < 5
    assert "collective_permute" in seen[0] and "aborted because rank 1 failed" in seen[0], seen


def test_a_rank_that_finishes_early_is_named(ring, monkeypatch):
    monkeypatch.setenv("SPMD_COLLECTIVE_TIMEOUT", "60")
    mesh = Mesh((1, 2), ("x", "y"))

    def prog(inputs, comm):
        if comm.rank == 1:
            return inputs
        return ring(inputs, comm)

    t0 = time.monotonic()
    with pytest.raises(CollectiveError, match=r"collective_permute.*rank\(s\) \[1\] finished the program without"):
        RT.run(prog, mesh, {d: [np.ones(64)] for d in range(2)})
    assert time.monotonic() - t0 < 5


def test_a_rank_that_never_arrives_times_out_naming_it(ring, monkeypatch):
    monkeypatch.setenv("SPMD_COLLECTIVE_TIMEOUT", "0.3")
    mesh = Mesh((1, 2), ("x", "y"))
    release = threading.Event()

    def prog(inputs, comm):
        if comm.rank == 1:
            release.wait(10)            # stuck (in a long computation, say)
        return ring(inputs, comm)

    t0 = time.monotonic()
    with pytest.raises(CollectiveError, match=r"timed out after 0.3 s waiting for rank\(s\) \[1\]"):
        RT.run(prog, mesh, {d: [np.ones(64)] for d in range(2)})
    assert time.monotonic() - t0 < 3
    release.set()
    out = RT.run(ring, mesh, {d: [np.ones(64)] for d in range(2)})
    np.testing.assert_array_equal(out[1][0], np.full(64, 51.0))


@pytest.mark.parametrize("dtype", ["float64", "int32"])
def test_a_column_halo_is_sent_natively_from_a_strided_view(dtype, monkeypatch):
    """The operand is the carried block's last column (a strided view): the sender
    gathers it into its mailbox; the scanned output stacks what came in."""
    n, m, length = 5, 3, 4
    body = Graph("body")
    c = body.add_input((n, m), dtype)
    col = body.emit(SLICE, c, start=(0, m - 1), limit=(n, m), stride=(1, 1))
    got_col = body.emit(COLLECTIVE_PERMUTE, col, axes=("y",), pairs=((0, 1),), group_size=2)
    body.outputs = [body.emit(ADD, c, c), got_col]
    g = Graph("columns")
    x = g.add_input((n, m), dtype)
    g.outputs = list(g.emit(SCAN, x, body=body, num_carry=1, num_xs=0, length=length, reverse=False))
    exe = compile_llvm(g)
    assert is_native(exe)
    mesh = Mesh((1, 2), ("x", "y"))
    xs = {d: (np.arange(n * m).reshape(n, m) + 10 * d).astype(dtype) for d in range(2)}
    got = RT.run(exe, mesh, {d: [xs[d].copy()] for d in range(2)})
    monkeypatch.setenv("SPMD_NATIVE", "0")
    stepwise = RT.run(exe, mesh, {d: [xs[d].copy()] for d in range(2)})
    ys1 = np.stack([(xs[0] * 2 ** i)[:, m - 1:] for i in range(length)]).astype(dtype)
    for out in (got, stepwise):
        np.testing.assert_array_equal(out[1][1], ys1)
        np.testing.assert_array_equal(out[0][1], np.zeros_like(ys1))
        np.testing.assert_array_equal(out[0][0], xs[0] * 2 ** length)


def test_a_long_loop_stops_at_the_iteration_its_exchange_failed(monkeypatch):
    """A rank fails while the other is inside a loop of a million iterations: the loop ends
    at the failed exchange instead of computing the iterations left (the run itself
    returns after a grace period whatever the other rank does: its end is timed)."""
    monkeypatch.setenv("SPMD_COLLECTIVE_TIMEOUT", "60")
    mesh = Mesh((1, 2), ("x", "y"))
    long_ring = compile_llvm(ring_program((1 << 16,), "float64", "y", 2, 1000000))
    ended = threading.Event()

    def prog(inputs, comm):
        if comm.rank == 1:
            time.sleep(0.1)
            raise ValueError("boom on purpose")
        try:
            return long_ring(inputs, comm)
        finally:
            ended.set()

    t0 = time.monotonic()
    with pytest.raises(ValueError, match="boom on purpose"):
        RT.run(prog, mesh, {d: [np.ones(1 << 16)] for d in range(2)})
    assert ended.wait(30)
    assert time.monotonic() - t0 < 3


def halves(instrs):
    """[("post" | "recv", k)]: the k-th permute's halves in the order a segment runs them
    (a receive apart finds its post by the Here entry back to the post's block)."""
    names = {v: k for k, v in native.helpers().items() if isinstance(v, int)}
    events, post_at, off = [], {}, 0
    for fn, entries in instrs:
        name = names.get(fn)
        if name == "spmd_permute_post":
            k = len(post_at)
            post_at[off] = k
            events.append(("post", k))
        elif name == "spmd_permute_recv_of":
            events.append(("recv", post_at[off + entries[0].k]))
        off += len(entries)
    return events


def assert_slots_kept(events):
    """each receive after its post, and never more than two posts (a member's mailbox
    slots) waiting for their receives"""
    waiting = set()
    for kind, k in events:
        if kind == "post":
            waiting.add(k)
            assert len(waiting) <= 2, events
        else:
            waiting.remove(k)
    assert not waiting, events


def test_exchanges_both_ways_post_first_and_a_forwarded_result_waits(monkeypatch):
    """Consecutive permutes run as all their posts, then their receives; one that sends
    another's result is not moved before that result came in."""
    body = Graph("body")
    c = body.add_input((6,), "float64")
    right = body.emit(COLLECTIVE_PERMUTE, c, axes=("y",), pairs=((0, 1),), group_size=2)
    left = body.emit(COLLECTIVE_PERMUTE, c, axes=("y",), pairs=((1, 0),), group_size=2)
    again = body.emit(COLLECTIVE_PERMUTE, right, axes=("y",), pairs=((1, 0),), group_size=2)
    body.outputs = [body.emit(ADD, body.emit(ADD, right, left), body.emit(ADD, again, c))]
    g = Graph("both_ways")
    x = g.add_input((6,), "float64")
    g.outputs = [g.emit(SCAN, x, body=body, num_carry=1, num_xs=0, length=5, reverse=False)]
    exe = compile_llvm(g)
    assert is_native(exe)
    body_exe = exe.subprograms[id(g.ops[-1].attrs["body"])]
    events = halves(body_exe.schedule(1, True, "process").only_segment().instrs)
    # both directions leave before any wait; `again` sends what `right` received
    assert events[:2] == [("post", 0), ("post", 1)], events
    assert events.index(("recv", 0)) < events.index(("post", 2)), events
    assert_slots_kept(events)
    mesh = Mesh((2, 2), ("x", "y"))
    xs = {d: np.arange(6.0) * (d + 1) for d in range(4)}
    got = RT.run(exe, mesh, {d: [xs[d].copy()] for d in range(4)})
    monkeypatch.setenv("SPMD_NATIVE", "0")
    want = RT.run(exe, mesh, {d: [xs[d].copy()] for d in range(4)})
    for d in range(4):
        np.testing.assert_array_equal(got[d][0], want[d][0])


def test_more_permutes_in_a_row_than_mailbox_slots(monkeypatch):
    """Four independent permutes in a row (np.roll on an uneven split sends three) post
    two at a time: a member has two mailbox slots, and a third post before any receive
    waited for its slot's reader, who waited the same way."""
    monkeypatch.setenv("SPMD_COLLECTIVE_TIMEOUT", "5")
    body = Graph("body")
    c = body.add_input((5,), "float64")
    sent = [body.emit(COLLECTIVE_PERMUTE, c, axes=("x",), group_size=4,
                      pairs=tuple((i, (i + s) % 4) for i in range(4))) for s in (1, 3, 2, 1)]
    out = c
    for k, p in enumerate(sent):
        w = body.emit(CONSTANT, value=np.full((5,), 10.0 ** (k + 1)))
        out = body.emit(ADD, out, body.emit(MULTIPLY, p, w))
    body.outputs = [out]
    g = Graph("four")
    x = g.add_input((5,), "float64")
    g.outputs = [g.emit(SCAN, x, body=body, num_carry=1, num_xs=0, length=3, reverse=False)]
    exe = compile_llvm(g)
    assert is_native(exe)
    body_exe = exe.subprograms[id(g.ops[-1].attrs["body"])]
    events = halves(body_exe.schedule(1, True, "process").only_segment().instrs)
    assert events[:2] == [("post", 0), ("post", 1)], events
    assert_slots_kept(events)
    mesh = Mesh((4,), ("x",))
    xs = {d: np.arange(5.0) + d for d in range(4)}
    t0 = time.monotonic()
    got = RT.run(exe, mesh, {d: [xs[d].copy()] for d in range(4)})
    assert time.monotonic() - t0 < 5
    cur = dict(xs)
    for _ in range(3):
        new = {}
        for d in range(4):
            new[d] = cur[d] + sum(cur[(d - s) % 4] * 10.0 ** (k + 1) for k, s in enumerate((1, 3, 2, 1)))
        cur = new
    for d in range(4):
        np.testing.assert_array_equal(got[d][0], cur[d])
