"""Gradient all-reduces in buckets, started early and finished late (issue #15):
passes/combine.py (buckets of at most SPMD_BUCKET_BYTES), passes/schedule_async.py
(all_reduce_start / all_reduce_done placed around independent computation), the local
communicator's started all-reduces, and the in-flight spans of the SPMD_TRACE timeline.
MPI: tests/transports/test_mpi.py and tests/runtime/test_multihost.py; Ray: tests/transports/test_ray.py."""
import os
import threading
import time

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import spmd
from async_programs import flat, gpt_case, mlp_case, pairs
from collective_checks import check_started_all_reduces
from partition_util import check_random_jit_program
from spmd.compiler.passes import combine_collectives, schedule_async
from spmd.errors import CollectiveError
from spmd.ir.ops.names import ALL_REDUCE, MULTIPLY, TANH
from spmd.transports.local.local_runtime import LocalRuntime
from spmd.sharding import Mesh
from spmd.tools import timeline

RT = LocalRuntime()
MESH22 = spmd.Mesh((2, 2), ("data", "model"))


class _Env:
    """SPMD_BUCKET_BYTES for the lowerings made inside the block."""

    def __init__(self, value):
        self.value = value

    def __enter__(self):
        self.old = os.environ.get("SPMD_BUCKET_BYTES")
        if self.value is None:
            os.environ.pop("SPMD_BUCKET_BYTES", None)
        else:
            os.environ["SPMD_BUCKET_BYTES"] = str(self.value)

    def __exit__(self, *exc):
        if self.old is None:
            os.environ.pop("SPMD_BUCKET_BYTES", None)
        else:
            os.environ["SPMD_BUCKET_BYTES"] = self.old


@pytest.fixture(autouse=True)
def _split_around_any_work(monkeypatch):
    """These programs are small: split every collective with any computation to overlap
    (SPMD_OVERLAP_WORK=0), as the default does for a step's larger ones."""
    monkeypatch.setenv("SPMD_OVERLAP_WORK", "0")


def _lower_and_run(case, bucket, backend="llvm"):
    step, args, sh = case
    with _Env(bucket):
        f = spmd.jit(step, in_shardings=sh, backend=backend)
        low = f.lower(*args)
        out = f(*args)
    return low, flat(out)


def _combined(graph):
    """[(members, bytes)] of every all_reduce of a combined program (members: how many
    all-reduces of the partitioned program it carries)."""
    out = []
    for op in graph.ops:
        if op.opdef.collective.combinable:
            x = op.operands[0]
            src = x.producer
            n = len(src.operands) if src is not None and src.name == "concatenate" else 1
            out.append((n, x.size * np.dtype(x.dtype).itemsize, op.attrs["axes"]))
    return out


# ----------------------------------------------------------------------- the passes
@pytest.mark.parametrize("backend", ["numpy", "llvm"])
def test_mlp_step_overlaps_gradient_reductions_with_the_backward_pass(backend):
    """Small buckets: some gradient all-reduces become start/done pairs with computation
    between them; the results are bit for bit those of one bucket (the local runtime
    reduces element by element in group order, whatever the bucket)."""
    case = mlp_case(MESH22)
    low1, want = _lower_and_run(case, None, backend)       # one bucket: nothing to overlap
    assert not pairs(low1.graph)
    assert not any(c.get("async") for c in low1.report()["launched"])
    low, got = _lower_and_run(case, 300, backend)
    ps = pairs(low.graph)
    assert ps and all(work >= 1 for _, _, work in ps), ps
    assert len(got) == len(want)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
    rep, rep1 = low.report(), low1.report()
    assert rep["collectives"] == rep1["collectives"]          # the partitioner's view is unchanged
    assert rep["launched_bytes"] == rep1["launched_bytes"] == rep["comm_bytes"]
    assert sum(bool(c.get("async")) for c in rep["launched"]) == len(ps)
    assert all(c["op"] == "all_reduce" for c in rep["launched"])


@pytest.mark.slow
def test_gpt_step_under_2x2_overlaps_and_matches_one_bucket():
    case = gpt_case(MESH22)
    low1, want = _lower_and_run(case, None)
    low, got = _lower_and_run(case, 16 << 10)
    ps = pairs(low.graph)
    assert len(ps) >= 2, ps
    # the first bucket's reduction overlaps most of the rest of the backward pass
    assert max(work for _, _, work in ps) >= 50, ps
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
    # a bucket is started right after its concatenation, i.e. where its gradients are ready
    for i, _, _ in ps:
        assert low.graph.ops[i - 1].name == "concatenate" or low.graph.ops[i].operands[0].producer is not None


def test_data_parallel_buckets_start_through_the_backward_pass():
    """Data parallel: the partitioner puts each gradient's all_reduce at the optimizer's
    update of its parameter, in the parameters' order (layer 0 first, whose gradients are
    ready last). Combined, a bucket holds gradients that become ready together and starts
    where they are, with the ops that concatenate them: the starts spread over the
    backward pass instead of all standing at its end. The bits are one bucket's."""
    case = gpt_case(spmd.Mesh((4, 1), ("data", "model")), layers=3)
    low1, want = _lower_and_run(case, None)
    low, got = _lower_and_run(case, 8 << 10)
    starts = [i for i, _, _ in pairs(low.graph)]
    assert len(starts) >= 3, starts
    assert starts[-1] - starts[0] > len(low.graph.ops) // 5, (starts, len(low.graph.ops))
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)


def test_buckets_follow_the_threshold():
    """Gradients grouped in program order into buckets of at most the limit (one bigger
    gradient makes a bucket of its own); no limit: one bucket per key as before; 0:
    nothing combined. The bytes on the wire never change."""
    case = mlp_case(MESH22, dh=64)
    step, args, sh = case
    with _Env(None):
        low = spmd.jit(step, in_shardings=sh).lower(*args)
    part = low.stages["partitioned"]
    from spmd.compiler.passes import optimize
    base = optimize(part)
    before = _combined(base)
    total = sum(b for _, b, _ in before)
    for limit in (0, 4, 100, 300, 1000, 5000, 1 << 30):
        g = combine_collectives(base, limit)
        got = _combined(g)
        assert sum(b for _, b, _ in got) == total, limit
        assert sum(n for n, _, _ in got) == len(before), limit
        for n, b, _ in got:
            assert n == 1 or b <= limit, (limit, got)
        if limit == 0:
            assert all(n == 1 for n, _, _ in got)
    data = [b for _, b, axes in before if axes == ("data",)]
    g = combine_collectives(base, 1 << 30)
    assert len([1 for _, _, axes in _combined(g) if axes == ("data",)]) == 1 < len(data)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(1, 64), min_size=1, max_size=9), st.integers(0, 600))
def test_independent_gradients_bucket_greedily(sizes, limit):
    """n independent all-reduces of the given sizes (float32 elements): the buckets are
    the greedy split in program order, and the results are unchanged."""
    mesh = Mesh((2,), ("data",))
    g = spmd.ir.Graph("f")
    g.mesh = mesh
    xs = [g.add_input((n,), "float32") for n in sizes]
    outs = [g.emit(ALL_REDUCE, g.emit(TANH, x), axes=("data",), reduction="sum", group_size=2) for x in xs]
    g.outputs = [g.emit(MULTIPLY, o, o) for o in outs]
    got = [(n, b) for n, b, _ in _combined(combine_collectives(g, limit))]
    want, cur, size = [], 0, 0
    for n in sizes:
        b = 4 * n
        if cur and size + b > limit:
            want.append((cur, size))
            cur, size = 0, 0
        cur, size = cur + 1, size + b
    want.append((cur, size))
    assert got == want
    args = [np.linspace(-1, 1, n).astype(np.float32) for n in sizes]
    from spmd.backends import compile_graph
    for prog in (g, schedule_async(combine_collectives(g, limit))):
        exe = compile_graph(prog)
        res = RT.run(exe, mesh, {d: [a * (d + 1) for a in args] for d in range(2)})
        for k, a in enumerate(args):
            np.testing.assert_allclose(res[0][k], (np.tanh(a) + np.tanh(2 * a)) ** 2, rtol=1e-6)


def test_a_pair_without_work_between_stays_one_all_reduce():
    """An all_reduce whose result the next op needs has nothing to overlap: no split."""
    mesh = Mesh((2,), ("m",))
    a = np.ones((4, 8), np.float32)
    w = np.ones((8, 8), np.float32)
    f = spmd.jit(lambda a, w: np.tanh(a @ w), in_shardings=(mesh.sharding(None, "m"), mesh.sharding("m", None)))
    low = f.lower(a, w)
    assert not pairs(low.graph) and sum(op.name == "all_reduce" for op in low.graph.ops) == 1


def _little_work_between(n):
    """An all_reduce over m (of a @ w), then work on n elements that does not read it
    (exp, multiply, sum: 3n elements), then its use."""
    mesh = Mesh((2,), ("m",))
    a = np.ones((4, 8), np.float32)
    w = np.ones((8, 8), np.float32)
    b = np.ones(n, np.float32)
    shard = (mesh.sharding(None, "m"), mesh.sharding("m", None), mesh.sharding())
    return spmd.jit(lambda a, w, b: (lambda r, e: (np.tanh(r) + e.sum(), e))(a @ w, np.exp(b) * 2.0),
                    in_shardings=shard), (a, w, b)


@pytest.mark.parametrize("limit, n, split", [(None, 1000, False), ("0", 1000, True), (None, 70_000, True),
                                             ("300000", 70_000, False)])
def test_a_pair_splits_around_more_than_overlap_work_elements(monkeypatch, limit, n, split):
    """A collective is split into a start and a done only where more than SPMD_OVERLAP_WORK
    elements of computation (default 2**16) run between them; the answer is the same."""
    if limit is None:
        monkeypatch.delenv("SPMD_OVERLAP_WORK", raising=False)
    else:
        monkeypatch.setenv("SPMD_OVERLAP_WORK", limit)
    f, args = _little_work_between(n)
    low = f.lower(*args)
    assert bool(pairs(low.graph)) == split
    assert sum(op.name == "all_reduce" for op in low.graph.ops) == (0 if split else 1)
    a, w, b = args
    r, e = f(*args)
    e_want = np.exp(b) * 2.0
    np.testing.assert_allclose(np.asarray(r), np.tanh(a @ w) + e_want.sum(), rtol=1e-4)   # (a long float32 sum)
    np.testing.assert_allclose(np.asarray(e), e_want, rtol=1e-6)


def test_overlap_work_setting_is_checked(monkeypatch):
    from spmd.compiler.passes.schedule_async import overlap_work
    monkeypatch.setenv("SPMD_OVERLAP_WORK", "-1")
    with pytest.raises(ValueError, match="SPMD_OVERLAP_WORK"):
        overlap_work()
    monkeypatch.setenv("SPMD_OVERLAP_WORK", "many")
    with pytest.raises(ValueError, match="not a number"):
        overlap_work()
    monkeypatch.setenv("SPMD_OVERLAP_WORK", "5e3")
    assert overlap_work() == 5000


def test_random_programs_with_every_all_reduce_on_its_own(monkeypatch):
    """The random partitioned programs, with buckets of 0 bytes (every all-reduce alone,
    each started as early and finished as late as it can be): same answers as numpy.
    Some of them do get pairs, so the split is exercised."""
    from spmd.compiler import pipeline
    monkeypatch.setenv("SPMD_PROGRAM_CACHE", "0")          # every stage really runs
    made = []

    def counting(graph):
        g = schedule_async(graph)
        made.append(len(pairs(g)))
        return g
    monkeypatch.setattr(pipeline, "OPTIMIZE", tuple((n, counting if n == "schedule" else f)
                                                    for n, f in pipeline.OPTIMIZE))
    meshes = [Mesh((2,), ("x",)), Mesh((4,), ("x",)), Mesh((2, 2), ("x", "y"))]
    with _Env(0):
        for seed in range(40):
            check_random_jit_program(seed, meshes[seed % 3], even=seed % 2 == 0)
    assert len(made) >= 40 and sum(n > 0 for n in made) >= 3, made


def test_random_programs_with_every_all_reduce_blocking_where_first_read(monkeypatch):
    """The random partitioned programs in the walk's order, every all-reduce left one
    blocking call where its result is first read, after the computation that does not
    need it (what a collective with little to overlap would get if the program were
    rebuilt): same answers as numpy. Some programs do get a collective moved past work."""
    from spmd.compiler import pipeline
    from spmd.compiler.passes.schedule_async import async_order, earliest_first, rebuild
    monkeypatch.setenv("SPMD_PROGRAM_CACHE", "0")          # every stage really runs
    moved = []

    def blocking_late(graph):
        if not any(op.opdef.collective.async_pair for op in graph.ops):
            return graph
        items, overlapped = async_order(graph, earliest_first(graph))
        g = rebuild(graph, items, dict.fromkeys(overlapped, False))
        assert not pairs(g)
        moved.append([op.name for op in g.ops] != [op.name for op in graph.ops])
        return g
    monkeypatch.setattr(pipeline, "OPTIMIZE", tuple((n, blocking_late if n == "schedule" else f)
                                                    for n, f in pipeline.OPTIMIZE))
    meshes = [Mesh((2,), ("x",)), Mesh((4,), ("x",)), Mesh((2, 2), ("x", "y"))]
    with _Env(0):
        for seed in range(40):
            check_random_jit_program(seed, meshes[seed % 3], even=seed % 2 == 0)
    assert sum(moved) >= 3, moved


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2 ** 31 - 1), st.booleans())
def test_random_annotated_programs_with_small_buckets(seed, even):
    meshes = [Mesh((2,), ("x",)), Mesh((4,), ("x",)), Mesh((2, 2), ("x", "y"))]
    with _Env(seed % 200):
        check_random_jit_program(seed, meshes[seed % 3], even)


# ----------------------------------------------------------------------- the local runtime
@pytest.mark.parametrize("mesh", [Mesh((2,), ("x",)), Mesh((4,), ("x",)), Mesh((2, 2), ("x", "y")),
                                  Mesh((2, 2), ("x", "y"), devices=[[3, 1], [0, 2]])])
def test_started_all_reduces_match_numpy_on_local(mesh):
    out = RT.run(lambda inputs, comm: [np.array(check_started_all_reduces(comm, big=True))], mesh,
                 {d: [] for d in range(mesh.size)})
    counts = {int(v[0]) for v in out.values()}
    assert len(counts) == 1 and counts.pop() >= 15


def test_a_rank_failing_while_an_all_reduce_is_in_flight_fails_the_others_promptly():
    mesh = Mesh((4,), ("x",))

    def prog(inputs, comm):
        h = comm.all_reduce_start(np.ones(100_000), ("x",))
        if comm.rank == 2:
            raise ValueError("boom while in flight")
        return [comm.wait(h)]

    t0 = time.monotonic()
    with pytest.raises(ValueError, match="boom while in flight"):
        RT.run(prog, mesh, {d: [] for d in range(4)})
    assert time.monotonic() - t0 < 5


def test_a_rank_that_never_starts_is_named(monkeypatch):
    monkeypatch.setenv("SPMD_COLLECTIVE_TIMEOUT", "60")
    mesh = Mesh((2, 2), ("x", "y"))

    def prog(inputs, comm):
        if comm.rank == 1:
            return [np.ones(3)]
        return [comm.wait(comm.all_reduce_start(np.ones(3), ("x", "y")))]

    t0 = time.monotonic()
    with pytest.raises(CollectiveError, match=r"rank\(s\) \[1\] finished the program without joining"):
        RT.run(prog, mesh, {d: [] for d in range(4)})
    assert time.monotonic() - t0 < 5


def test_collectives_between_start_and_wait_do_not_deadlock():
    """Ranks run at different speeds; each starts two reductions on one group, runs
    blocking collectives on the other axis, waits in the other order."""
    mesh = Mesh((2, 2), ("x", "y"))

    def prog(inputs, comm):
        time.sleep(0.01 * comm.rank)
        big = np.full((200, 100), float(comm.rank))            # 160 KB: the block-wise path
        h1 = comm.all_reduce_start(big, ("x",))
        h2 = comm.all_reduce_start(np.arange(3.0) * comm.rank, ("y",), "max")
        s = comm.all_reduce(np.array(1.0), ("y",))
        g = comm.all_gather(np.array([comm.rank]), ("x", "y"), 0)
        b = comm.wait(h2)
        a = comm.wait(h1)
        return [a, b, s, g]

    out = RT.run(prog, mesh, {d: [] for d in range(4)})
    for d in range(4):
        a, b, s, g = out[d]
        col = [r for r in range(4) if r % 2 == d % 2]
        row = [r for r in range(4) if r // 2 == d // 2]
        assert np.all(a == sum(col)) and np.array_equal(b, np.arange(3.0) * max(row))
        assert s == 2 and g.tolist() == [0, 1, 2, 3]


# ----------------------------------------------------------------------- the timeline
def test_timeline_shows_each_reduction_in_flight_with_compute_inside(monkeypatch, tmp_path):
    import json
    monkeypatch.setenv("SPMD_TRACE", str(tmp_path / "t.json"))
    timeline.take_events()
    step, args, sh = mlp_case(MESH22)
    with _Env(300):
        f = spmd.jit(step, in_shardings=sh)
        n_pairs = len(pairs(f.lower(*args).graph))
        f(*args)
    events = timeline.take_events()
    for rank in range(4):
        mine = [e for e in events if e["tid"] == rank]
        b = [e for e in mine if e["ph"] == "b" and e["cat"] == "inflight"]
        e = {x["id"]: x for x in mine if x["ph"] == "e" and x["cat"] == "inflight"}
        assert len(b) == n_pairs >= 1 and set(e) == {x["id"] for x in b}
        for x in b:
            t0, t1 = x["ts"], e[x["id"]]["ts"]
            inside = [s for s in mine if s["ph"] == "X" and s["cat"] == "compute" and t0 <= s["ts"]
                      and s["ts"] + s["dur"] <= t1]
            assert t1 >= t0 and inside, (x, t0, t1)
            assert x["name"] == "all_reduce in flight" and x["args"]["bytes"] > 0
    timeline.write(str(tmp_path / "t.json"), events)
    data = json.loads((tmp_path / "t.json").read_text())
    assert sum(ev["ph"] == "b" for ev in data["traceEvents"]) == 4 * n_pairs


def test_nothing_is_left_in_flight_after_a_step(monkeypatch):
    """The communicator's started reductions leave nothing in flight on any rank after a
    step (run step by step: natively the local ranks' reductions do not go through it,
    tests/transports/test_local_native_reduce.py)."""
    monkeypatch.setenv("SPMD_NATIVE", "0")
    step, args, sh = mlp_case(MESH22)
    left = []
    from spmd.transports.local import local_communicator as local

    orig = local.LocalCommunicator.wait

    def wait(self, h):
        r = orig(self, h)
        left.append(self.in_flight())
        return r
    local.LocalCommunicator.wait = wait
    try:
        with _Env(300):
            spmd.jit(step, in_shardings=sh)(*args)
    finally:
        local.LocalCommunicator.wait = orig
    assert left and left.count(0) >= 4
    assert threading.active_count() < 100


def test_pairs_round_trip_through_the_text_form():
    from spmd.ir import parse_graph
    from spmd.ir.text import print_graph
    step, args, sh = mlp_case(MESH22)
    with _Env(300):
        low = spmd.jit(step, in_shardings=sh).lower(*args)
    text = print_graph(low.graph)
    assert "all_reduce_start" in text and "all_reduce_done" in text
    back = parse_graph(text)
    assert print_graph(back) == text and len(pairs(back)) == len(pairs(low.graph)) >= 1


def test_llvm_memory_plan_keeps_a_buffer_in_flight_alive():
    """The done reads the start's operand, so the LLVM memory plan never hands that
    buffer to a value made while the reduction is in flight."""
    from spmd.backends.llvm import compile_llvm
    step, args, sh = gpt_case(MESH22, d=32, layers=1)
    with _Env(4096):
        low = spmd.jit(step, in_shardings=sh).lower(*args)
    exe = compile_llvm(low.graph)
    mem, steps = exe.memory, exe.steps
    where = {id(s): k for k, s in enumerate(steps)}
    checked = 0
    for k, s in enumerate(steps):
        if getattr(getattr(getattr(s, "opdef", None), "collective", None), "phase", None) != "start":
            continue
        done = next(t for t in steps if getattr(t, "operands", None) and s.result in t.operands)
        x = s.operands[0]
        slot = mem.slot_of.get(x)
        for t in steps[k + 1:where[id(done)]]:
            made = t.kernel.outputs if hasattr(t, "kernel") else t.results
            assert slot is None or all(mem.slot_of.get(v) != slot for v in made), (x, t)
        checked += slot is not None
    assert checked >= 2           # (buckets are concatenations: kernel outputs in planned slots)
    # and the compiled program computes what the numpy backend does
    with _Env(4096):
        a = flat(spmd.jit(step, in_shardings=sh)(*args))
        b = flat(spmd.jit(step, in_shardings=sh, backend="numpy")(*args))
    for u, v in zip(a, b):
        np.testing.assert_allclose(u, v, rtol=1e-4, atol=1e-5)
