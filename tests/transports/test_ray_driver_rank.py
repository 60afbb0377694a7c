"""Rank 0 in the driver (transports/ray/ray_driver_rank.py): what a private Ray on one
host runs: 4 ranks here, rank 0 in this process and ranks 1-3 in actors. Results,
errors, lost actors, puts and reads, checkpoints and the timeline as with every rank
in an actor (tests/transports/test_ray.py runs those on a cluster this process joined,
where every rank is an actor).
"""
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

ray = pytest.importorskip("ray")

import spmd  # noqa: E402
from spmd.errors import CollectiveError  # noqa: E402
from spmd.runtime.current_runtime import get_runtime  # noqa: E402

import collective_checks  # noqa: E402
from paths import ROOT, TESTS  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.timeout(120)]
MESH = None


@pytest.fixture(scope="module")
def rt():
    global MESH
    prev = get_runtime()
    ray_env = {k: v for k, v in os.environ.items() if k.startswith("RAY_")}
    mp = pytest.MonkeyPatch()
    mp.delenv("RAY_ADDRESS", raising=False)
    mp.delenv("SPMD_RAY_DRIVER_RANK", raising=False)
    mp.setenv("RAY_USAGE_STATS_ENABLED", "0")
    if ray.is_initialized():
        ray.shutdown()
    r = spmd.init(backend="ray", num_devices=4)
    # the actors unpickle the test programs by value: this module is not importable there
    ray.cloudpickle.register_pickle_by_value(collective_checks)
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    MESH = spmd.Mesh((4,), ("x",))
    try:
        yield r
    finally:
        spmd.init(backend="local", num_devices=prev.num_devices)
        r.shutdown()
        mp.undo()
        # ray.init sets RAY_AUTH_MODE=token in this process's environment and leaves it:
        # later tests' clusters and `spmd run` processes would inherit it
        for k in [k for k in os.environ if k.startswith("RAY_") and k not in ray_env]:
            del os.environ[k]
        os.environ.update(ray_env)


def run(rt, program, mesh=None, args=None):
    mesh = mesh or MESH
    devices = sorted(mesh.devices.reshape(-1).tolist())
    out = rt.run(program, mesh, args or {d: [] for d in devices})
    return {d: [rt.get({d: h})[d] for h in out[d]] for d in devices}


def test_rank_0_is_the_driver_and_the_others_are_actors(rt):
    where = rt.where()
    assert [w["rank"] for w in where] == [0, 1, 2, 3]
    assert where[0]["pid"] == os.getpid()
    assert len({w["pid"] for w in where}) == 4
    assert spmd.process_index() == 0 and spmd.process_count() == 1 and spmd.device_count() == 4
    # its collectives go over the links as the actors' do: shared memory with all
    peers = run(rt, _Peers())
    assert [int(v[0][0]) for v in peers.values()] == [3, 3, 3, 3], peers


def _mallocs_thresholds_fixed():
    from spmd.runtime import allocator
    return allocator._set == [True]          # (set, not asked: keep_freed_memory would set them)


def test_every_ranks_process_keeps_what_its_steps_free_as_mpis_ranks_do(rt):
    """runtime/allocator.py in the actors too: a step's buffers reuse the pages the step
    before freed, in every rank's process."""
    assert _mallocs_thresholds_fixed()
    assert all(rt.call_on(d, _mallocs_thresholds_fixed) for d in range(1, 4))


class _Peers:
    num_outputs = 1

    def __call__(self, inputs, comm):
        return [np.array([len(comm.t.shm_peers)])]


def test_every_collective_matches_numpy(rt):
    for mesh in (MESH, spmd.Mesh((2, 2), ("a", "b"), devices=[[2, 0], [3, 1]]), spmd.Mesh((3,), ("x",))):
        got = run(rt, collective_checks.CheckCollectives(big=True), mesh)
        counts = {int(v[0]) for v in got.values()}
        assert len(counts) == 1 and counts.pop() > 40, (mesh, got)


def test_puts_and_reads_copy_as_an_actor_does(rt):
    """A shard of rank 0 never shares memory with the caller's array: writing the array
    after the put, or the array read back, changes nothing held."""
    x = np.arange(300 * 300, dtype=np.float64).reshape(300, 300)     # over the inline limit
    small = np.arange(6.0)
    a = spmd.device_put(x, MESH.sharding("x", None))
    b = spmd.device_put(small, MESH.sharding(None))
    keep_x, keep_small = x.copy(), small.copy()
    x[:] = -1
    small[:] = -1
    got = a.numpy()
    np.testing.assert_array_equal(got, keep_x)
    got[:] = 7                                   # the caller may write what it read
    np.testing.assert_array_equal(a.numpy(), keep_x)
    np.testing.assert_array_equal(b.numpy(), keep_small)
    f = spmd.jit(lambda v: v * 2, in_shardings=MESH.sharding("x", None), out_shardings=MESH.sharding("x", None))
    np.testing.assert_array_equal(f(a).numpy(), 2 * keep_x)
    # a jitted call's numpy argument, placed on rank 0 without a message: a result that is
    # the argument itself does not follow the caller's later writes to it
    same = spmd.jit(lambda v: v, in_shardings=MESH.sharding("x", None), out_shardings=MESH.sharding("x", None))
    z = keep_small.repeat(100).reshape(-1, 2)
    kept = z.copy()
    out = same(z)
    z[:] = -1
    np.testing.assert_array_equal(out.numpy(), kept)


def test_mlp_same_losses_as_local(rt):
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    try:
        import mlp
    finally:
        sys.path.pop(0)
    os.environ["SPMD_BACKEND"] = "ray"
    try:
        got = mlp.main(["--steps", "4"])
    finally:
        del os.environ["SPMD_BACKEND"]
    p = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "mlp.py"), "--steps", "4"],
                       capture_output=True, text=True, timeout=100,
                       env=dict(os.environ, PYTHONPATH=ROOT, SPMD_BACKEND="local"))
    assert p.returncode == 0, p.stderr
    want = [float(v) for v in re.findall(r"loss ([\d.]+)", p.stdout)]
    assert get_runtime().name == "ray" and len(want) == 4
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_training_loop_has_the_local_runtimes_bits(rt):
    from training_programs import digest, train
    got = {b: {digest(train(backend=b))} for b in ("llvm", "numpy")}
    p = subprocess.run([sys.executable, os.path.join(TESTS, "mpi_scripts", "train_bits.py"), "1"],
                       capture_output=True, text=True, timeout=100,
                       env=dict(os.environ, PYTHONPATH=ROOT, SPMD_BACKEND="local"))
    assert p.returncode == 0, p.stderr
    want = {b: {d} for b, _, d in re.findall(r"BITS (\w+) (\d+) (\w+)", p.stdout)}
    assert got == want


# -- native all-reduces ---------------------------------------------------------------------
def _count_python_all_reduces(start):
    """In the calling rank's process: count the all_reduces RayCommunicator runs from
    Python (start=True: from now on; False: the count, and stop counting)."""
    from spmd.transports.ray.ray_communicator import RayCommunicator
    if start:
        RayCommunicator._counted = 0
        def counted(self, *a, **k):
            RayCommunicator._counted += 1
            return RayCommunicator._python_all_reduce(self, *a, **k)
        RayCommunicator._python_all_reduce = RayCommunicator._all_reduce
        RayCommunicator._all_reduce = counted
        return 0
    RayCommunicator._all_reduce = RayCommunicator._python_all_reduce
    del RayCommunicator._python_all_reduce
    return RayCommunicator._counted


def _sum_rows(x):
    return (x * 2.0).sum(axis=0)


def test_all_reduces_run_natively_between_the_ranks_of_one_host(rt):
    """A compiled program's all-reduce joins its native segments (ray_native_exchange.py):
    no rank runs it from Python."""
    x = np.random.default_rng(0).standard_normal((64, 33))
    f = spmd.jit(_sum_rows, in_shardings=MESH.sharding("x", None))
    f(x)
    rt.wait()
    for d in range(4):
        rt.call_on(d, _count_python_all_reduces, True)
    try:
        got = [f(x).numpy() for _ in range(3)]
        rt.wait()
    finally:
        counts = [rt.call_on(d, _count_python_all_reduces, False) for d in range(4)]
    assert counts == [0, 0, 0, 0]
    np.testing.assert_allclose(got[0], 2 * x.sum(axis=0), rtol=1e-12)
    assert all(g.tobytes() == got[0].tobytes() for g in got)


def _count_python(start, method):
    """In the calling rank's process: count the calls of RayCommunicator's `method` (a
    collective it runs from Python; start=True: from now on; False: the count, and stop
    counting)."""
    from spmd.transports.ray.ray_communicator import RayCommunicator
    inner = f"_python{method}"
    if start:
        RayCommunicator._counted = 0
        def counted(self, *a, **k):
            RayCommunicator._counted += 1
            return getattr(RayCommunicator, inner)(self, *a, **k)
        setattr(RayCommunicator, inner, getattr(RayCommunicator, method))
        setattr(RayCommunicator, method, counted)
        return 0
    setattr(RayCommunicator, method, getattr(RayCommunicator, inner))
    delattr(RayCommunicator, inner)
    return RayCommunicator._counted


def _gather_then_scatter(a, b):
    whole = spmd.shard(a * 2.0, MESH.sharding(None, None)) + 1.0
    return whole, a.T @ b


def test_all_gathers_and_reduce_scatters_run_natively_between_the_ranks_of_one_host(rt):
    """A compiled program's all_gather and reduce_scatter (FSDP's) join its native
    segments as its all-reduces do: no rank runs them from Python, and the results are
    the local runtime's."""
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((8, 4)), rng.standard_normal((8, 4))
    row = MESH.sharding("x", None)
    f = spmd.jit(_gather_then_scatter, in_shardings=(row, row), out_shardings=(MESH.sharding(None, None), row))
    assert [op.name for op in f.lower(a, b).graph.ops if op.opdef.needs_comm] == ["all_gather", "reduce_scatter"]
    f(a, b)
    rt.wait()
    counts = {}
    for method in ("_all_gather", "_reduce_scatter"):
        for d in range(4):
            rt.call_on(d, _count_python, True, method)
        try:
            got = [[v.numpy() for v in f(a, b)] for _ in range(3)]
            rt.wait()
        finally:
            counts[method] = [rt.call_on(d, _count_python, False, method) for d in range(4)]
    assert counts == {"_all_gather": [0, 0, 0, 0], "_reduce_scatter": [0, 0, 0, 0]}
    np.testing.assert_array_equal(got[0][0], a * 2.0 + 1.0)
    np.testing.assert_allclose(got[0][1], a.T @ b, rtol=1e-12)
    assert all(g[1].tobytes() == got[0][1].tobytes() for g in got)


def _there_and_back(a):
    t = spmd.shard(a * 2.0, MESH.sharding(None, "x")) + 1.0
    return t, spmd.shard(t * 3.0, MESH.sharding("x", None))


def test_all_to_alls_run_natively_between_the_ranks_of_one_host(rt):
    """A compiled program's all_to_alls (a split moved from rows to columns and back) join
    its native segments (the region's mailboxes, laid out block by block where the blocks
    need it): no rank runs them from Python, and the results are numpy's."""
    a = np.random.default_rng(5).standard_normal((8, 12))
    row, col = MESH.sharding("x", None), MESH.sharding(None, "x")
    f = spmd.jit(_there_and_back, in_shardings=(row,), out_shardings=(col, row))
    assert [op.name for op in f.lower(a).graph.ops if op.opdef.needs_comm] == ["all_to_all"] * 2
    f(a)
    rt.wait()
    for d in range(4):
        rt.call_on(d, _count_python, True, "_all_to_all")
    try:
        got = [[v.numpy() for v in f(a)] for _ in range(3)]
        rt.wait()
    finally:
        counts = [rt.call_on(d, _count_python, False, "_all_to_all") for d in range(4)]
    assert counts == [0, 0, 0, 0]
    for t, back in got:
        np.testing.assert_array_equal(t, a * 2.0 + 1.0)
        np.testing.assert_array_equal(back, (a * 2.0 + 1.0) * 3.0)


class _FailsOnNaN:
    """A compiled program whose run raises, before it starts, on a rank whose input holds
    a NaN: the other ranks wait in its native all-reduce for that rank's part."""

    def __init__(self, exe):
        self.exe = exe
        self.num_outputs = exe.num_outputs
        self.graph = exe.graph

    def __call__(self, inputs, comm):
        if np.isnan(inputs[0]).any():
            raise ValueError(f"boom on rank {comm.rank}, before the all-reduce")
        return self.exe(inputs, comm)


@pytest.mark.parametrize("rank", [0, 2])
def test_a_rank_that_fails_stops_the_others_native_all_reduce_and_the_next_runs_start_over(rt, monkeypatch, rank):
    """The others stop at once (the mailbox's failed cell), and the next runs of the same
    program are right: the ranks start over with new shared memory (the aborted
    all-reduce's counts reused, the ranks that posted would be a count ahead of the one
    that did not, and wait for it until the stopwatch)."""
    monkeypatch.setenv("SPMD_COLLECTIVE_TIMEOUT", "20")
    x = np.random.default_rng(1).standard_normal((64, 5))
    f = spmd.jit(_sum_rows, in_shardings=MESH.sharding("x", None))
    want = f(x).numpy()
    from spmd.jit.running import runs_of
    program = _FailsOnNaN(runs_of(f.lower(x)).program.executable)
    good = {d: [b] for d, b in enumerate(np.split(x, 4))}
    bad = {d: [b.copy()] for d, b in enumerate(np.split(x, 4))}
    bad[rank][0][3, 1] = np.nan
    rt.run(program, MESH, good)     # (its first run: the ranks agree on the shared memory)
    t0 = time.monotonic()
    with pytest.raises(ValueError, match=f"boom on rank {rank}"):
        rt.run(program, MESH, bad)
        rt.wait()
    assert time.monotonic() - t0 < 10
    for _ in range(3):
        out = rt.run(program, MESH, good)
        got = {d: rt.get({d: out[d][0]})[d] for d in range(4)}
        assert all(np.array_equal(v, want) for v in got.values()), got
    assert time.monotonic() - t0 < 10


def test_a_sweep_of_meshes_drops_every_ranks_communicators_at_the_same_run(rt, monkeypatch):
    """Past COMMUNICATORS meshes the driver has every rank drop its communicators, each at
    its next run: ranks 2 and 3 are in fewer meshes than 0 and 1, and a rank that dropped
    the whole mesh's communicator on its own would agree on new shared memory for its
    all-reduce alone, waiting for the others until the stopwatch."""
    from spmd.transports.ray import ray_runtime
    monkeypatch.setattr(ray_runtime, "COMMUNICATORS", 2)
    monkeypatch.setenv("SPMD_COLLECTIVE_TIMEOUT", "20")
    x = np.random.default_rng(2).standard_normal((64, 3))
    meshes = [MESH, spmd.Mesh((2,), ("x",)), spmd.Mesh((4,), ("y",))]
    fs = [spmd.jit(_sum_rows, in_shardings=m.sharding(m.axis_names[0], None)) for m in meshes]
    t0 = time.monotonic()
    for _ in range(3):
        for f in fs:
            np.testing.assert_allclose(f(x).numpy(), 2 * x.sum(axis=0), rtol=1e-12)
    assert time.monotonic() - t0 < 15


# -- failures -------------------------------------------------------------------------------
class _RaiseOn:
    num_outputs = 1

    def __init__(self, rank):
        self.rank = rank

    def __call__(self, inputs, comm):
        x = comm.all_reduce(np.ones(3), "x")
        if comm.rank == self.rank:
            raise ValueError(f"boom on rank {self.rank}")
        return [comm.all_reduce(x, "x")]      # the others wait here for the one that raised


@pytest.mark.parametrize("rank", [0, 1])
def test_an_exception_on_any_rank_raises_from_the_call_with_its_traceback(rt, monkeypatch, rank):
    monkeypatch.setenv("SPMD_COLLECTIVE_TIMEOUT", "30")
    t0 = time.monotonic()
    with pytest.raises(ValueError, match=f"boom on rank {rank}") as e:
        rt.run(_RaiseOn(rank), MESH, {d: [] for d in range(4)})
    assert time.monotonic() - t0 < 10
    notes = "\n".join(getattr(e.value, "__notes__", []))
    assert f"raised on rank {rank}" in notes and 'raise ValueError(f"boom on rank' in notes, notes
    assert "test_ray_driver_rank.py" in notes
    got = run(rt, collective_checks.CheckCollectives(dtypes=("int64",)))     # still usable
    assert all(int(v[0]) > 0 for v in got.values())


class _InterruptRank0:
    num_outputs = 1

    def __call__(self, inputs, comm):
        x = comm.all_reduce(np.ones(3), "x")
        if comm.rank == 0:
            raise KeyboardInterrupt          # Ctrl-C while the driver runs rank 0's part
        return [comm.all_reduce(x, "x")]


def test_ctrl_c_in_rank_0s_part_is_the_users_and_the_runtime_goes_on(rt, monkeypatch):
    """Raised as it is (not as rank 0's failure); the actors are stopped, and their
    replies to that run are not taken for the next one's."""
    monkeypatch.setenv("SPMD_COLLECTIVE_TIMEOUT", "30")
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt) as e:
        rt.run(_InterruptRank0(), MESH, {d: [] for d in range(4)})
    assert not getattr(e.value, "__notes__", None)
    assert time.monotonic() - t0 < 10
    for _ in range(2):
        got = run(rt, collective_checks.CheckCollectives(dtypes=("int64",)))
        assert all(int(v[0]) > 0 for v in got.values())


class _Rank3AfterTheSum:
    """Every rank sums; then rank 3 sleeps, or raises, past rank 0's end. A compiled
    program's stand-in (a graph with no print): its run is not waited for."""
    num_outputs = 1
    graph = type("Graph", (), {"ops": []})()

    def __init__(self, then):
        self.then = then

    def __call__(self, inputs, comm):
        x = comm.all_reduce(np.full(2, float(comm.rank)), "x")
        if comm.rank == 3 and self.then == "sleep":
            time.sleep(1.5)
        if comm.rank == 3 and self.then == "raise":
            # (once the others have their sums: a rank that fails wakes the peers still
            # waiting in this run's collective, and rank 0 would fail with it)
            time.sleep(0.3)
            raise ValueError("boom on rank 3, after the sum")
        return [x]


def test_rank_0s_small_results_are_read_without_waiting_for_the_actors(rt):
    """As MPI's rank 0 reads its own loss: the actors' part is waited for by the next
    call, which raises their failure."""
    t0 = time.monotonic()
    out = rt.run(_Rank3AfterTheSum("sleep"), MESH, {d: [] for d in range(4)})
    np.testing.assert_array_equal(rt.get({0: out[0][0]})[0], np.full(2, 6.0))
    assert time.monotonic() - t0 < 1.0, "the read waited for rank 3"
    rt.wait()
    assert time.monotonic() - t0 >= 1.5
    np.testing.assert_array_equal(rt.get({3: out[3][0]})[3], np.full(2, 6.0))

    out = rt.run(_Rank3AfterTheSum("raise"), MESH, {d: [] for d in range(4)})
    np.testing.assert_array_equal(rt.get({0: out[0][0]})[0], np.full(2, 6.0))
    with pytest.raises(ValueError, match="boom on rank 3, after the sum") as e:
        rt.get({1: out[1][0]})
    assert "raised on rank 3" in "\n".join(e.value.__notes__)
    got = run(rt, collective_checks.CheckCollectives(dtypes=("int64",)))       # still usable
    assert all(int(v[0]) > 0 for v in got.values())


class _SumOnce:
    """One sum over every rank (a compiled program's stand-in: not waited for), or
    (collective=False) each rank's own value, and no collective."""
    graph = type("Graph", (), {"ops": []})()
    num_outputs = 1

    def __init__(self, collective=True):
        self.collective = collective

    def __call__(self, inputs, comm):
        x = np.full(2, float(comm.rank))
        return [comm.all_reduce(x, "x") if self.collective else x]


@pytest.mark.parametrize("collective", [True, False])
def test_a_run_sent_after_one_that_failed_is_stopped_and_the_failure_raised(rt, monkeypatch, collective):
    """The actors get a run before the driver reads their replies to the run before: when
    that one failed on an actor after rank 0's part ended, the new run raises its failure,
    is stopped on the actors (it waits for rank 0 in its first collective) or left to end
    there, and never runs on rank 0; its replies are not taken for the next run's."""
    monkeypatch.setenv("SPMD_COLLECTIVE_TIMEOUT", "30")
    t0 = time.monotonic()
    out = rt.run(_Rank3AfterTheSum("raise"), MESH, {d: [] for d in range(4)})
    np.testing.assert_array_equal(rt.get({0: out[0][0]})[0], np.full(2, 6.0))
    with pytest.raises(ValueError, match="boom on rank 3, after the sum"):
        rt.run(_SumOnce(collective), MESH, {d: [] for d in range(4)})
    assert time.monotonic() - t0 < 10
    for _ in range(3):
        out = rt.run(_SumOnce(), MESH, {d: [] for d in range(4)})
        got = {d: rt.get({d: out[d][0]})[d] for d in range(4)}
        assert all(np.array_equal(v, np.full(2, 6.0)) for v in got.values()), got
    assert time.monotonic() - t0 < 10, "an actor was killed rather than stopped"


class _LoadsOnlyInTheDriver:
    """A program whose pickle does not load in the actors (rank 0 loads and runs it)."""
    num_outputs = 1

    def __init__(self):
        self.pid = os.getpid()

    def __setstate__(self, state):
        if state["pid"] != os.getpid():
            raise RuntimeError("this program cannot load in an actor")
        self.__dict__.update(state)

    def __call__(self, inputs, comm):
        return [comm.all_reduce(np.ones(2), "x")]     # rank 0 waits here for the others


def test_a_program_that_fails_to_load_in_an_actor_stops_rank_0(rt, monkeypatch):
    """The actors abort their peers, as for a failure in the program: rank 0, in its
    collective on the driver's thread, would otherwise wait for ever (no stopwatch)."""
    monkeypatch.delenv("SPMD_COLLECTIVE_TIMEOUT", raising=False)
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match="cannot load in an actor") as e:
        rt.run(_LoadsOnlyInTheDriver(), MESH, {d: [] for d in range(4)})
    assert time.monotonic() - t0 < 10
    assert "raised on rank" in "\n".join(e.value.__notes__)
    got = run(rt, collective_checks.CheckCollectives(dtypes=("int64",)))       # still usable
    assert all(int(v[0]) > 0 for v in got.values())


def test_an_error_in_a_jitted_step_names_the_users_line(rt):
    f = spmd.jit(lambda v: np.linalg.inv(v.reshape(3, 4)), in_shardings=MESH.sharding("x"))
    with pytest.raises(spmd.SpmdError, match=r"square.*test_ray_driver_rank.py:\d+"):
        f(np.arange(12.0))


class _KillRank1:
    num_outputs = 1

    def __call__(self, inputs, comm):
        x = comm.all_reduce(np.ones(3), "x")
        if comm.rank == 1:
            os.kill(os.getpid(), signal.SIGKILL)
        return [comm.all_reduce(x, "x")]      # rank 0, in the driver, waits here for rank 1


def test_a_killed_actor_fails_the_drivers_run_at_once_and_is_replaced(rt, monkeypatch):
    monkeypatch.delenv("SPMD_COLLECTIVE_TIMEOUT", raising=False)    # no stopwatch: the link's close tells
    a = spmd.device_put(np.arange(6.0), MESH.sharding("x"))
    before = {w["rank"]: w["pid"] for w in rt.where()}
    t0 = time.monotonic()
    with pytest.raises(CollectiveError, match=r"rank 1 (died|is lost)"):
        rt.run(_KillRank1(), MESH, {d: [] for d in range(4)})
    assert time.monotonic() - t0 < 20
    with pytest.raises(CollectiveError, match=r"rank 1 does not hold shard"):
        a.numpy()
    got = run(rt, collective_checks.CheckCollectives(dtypes=("int64",)))       # rank 1 was restarted
    assert all(int(v[0]) > 0 for v in got.values())
    after = {w["rank"]: w["pid"] for w in rt.where()}
    assert after[1] != before[1] and after[0] == before[0] == os.getpid() and all(after[r] == before[r] for r in (2, 3))


def test_what_every_rank_printed_comes_before_the_error(rt, capsys):
    def step(v):
        spmd.debug.print("rank sum {}", v.sum())
        return v * 2
    f = spmd.jit(step, in_shardings=MESH.sharding("x"), out_shardings=MESH.sharding("x"))
    np.testing.assert_array_equal(f(np.arange(8.0)).numpy(), 2 * np.arange(8.0))
    out = capsys.readouterr().out
    assert "rank sum 28.0" in out, out


# -- checkpoints and the timeline -------------------------------------------------------------
def test_checkpoint_round_trip(rt, tmp_path):
    x = np.arange(301 * 200, dtype=np.float32).reshape(301, 200)
    a = spmd.device_put(x, MESH.sharding("x", None))
    spmd.save(str(tmp_path / "ck"), {"a": a, "step": np.int64(3)})
    got = spmd.load(str(tmp_path / "ck"), {"a": spmd.Mesh((2, 2), ("a", "b")).sharding("b", "a"), "step": None})
    np.testing.assert_array_equal(got["a"].numpy(), x)
    assert got["step"] == 3
    np.testing.assert_array_equal(spmd.load(str(tmp_path / "ck"))["a"], x)


def test_timeline_has_rank_0s_track_from_the_driver_and_the_actors(rt, monkeypatch, tmp_path):
    from spmd.tools import timeline
    monkeypatch.setenv("SPMD_TRACE", str(tmp_path / "trace.json"))
    timeline.take_events()
    f = spmd.jit(lambda v: np.tanh(v).sum(), in_shardings=MESH.sharding("x"))
    np.testing.assert_allclose(float(f(np.arange(16.0))), np.tanh(np.arange(16.0)).sum())
    rt._collect_trace()
    events = timeline.take_events()
    assert {e["tid"] for e in events} == {0, 1, 2, 3}
    for r in range(4):
        mine = [e for e in events if e["tid"] == r]
        assert [e["name"] for e in mine if e["cat"] == "collective"] == ["all_reduce"], mine
        assert any(e["cat"] == "compute" for e in mine)
