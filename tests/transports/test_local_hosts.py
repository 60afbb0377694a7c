"""More local ranks than cores (SPMD_LOCAL_CORES): the ranks' native segments run on one
thread per core, in lockstep (transports/local/local_communicator.py hosts, native.py spmd_run_multi).
The results are numpy's bit for bit, with exchanges inside a host and across hosts, in
loops, twice in a run; and a hosted rank that fails, finishes early or never arrives
ends the run promptly, named."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from test_local_native import numpy_ring, ring_program

from spmd.backends.llvm import compile_llvm
from spmd.ir.ops.names import ADD, COLLECTIVE_PERMUTE, CONSTANT, MULTIPLY, SCAN
from spmd.transports.local.local_communicator import LocalWorld
from spmd.errors import CollectiveError
from spmd.ir import Graph
from spmd.transports.local.local_runtime import LocalRuntime
from spmd.sharding import Mesh

RT = LocalRuntime()
MESH = Mesh((2, 2), ("x", "y"))


def two_axis_program(length, shape=(3, 4)):
    """A scan whose body exchanges along both axes both ways (a 2-D halo's pattern)."""
    body = Graph("body")
    c = body.add_input(shape, "float64")
    out = c
    for axis in ("x", "y"):
        for pairs in (((0, 1),), ((1, 0),)):
            p = body.emit(COLLECTIVE_PERMUTE, c, axes=(axis,), pairs=pairs, group_size=2)
            out = body.emit(ADD, out, body.emit(MULTIPLY, p, body.emit(CONSTANT, value=np.full(shape, 0.5))))
    body.outputs = [out]
    g = Graph("two_axes")
    x = g.add_input(shape, "float64")
    g.outputs = [g.emit(SCAN, x, body=body, num_carry=1, num_xs=0, length=length, reverse=False)]
    return g


def numpy_two_axis(xs, length):
    devs = np.asarray(MESH.devices)
    cur = dict(xs)
    for _ in range(length):
        new = {}
        for i in range(2):
            for j in range(2):
                d = devs[i, j]
                out = cur[d].copy()
                for di, dj in ((1, 0), (-1, 0), (0, 1), (0, -1)):
                    # (x pairs (0, 1) then (1, 0), y likewise: what comes from each neighbour)
                    si, sj = i - di, j - dj
                    if 0 <= si < 2 and 0 <= sj < 2:
                        out = out + cur[devs[si, sj]] * 0.5
                new[d] = out
        cur = new
    return cur


@pytest.mark.parametrize("shape", [(3, 4), (200, 200)])
@pytest.mark.parametrize("cores", ["1", "2", "3", "64"])
def test_hosted_ranks_exchange_as_numpy_says(cores, shape, monkeypatch):
    """A small program's segments run on one host of every rank, a larger one's on a
    host per core (ranks exchanging within a host and across hosts)."""
    monkeypatch.setenv("SPMD_LOCAL_CORES", cores)
    world = LocalWorld(MESH)
    hosts = {tuple(h.devices) for h in world.host_of.values()}
    assert hosts == {"1": {(0, 1, 2, 3)}, "2": {(0, 1), (2, 3)}, "3": {(0,), (1,), (2, 3)}, "64": set()}[cores]
    assert (world.host_all is None) == (cores == "64")
    rng = np.random.default_rng(int(cores))
    xs = {d: rng.standard_normal(shape) for d in range(4)}
    exe = compile_llvm(two_axis_program(6, shape))
    assert exe.schedule(1, True, "process").small == (shape == (3, 4))
    got = RT.run(exe, MESH, {d: [xs[d].copy()] for d in range(4)})
    want = numpy_two_axis(xs, 6)
    for d in range(4):
        np.testing.assert_array_equal(got[d][0], want[d])
    ring = compile_llvm(ring_program((5,), "float64", "x", 2, 4))
    xs = {d: np.arange(5.0) * (d + 1) for d in range(4)}

    def twice(inputs, comm):
        return ring(ring(inputs, comm), comm)
    got = RT.run(twice, MESH, {d: [xs[d]] for d in range(4)})
    want = numpy_ring(MESH, "x", numpy_ring(MESH, "x", xs, 4), 4)
    for d in range(4):
        np.testing.assert_array_equal(got[d][0], want[d])


@pytest.fixture
def hosted(monkeypatch):
    monkeypatch.setenv("SPMD_LOCAL_CORES", "1")
    monkeypatch.setenv("SPMD_COLLECTIVE_TIMEOUT", "60")
    return compile_llvm(ring_program((64,), "float64", "y", 2, 50))


def test_a_hosted_rank_that_raises_ends_the_others_promptly(hosted):
    def prog(inputs, comm):
        if comm.rank == 1:
            raise ValueError("boom on purpose")
        return hosted(inputs, comm)

    t0 = time.monotonic()
    with pytest.raises(ValueError, match="boom on purpose") as e:
        RT.run(prog, MESH, {d: [np.ones(64)] for d in range(4)})
    assert time.monotonic() - t0 < 5
    assert "rank 1" in " ".join(getattr(e.value, "__notes__", []))


def test_a_hosted_rank_that_finishes_early_is_named(hosted):
    def prog(inputs, comm):
        if comm.rank == 2:
            return inputs
        return hosted(inputs, comm)

    t0 = time.monotonic()
    with pytest.raises(CollectiveError, match=r"rank\(s\) \[2\] finished the program without"):
        RT.run(prog, MESH, {d: [np.ones(64)] for d in range(4)})
    assert time.monotonic() - t0 < 5


def test_a_hosted_rank_that_never_arrives_times_out_naming_it(hosted, monkeypatch):
    monkeypatch.setenv("SPMD_COLLECTIVE_TIMEOUT", "0.3")
    release = threading.Event()

    def prog(inputs, comm):
        if comm.rank == 3:
            release.wait(10)
        return hosted(inputs, comm)

    t0 = time.monotonic()
    with pytest.raises(CollectiveError, match=r"timed out after 0.3 s waiting for rank\(s\) \[3\]"):
        RT.run(prog, MESH, {d: [np.ones(64)] for d in range(4)})
    assert time.monotonic() - t0 < 3
    release.set()


@pytest.mark.parametrize("cores", ["1", "2"])
def test_a_swap_whose_receive_follows_its_post_runs_in_lockstep(cores, monkeypatch):
    """One permute both ways a sweep, its receive right after its post: in lockstep the
    receive of a rank waits for the post of a rank of the same thread (two instructions,
    never one: posting and receiving in one would wait for a post not yet made)."""
    monkeypatch.setenv("SPMD_LOCAL_CORES", cores)
    monkeypatch.setenv("SPMD_COLLECTIVE_TIMEOUT", "10")
    body = Graph("body")
    c = body.add_input((4,), "float64")
    p = body.emit(COLLECTIVE_PERMUTE, c, axes=("y",), pairs=((0, 1), (1, 0)), group_size=2)
    body.outputs = [body.emit(ADD, c, p)]
    g = Graph("swap")
    x = g.add_input((4,), "float64")
    g.outputs = [g.emit(SCAN, x, body=body, num_carry=1, num_xs=0, length=3, reverse=False)]
    xs = {d: np.arange(4.0) + 10 * d for d in range(4)}
    got = RT.run(compile_llvm(g), MESH, {d: [xs[d].copy()] for d in range(4)})
    devs = np.asarray(MESH.devices)
    cur = dict(xs)
    for _ in range(3):
        cur = {devs[i, j]: cur[devs[i, j]] + cur[devs[i, 1 - j]] for i in range(2) for j in range(2)}
    for d in range(4):
        np.testing.assert_array_equal(got[d][0], cur[d])


def test_a_clean_run_leaves_its_world_to_the_next_and_a_failed_one_does_not(monkeypatch):
    """The next run on the same mesh keeps the communicators (a native schedule fills in
    what it reads from one once), with its counts at zero (the ring's answer again);
    after a failure, or with another timeout, the run gets a new world."""
    rt = LocalRuntime()
    ring = compile_llvm(ring_program((4,), "float64", "y", 2, 5))
    seen = []

    def prog(inputs, comm):
        seen.append((comm.rank, comm))
        return ring(inputs, comm)
    xs = {d: np.full(4, float(d + 1)) for d in range(4)}
    want = numpy_ring(MESH, "y", xs, 5)
    comms = []
    for _ in range(2):
        seen.clear()
        got = rt.run(prog, MESH, {d: [xs[d]] for d in range(4)})
        comms.append(dict(seen))
        for d in range(4):
            np.testing.assert_array_equal(got[d][0], want[d])
        # (a run on another mesh between them keeps its own world)
        rt.run(ring, Mesh((1, 2), ("x", "y")), {d: [xs[d]] for d in range(2)})
    assert all(comms[0][r] is comms[1][r] for r in range(4))

    def fails(inputs, comm):
        if comm.rank == 0:
            raise ValueError("boom on purpose")
        return prog(inputs, comm)
    with pytest.raises(ValueError):
        rt.run(fails, MESH, {d: [xs[d]] for d in range(4)})
    seen.clear()
    rt.run(prog, MESH, {d: [xs[d]] for d in range(4)})
    after = dict(seen)
    assert all(after[r] is not comms[0][r] for r in range(4))
    seen.clear()
    monkeypatch.setenv("SPMD_COLLECTIVE_TIMEOUT", "123")
    rt.run(prog, MESH, {d: [xs[d]] for d in range(4)})
    assert all(dict(seen)[r] is not after[r] for r in range(4))
