"""The Ray backend, for real: 4 rank actors on a two-node ray.cluster_utils.Cluster
(both nodes on this machine, every port on loopback, small object stores).

One cluster for the module (starting one takes ~10 s). The runtime under test is the
global one (spmd.init(backend="ray")), so jit runs on it; the module restores a local
runtime when it is done.
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
from gpt_programs import train_gpt  # noqa: E402
from paths import ROOT, TESTS

pytestmark = [pytest.mark.ray, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def cluster():
    from ray.cluster_utils import Cluster

    from spmd.transports.ray.ray_placement import LOOPBACK
    node = dict(num_cpus=4, node_ip_address=LOOPBACK, object_store_memory=128 << 20)
    prev = get_runtime()
    mp = pytest.MonkeyPatch()
    mp.setenv("SPMD_RAY_STRATEGY", "SPREAD")       # two ranks on each node
    c = Cluster(initialize_head=True, head_node_args=dict(node, include_dashboard=False))
    c.add_node(**node)
    ray.init(address=c.address, _node_ip_address=LOOPBACK, log_to_driver=True)
    # the actors unpickle the test programs by value: this module is not importable there
    ray.cloudpickle.register_pickle_by_value(collective_checks)
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    try:
        rt = spmd.init(backend="ray", num_devices=4)
        yield c, rt
    finally:
        spmd.init(backend="local", num_devices=prev.num_devices)
        ray.shutdown()
        c.shutdown()
        mp.undo()


def meshes():
    return [spmd.Mesh((4,), ("x",)), spmd.Mesh((2, 2), ("a", "b")),
            spmd.Mesh((2, 2), ("a", "b"), devices=[[2, 0], [3, 1]]), spmd.Mesh((2,), ("x",))]


def run(rt, program, mesh, args=None):
    devices = sorted(mesh.devices.reshape(-1).tolist())
    out = rt.run(program, mesh, args or {d: [] for d in devices})
    return {d: [rt.get({d: h})[d] for h in out[d]] for d in devices}


def test_ranks_are_actors_spread_over_two_nodes(cluster):
    _, rt = cluster
    where = rt.where()
    assert [w["rank"] for w in where] == [0, 1, 2, 3]
    assert len({w["node"] for w in where}) == 2
    assert len({w["pid"] for w in where}) == 4 and os.getpid() not in {w["pid"] for w in where}
    assert spmd.process_index() == 0 and spmd.process_count() == 1 and spmd.device_count() == 4


def test_ranks_that_do_not_fit_fail_naming_the_cluster_and_hold_nothing(cluster, monkeypatch):
    """The rank actors are created with their placement group; when it cannot be placed,
    it is removed (and they go with it)."""
    from ray.util import placement_group_table

    from spmd.errors import SpmdError
    from spmd.transports.ray.ray_runtime import RayRuntime
    monkeypatch.setenv("SPMD_RAY_PLACEMENT_TIMEOUT", "1")
    before = {k for k, v in placement_group_table().items() if v["state"] != "REMOVED"}
    with pytest.raises(SpmdError, match=r"could not place 16 ranks of 1 CPU each .* the cluster has"):
        RayRuntime(16)
    assert {k for k, v in placement_group_table().items() if v["state"] != "REMOVED"} == before
    _, rt = cluster
    assert len({w["pid"] for w in rt.where()}) == 4


class _NoRay:
    """The collective checks with ray.put and actor calls forbidden in the actor; returns
    [checks, peers in shared memory, hosts] as this rank's transport found them."""
    num_outputs = 1

    def __call__(self, inputs, comm):
        import ray.actor

        def forbidden(*args, **kwargs):
            raise AssertionError("a collective went through Ray")
        put, remote = ray.put, ray.actor.ActorMethod.remote
        ray.put, ray.actor.ActorMethod.remote = forbidden, forbidden
        try:
            n = collective_checks.check_collectives(comm, ("float32", "int64"), big=True)
        finally:
            ray.put, ray.actor.ActorMethod.remote = put, remote
        return [np.array([n, len(comm.t.shm_peers), len(set(comm.t.hosts.values()))])]


def test_collectives_go_over_the_links_not_through_ray(cluster):
    """The 4 ranks (two Ray nodes on one machine) map each other's memory; no collective
    puts anything in Ray's object store or calls an actor."""
    _, rt = cluster
    got = run(rt, _NoRay(), spmd.Mesh((2, 2), ("a", "b")))
    assert all(v[0][0] > 20 and v[0][1:].tolist() == [3, 1] for v in got.values()), got


def test_every_collective_matches_numpy(cluster):
    _, rt = cluster
    for mesh in meshes():
        got = run(rt, collective_checks.CheckCollectives(big=True), mesh)
        counts = {int(v[0]) for v in got.values()}
        assert len(counts) == 1 and counts.pop() > 40, (mesh, got)


class _Thresholds:
    """The checks with some of transports/ray/ray_communicator.py's thresholds changed on every rank:
    block-wise all_reduces, or every collective written into the receivers' buffers."""
    num_outputs = 1

    def __init__(self, dtypes, big, **thresholds):
        self.dtypes, self.big, self.thresholds = dtypes, big, thresholds

    def __call__(self, inputs, comm):
        import spmd.transports.ray.ray_communicator as R
        old = {k: getattr(R, k) for k in self.thresholds}
        for k, v in self.thresholds.items():
            setattr(R, k, v)
        try:
            return [np.array(collective_checks.check_collectives(comm, self.dtypes, big=self.big))]
        finally:
            for k, v in old.items():
                setattr(R, k, v)


def test_blockwise_all_reduce_matches_numpy(cluster):
    _, rt = cluster
    for mesh in meshes()[:2]:
        got = run(rt, _Thresholds(("float64", "int64", "bool"), True, BLOCKWISE_BYTES=1), mesh)
        assert len({int(v[0]) for v in got.values()}) == 1, got


class _Large:
    """All_gather, all_to_all, reduce_scatter and all_reduce of a few MB (written by the
    senders into the receivers' buffers on one host), against numpy."""
    num_outputs = 1

    def __call__(self, inputs, comm):
        group = comm.mesh.group(comm.rank, comm.mesh.axis_names)
        G, i, axes = len(group), group.index(comm.rank), comm.mesh.axis_names
        xs = [np.random.default_rng(d).standard_normal((G * 64, 1024)) for d in group]     # 512 KB x G
        assert np.array_equal(comm.all_gather(xs[i], axes, 1), np.concatenate(xs, axis=1))
        got = comm.all_to_all(xs[i], axes, 0, 1)
        assert np.array_equal(got, np.concatenate([np.split(x, G)[i] for x in xs], axis=1))
        want = collective_checks.reduce_in_order("sum", xs)
        assert np.array_equal(comm.reduce_scatter(xs[i], axes, 0), np.split(want, G)[i])
        assert np.array_equal(comm.all_reduce(xs[i], axes), want)
        return [np.array(4)]


def test_results_written_by_their_senders_match_numpy(cluster):
    _, rt = cluster
    for mesh in meshes()[:3]:
        got = run(rt, _Large(), mesh)
        assert all(int(v[0]) == 4 for v in got.values()), got
        got = run(rt, _Thresholds(("float64", "int32", "bool"), False, PUSH_BYTES=1), mesh)
        assert len({int(v[0]) for v in got.values()}) == 1, got


class _Mismatch:
    """Rank 1 calls all_gather where the others call all_reduce."""
    num_outputs = 1

    def __call__(self, inputs, comm):
        x = np.ones(4)
        return [comm.all_gather(x, "x") if comm.rank == 1 else comm.all_reduce(x, "x")]


def test_a_group_that_disagrees_on_the_call_fails_naming_the_ranks(cluster):
    _, rt = cluster
    with pytest.raises(CollectiveError, match=r"does not agree.*rank\(s\) \[(1|0, 2, 3)\] called"):
        rt.run(_Mismatch(), spmd.Mesh((4,), ("x",)), {d: [] for d in range(4)})


def in_their_actors(a, replicas_share=False):
    """Every shard of Array a is held by its own device's actor, not Ray's object store
    (replicas_share: or by the actor of a device holding the same replica, loaded once)."""
    from spmd.transports.ray.ray_shards import Shard
    for d, h in a._handles.items():
        owners = {e for e, g in a._handles.items() if g is h} if replicas_share else {d}
        if not (isinstance(h, Shard) and h.device in owners):
            return False
    return True


def test_arrays_live_in_the_actors_and_round_trip(cluster):
    _, rt = cluster
    mesh = spmd.Mesh((2, 2), ("data", "model"))
    x = np.arange(7 * 6, dtype=np.float32).reshape(7, 6)
    a = spmd.device_put(x, mesh.sharding("data", "model"))
    assert in_their_actors(a)
    np.testing.assert_array_equal(a.numpy(), x)
    f = spmd.jit(lambda v: (v * 2).sum(axis=0), in_shardings=mesh.sharding("data", "model"))
    out = f(a)
    assert isinstance(out, spmd.Array) and in_their_actors(out)
    np.testing.assert_allclose(out.numpy(), (x * 2).sum(axis=0))
    # the result feeds the next call without leaving the cluster
    g = spmd.jit(lambda v: v + 1, in_shardings=out.sharding)
    np.testing.assert_allclose(g(out).numpy(), (x * 2).sum(axis=0) + 1)


def test_half_dtypes_travel_and_sum_as_on_every_backend(cluster):
    """float16 / bfloat16: every collective over the actors' links (2 bytes an element,
    float32 sums in group order), and a bfloat16 program on arrays held by the actors."""
    _, rt = cluster
    for mesh in meshes()[:2]:
        got = run(rt, collective_checks.CheckHalfCollectives(), mesh)
        counts = {int(v[0]) for v in got.values()}
        assert len(counts) == 1 and counts.pop() >= 20, (mesh, got)
    mesh = spmd.Mesh((2, 2), ("data", "model"))
    x = (np.arange(7 * 6).reshape(7, 6) / 5).astype(spmd.bfloat16)
    a = spmd.device_put(x, mesh.sharding("data", "model"))
    out = spmd.jit(lambda v: (v * 2).sum(axis=0), in_shardings=mesh.sharding("data", "model"))(a)
    assert out.dtype == np.dtype(spmd.bfloat16)
    np.testing.assert_allclose(out.numpy().astype(np.float32), (x.astype(np.float32) * 2).sum(axis=0), rtol=2e-2)


def test_eager_numpy_on_arrays_in_the_actors(cluster):
    """Eager mode (spmd/eager/) on Ray: CG with a Python while loop, the shards staying
    in the actors; the same iterates as numpy."""
    from eager_programs import cg, spd_problem
    mesh = spmd.Mesh((4,), ("x",))
    A, b = spd_problem(16)
    x, norms = cg(spmd.device_put(A, mesh.sharding("x", None)), spmd.device_put(b, mesh.sharding("x")))
    xw, nw = cg(A, b)
    assert isinstance(x, spmd.Array) and x.sharding == mesh.sharding("x")
    assert in_their_actors(x)
    np.testing.assert_allclose(x.numpy(), xw, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(norms, nw, rtol=1e-9)


def test_checkpoint_round_trip_from_the_actors(cluster, tmp_path):
    _, rt = cluster
    mesh = spmd.Mesh((2, 2), ("data", "model"))
    x = np.arange(300 * 200, dtype=np.float32).reshape(300, 200)     # shards over Ray's inline limit
    a = spmd.device_put(x, mesh.sharding("data", "model"))

    def driver_reads(handles):
        raise AssertionError("the driver fetched shards: the actors should do the checkpoint's I/O")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(rt, "get", driver_reads)
        spmd.save(str(tmp_path / "ck"), {"a": a, "step": np.int64(3)})
        got = spmd.load(str(tmp_path / "ck"), {"a": mesh.sharding("model", None), "step": None})
    # each loaded shard was made by, and stays in, its device's actor
    assert isinstance(got["a"], spmd.Array) and in_their_actors(got["a"], replicas_share=True)
    np.testing.assert_array_equal(got["a"].numpy(), x)
    assert got["step"] == 3


@pytest.fixture
def messages(monkeypatch):
    """The operations the driver sends to the actors from now on ("run", "fetch", ...),
    and how often it waited on Ray itself (ray.get)."""
    from spmd.transports.ray.ray_control import Channel
    sent = {"ops": [], "ray.get": 0}
    send, send_packed, get = Channel.send, Channel.send_packed, ray.get

    def counted_send(self, message, by_value=False):
        sent["ops"].append(message[0])
        return send(self, message, by_value)

    def counted_packed(self, parts):
        sent["ops"].append("run")              # runs go packed, made before any is sent
        return send_packed(self, parts)

    def counted_get(*a, **k):
        sent["ray.get"] += 1
        return get(*a, **k)
    monkeypatch.setattr(Channel, "send", counted_send)
    monkeypatch.setattr(Channel, "send_packed", counted_packed)
    monkeypatch.setattr(ray, "get", counted_get)
    return sent


def test_a_step_is_one_message_per_rank_and_its_loss_comes_with_the_reply(cluster, messages):
    """A jitted step: one message to each rank, nothing through Ray; its scalar result is
    read with no further message; a big result is read with one fetch per rank."""
    mesh = spmd.Mesh((4,), ("x",))
    x = np.arange(1 << 16, dtype=np.float64) / 7          # 128 KB a shard: stays in the actors
    f = spmd.jit(lambda v: ((v * v).sum(), v * 2), in_shardings=mesh.sharding("x"))
    a = spmd.device_put(x, mesh.sharding("x"))
    f(a)                                                   # compiled, and shipped to the actors
    messages["ops"].clear()
    loss, b = f(a)
    assert messages["ops"] == ["run"] * 4
    np.testing.assert_allclose(float(loss), (x * x).sum(), rtol=1e-12)
    assert messages["ops"] == ["run"] * 4, "reading the loss sent a message"
    np.testing.assert_array_equal(b.numpy(), x * 2)
    assert sorted(messages["ops"][4:]) == ["fetch"] * 4
    assert messages["ray.get"] == 0


def _small_values(rank):
    import ml_dtypes
    return [np.array(rank % 2 == 0), np.arange(3, dtype=np.int8) - rank, np.array([2 ** 63 + rank], np.uint64),
            np.array(1.5 + 2j * rank, np.complex128), np.full((2, 3), rank, np.float16),
            np.zeros((2, 0), np.float32), np.array([rank, -1.25], ml_dtypes.bfloat16),
            np.array([(rank, 0.5)], [("a", "<i4"), ("b", "<f8")]), np.asfortranarray(np.eye(3) * rank)[:, ::2]]


class _SmallValues:
    num_outputs = 9

    def __call__(self, inputs, comm):
        return _small_values(comm.rank)


def test_small_results_of_every_dtype_come_with_the_reply_as_numpy_made_them(cluster, messages):
    """A result small enough to come with its run's reply comes with its dtype, shape and
    values (bool, ints, unsigned, complex, halves, bfloat16, a structured dtype, empty,
    a non-contiguous view), read-only, with no message of its own."""
    _, rt = cluster
    mesh = spmd.Mesh((4,), ("x",))
    outs = rt.run(_SmallValues(), mesh, {d: [] for d in range(4)})
    messages["ops"].clear()
    for k in range(_SmallValues.num_outputs):
        got = rt.get({d: outs[d][k] for d in range(4)})
        for d in range(4):
            want = _small_values(d)[k]
            assert got[d].dtype == want.dtype and got[d].shape == want.shape, (k, d, got[d])
            np.testing.assert_array_equal(got[d], want)
            assert not got[d].flags.writeable
    assert messages["ops"] == [], "a small result was fetched"


def test_a_run_carries_its_program_and_mesh_only_the_first_time(cluster, monkeypatch):
    """The program and its mesh go to each actor with its first run there; later runs
    name them by key (the mesh is not pickled and unpickled again each step)."""
    from spmd.transports.ray import ray_runtime
    packed, real = [], ray_runtime.pack
    monkeypatch.setattr(ray_runtime, "pack", lambda obj, *a, **k: packed.append(obj) or real(obj, *a, **k))
    mesh = spmd.Mesh((4,), ("x",))
    f = spmd.jit(lambda v: v * 2 + 1, in_shardings=mesh.sharding("x"))
    for i in range(3):
        np.testing.assert_array_equal(f(np.arange(8.0) + i).numpy(), 2 * (np.arange(8.0) + i) + 1)
    runs = [m[1] for m in packed if m[0] == "run"]
    assert len(runs) == 12
    assert [r[2] is not None for r in runs] == [True] * 4 + [False] * 8     # the pickle, first run only
    assert not any(isinstance(a, spmd.Mesh) for r in runs for a in r)


class _Where:
    """A program: the devices and shape of the mesh it runs on."""
    num_outputs = 2

    def __call__(self, inputs, comm):
        return [np.array(comm.mesh.devices), np.array(comm.mesh.shape)]


def test_one_program_run_on_several_meshes_sees_each(cluster):
    """A program run on several meshes is shipped for each: every run sees the mesh it
    was run on."""
    _, rt = cluster
    where = _Where()
    for _ in range(2):
        for mesh in meshes():
            for d, (devices, shape) in run(rt, where, mesh).items():
                np.testing.assert_array_equal(devices, mesh.devices)
                np.testing.assert_array_equal(shape, mesh.shape)


def test_many_steps_in_a_row_keep_every_result_right(cluster):
    """Forty steps, their small results read only after the last one: each is that
    step's value (numpy's), and so is the state the steps carried along."""
    mesh = spmd.Mesh((4,), ("x",))
    step = spmd.jit(lambda v: (v * 0.5 + 1, (v * v).sum(), v[:3] * 1), in_shardings=mesh.sharding("x"))
    u = spmd.device_put(np.arange(64.0), mesh.sharding("x"))
    w, got, want = np.arange(64.0), [], []
    for _ in range(40):
        want.append(((w * w).sum(), w[:3].copy()))
        u, s, head = step(u)
        got.append((s, head))
        w = w * 0.5 + 1
    for (s, head), (ws, wh) in zip(got, want):
        np.testing.assert_allclose(float(s), ws, rtol=1e-13)      # summed in another order
        np.testing.assert_array_equal(head.numpy(), wh)
    np.testing.assert_array_equal(u.numpy(), w)


class _PrintThenRaiseOnRank2:
    num_outputs = 1

    def __call__(self, inputs, comm):
        comm.output.append(f"rank {comm.rank} was here\n")
        x = comm.all_reduce(np.ones(3), "x")
        if comm.rank == 2:
            raise ValueError("boom after printing")
        return [comm.all_reduce(x, "x")]


def test_what_every_rank_printed_is_shown_when_one_fails(cluster, capsys):
    _, rt = cluster
    with pytest.raises(ValueError, match="boom after printing"):
        rt.run(_PrintThenRaiseOnRank2(), spmd.Mesh((4,), ("x",)), {d: [] for d in range(4)})
    out = capsys.readouterr().out
    assert [f"rank {r} was here" for r in range(4)] == [line for line in out.splitlines() if "was here" in line]


class _Unpicklable(Exception):
    def __init__(self):
        super().__init__("cannot travel")
        import threading
        self.lock = threading.Lock()


class _RaiseUnpicklableOnRank1:
    num_outputs = 1

    def __call__(self, inputs, comm):
        if comm.rank == 1:
            raise _Unpicklable()
        return [comm.all_reduce(np.ones(2), "x")]


def test_an_error_that_does_not_pickle_comes_as_text_naming_its_rank(cluster):
    _, rt = cluster
    with pytest.raises(spmd.SpmdError, match=r"(?s)rank 1 failed on the ray runtime: _Unpicklable: cannot "
                                             r"travel.*raise _Unpicklable\(\)"):
        rt.run(_RaiseUnpicklableOnRank1(), spmd.Mesh((4,), ("x",)), {d: [] for d in range(4)})
    got = run(rt, collective_checks.CheckCollectives(dtypes=("int64",)), spmd.Mesh((4,), ("x",)))
    assert all(int(v[0]) > 0 for v in got.values())          # the runtime is still usable


def test_a_replica_loaded_once_is_copied_to_the_other_ranks_once(cluster, tmp_path, messages):
    """A checkpoint loads a replicated shard on one actor; the first run copies it to
    the ranks that need it, later runs read their copies (no fetch)."""
    mesh = spmd.Mesh((2, 2), ("data", "model"))
    x = np.arange(300 * 200, dtype=np.float32).reshape(300, 200)
    spmd.save(str(tmp_path / "ck"), {"a": x})
    a = spmd.load(str(tmp_path / "ck"), {"a": mesh.sharding("data", None)})["a"]
    f = spmd.jit(lambda v: v.sum(axis=1), in_shardings=mesh.sharding("data", None))
    np.testing.assert_allclose(f(a).numpy(), x.sum(axis=1), rtol=1e-5)
    messages["ops"].clear()
    np.testing.assert_allclose(f(a).numpy(), x.sum(axis=1), rtol=1e-5)
    assert messages["ops"] == ["run"] * 4           # no fetch of the replica, no put (the result is small)


class _Compiled:
    """Marks a test program as compiled (a graph with no print): the runtime does not
    wait for its run."""
    graph = type("Graph", (), {"ops": []})()


class _SlowSum(_Compiled):
    num_outputs = 1

    def __call__(self, inputs, comm):
        time.sleep(1.0)
        return [comm.all_reduce(np.full(2, float(comm.rank)), "x")]


class _RaiseOnRank2Later(_Compiled):
    num_outputs = 1

    def __call__(self, inputs, comm):
        if comm.rank == 2:
            raise ValueError("boom, read later")
        return [comm.all_reduce(np.ones(2), "x")]


def test_a_run_returns_before_its_ranks_end_and_a_read_waits_for_it(cluster):
    _, rt = cluster
    mesh = spmd.Mesh((4,), ("x",))
    t0 = time.monotonic()
    out = rt.run(_SlowSum(), mesh, {d: [] for d in range(4)})
    assert time.monotonic() - t0 < 0.5, "the driver waited for the ranks"
    got = rt.get({d: out[d][0] for d in range(4)})
    assert time.monotonic() - t0 >= 1.0
    assert all(np.array_equal(v, np.full(2, 6.0)) for v in got.values())


def test_a_failed_run_raises_its_ranks_error_at_the_next_call(cluster, monkeypatch):
    """Not when it is sent: at the next read, or the next run (which is then not sent)."""
    _, rt = cluster
    monkeypatch.setenv("SPMD_COLLECTIVE_TIMEOUT", "30")
    mesh = spmd.Mesh((4,), ("x",))
    out = rt.run(_RaiseOnRank2Later(), mesh, {d: [] for d in range(4)})
    with pytest.raises(ValueError, match="boom, read later") as e:
        rt.get({0: out[0][0]})
    assert "raised on rank 2" in "\n".join(e.value.__notes__)
    rt.run(_RaiseOnRank2Later(), mesh, {d: [] for d in range(4)})
    with pytest.raises(ValueError, match="boom, read later"):
        rt.run(_SlowSum(), mesh, {d: [] for d in range(4)})
    rt.wait()                                   # raised once: nothing in flight now
    got = run(rt, collective_checks.CheckCollectives(dtypes=("int64",)), mesh)
    assert all(int(v[0]) > 0 for v in got.values())


def test_a_step_that_prints_is_waited_for_so_its_lines_come_first(cluster, capsys):
    mesh = spmd.Mesh((4,), ("x",))

    def step(v):
        spmd.debug.print("total {}", v.sum())
        return v + 1
    f = spmd.jit(step, in_shardings=mesh.sharding("x"))
    f(np.arange(8.0))
    print("after the step")
    out = capsys.readouterr().out
    assert out.index("total 28.0") < out.index("after the step"), out


def test_the_error_raised_names_the_cause_first():
    """A rank's own exception before a dead actor, a dead actor before the peers that
    failed for want of it (their CollectiveError), whatever order the replies came in."""
    from spmd.transports.ray.ray_runtime import RankFailed, RankLost, _first_error
    peer = RankFailed(CollectiveError("all_reduce: rank 2 is lost"), "CollectiveError: lost", "tb")
    err = _first_error([(0, peer), (2, RankLost("the connection was closed")), (1, peer)])
    assert isinstance(err, CollectiveError) and str(err).startswith("rank 2 died")
    own = RankFailed(ValueError("bad input"), "ValueError: bad input", "Traceback: here")
    err = _first_error([(0, peer), (2, RankLost("closed")), (3, own)], hosts={0: "a", 2: "b", 3: "b"})
    assert isinstance(err, ValueError) and "raised on rank 3 on host b" in "\n".join(err.__notes__)
    assert "Traceback: here" in "\n".join(err.__notes__)
    err = _first_error([(1, RankFailed(None, "Weird: cannot travel", "Traceback: there"))])
    assert isinstance(err, spmd.SpmdError) and "rank 1 failed on the ray runtime: Weird: cannot travel" in str(err)


def test_mlp_same_losses_as_local(cluster):
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    try:
        import mlp
    finally:
        sys.path.pop(0)
    os.environ["SPMD_BACKEND"] = "ray"                # as `spmd run --backend ray` sets it
    try:
        got = mlp.main(["--steps", "4"])
    finally:
        del os.environ["SPMD_BACKEND"]
    assert get_runtime().name == "ray"
    want = _local_losses()
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_overlapped_gradient_reductions_as_on_local(cluster, monkeypatch, tmp_path):
    """The MLP step of tests/async_programs.py with small buckets: start/done pairs, the
    start sending to the peers at once and the done collecting them; the same bits as
    the local runtime (both reduce in group order)."""
    from async_programs import flat, mlp_case, pairs
    monkeypatch.setenv("SPMD_BUCKET_BYTES", "300")
    monkeypatch.setenv("SPMD_OVERLAP_WORK", "0")        # (a small step: split around any work)
    mesh = spmd.Mesh((2, 2), ("data", "model"))
    step, args, sh = mlp_case(mesh)
    f = spmd.jit(step, in_shardings=sh)
    assert pairs(f.lower(*args).graph)
    got = flat(f(*args))
    assert get_runtime().name == "ray"
    out = str(tmp_path / "local.npz")
    code = ("import sys, numpy as np, spmd; sys.path.insert(0, sys.argv[2]);"
            "from async_programs import flat, mlp_case;"
            "mesh = spmd.Mesh((2, 2), ('data', 'model')); step, args, sh = mlp_case(mesh);"
            "np.savez(sys.argv[1], *flat(spmd.jit(step, in_shardings=sh)(*args)))")
    p = subprocess.run([sys.executable, "-c", code, out, TESTS], capture_output=True, text=True, timeout=100,
                       env=dict(os.environ, PYTHONPATH=ROOT, SPMD_BACKEND="local", SPMD_BUCKET_BYTES="300"))
    assert p.returncode == 0, p.stderr
    want = np.load(out)
    assert len(want.files) == len(got)
    for k, a in enumerate(got):
        np.testing.assert_array_equal(a, want[f"arr_{k}"])


def test_training_loop_has_the_local_runtimes_bits(cluster):
    """tests/training_programs.py's loop twice on the actors: the final weights have the
    bits of the local runtime's (tests/runtime/test_determinism.py), per compiler backend."""
    from training_programs import digest, train
    got = {b: {digest(train(backend=b)) for _ in range(2)} for b in ("llvm", "numpy")}
    assert get_runtime().name == "ray"
    p = subprocess.run([sys.executable, os.path.join(TESTS, "mpi_scripts", "train_bits.py"), "1"],
                       capture_output=True, text=True, timeout=100,
                       env=dict(os.environ, PYTHONPATH=ROOT, SPMD_BACKEND="local"))
    assert p.returncode == 0, p.stderr
    want = {b: {d} for b, _, d in re.findall(r"BITS (\w+) (\d+) (\w+)", p.stdout)}
    assert got == want


def _local_losses():
    p = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "mlp.py"), "--steps", "4"],
                       capture_output=True, text=True, timeout=100,
                       env=dict(os.environ, PYTHONPATH=ROOT, SPMD_BACKEND="local"))
    assert p.returncode == 0, p.stderr
    return [float(v) for v in re.findall(r"loss ([\d.]+)", p.stdout)]


# -- failures -------------------------------------------------------------------------------
class _RaiseOnRank2:
    num_outputs = 1

    def __call__(self, inputs, comm):
        x = comm.all_reduce(np.ones(3), "x")
        if comm.rank == 2:
            raise ValueError("boom on purpose")
        return [comm.all_reduce(x, "x")]      # the others wait here for rank 2


class _KillRank1:
    num_outputs = 1

    def __call__(self, inputs, comm):
        x = comm.all_reduce(np.ones(3), "x")
        if comm.rank == 1:
            os.kill(os.getpid(), signal.SIGKILL)
        return [comm.all_reduce(x, "x")]


def test_exception_on_rank_2_raises_on_the_driver_with_its_traceback(cluster, monkeypatch):
    _, rt = cluster
    monkeypatch.setenv("SPMD_COLLECTIVE_TIMEOUT", "30")
    mesh = spmd.Mesh((4,), ("x",))
    t0 = time.monotonic()
    with pytest.raises(ValueError, match="boom on purpose") as e:
        rt.run(_RaiseOnRank2(), mesh, {d: [] for d in range(4)})
    assert time.monotonic() - t0 < 10
    notes = "\n".join(getattr(e.value, "__notes__", []))
    assert "raised on rank 2" in notes and 'raise ValueError("boom on purpose")' in notes and "test_ray.py" in notes
    # the runtime is still usable
    assert all(int(v[0]) > 0 for v in run(rt, collective_checks.CheckCollectives(dtypes=("int64",)), mesh).values())


def test_killed_rank_fails_the_run_naming_it_and_is_replaced(cluster, monkeypatch):
    _, rt = cluster
    monkeypatch.delenv("SPMD_COLLECTIVE_TIMEOUT", raising=False)    # no stopwatch: the driver sees the death
    mesh = spmd.Mesh((4,), ("x",))
    before = {w["rank"]: w["pid"] for w in rt.where()}
    t0 = time.monotonic()
    with pytest.raises(CollectiveError, match=r"rank 1 died"):
        rt.run(_KillRank1(), mesh, {d: [] for d in range(4)})
    assert time.monotonic() - t0 < 20
    got = run(rt, collective_checks.CheckCollectives(dtypes=("int64",)), mesh)   # rank 1 was restarted
    assert all(int(v[0]) > 0 for v in got.values())
    after = {w["rank"]: w["pid"] for w in rt.where()}
    assert after[1] != before[1] and all(after[r] == before[r] for r in (0, 2, 3))


def test_an_array_held_by_a_rank_that_died_fails_naming_it(cluster, monkeypatch):
    """Its shard was lost with the actor: reading it, or running on it, raises; never
    the replacement's values."""
    _, rt = cluster
    monkeypatch.delenv("SPMD_COLLECTIVE_TIMEOUT", raising=False)
    mesh = spmd.Mesh((4,), ("x",))
    a = spmd.device_put(np.arange(8.0), mesh.sharding("x"))
    with pytest.raises(CollectiveError, match=r"rank 1 died"):
        rt.run(_KillRank1(), mesh, {d: [] for d in range(4)})
    with pytest.raises(CollectiveError, match=r"rank 1 does not hold shard .*died and was replaced"):
        a.numpy()
    with pytest.raises(CollectiveError, match=r"rank 1 does not hold shard"):
        spmd.jit(lambda v: v + 1, in_shardings=mesh.sharding("x"))(a).numpy()
    b = spmd.device_put(np.arange(8.0), mesh.sharding("x"))      # new arrays live on the new actor
    np.testing.assert_array_equal(spmd.jit(lambda v: v + 1, in_shardings=mesh.sharding("x"))(b).numpy(),
                                  np.arange(8.0) + 1)


def test_actors_drop_the_shards_nobody_holds_and_keep_the_rest(cluster):
    """A loop of steps leaves a bounded number of shards in the actors; an array still
    held keeps its values; a handle cannot leave the driver."""
    import gc
    import pickle
    _, rt = cluster
    mesh = spmd.Mesh((4,), ("x",))
    step = spmd.jit(lambda v: v * 2 + 1, in_shardings=mesh.sharding("x"), out_shardings=mesh.sharding("x"))
    first = spmd.device_put(np.arange(16.0), mesh.sharding("x"))
    u = step(first)
    for _ in range(30):
        u = step(u)
    gc.collect()
    step(u).numpy()                        # carries the drops to every actor
    held = rt.held()
    mine = {d: {first._handles[d].sid, u._handles[d].sid} for d in range(4)}
    assert all(mine[d] <= set(held[d]) for d in range(4)), (mine, held)
    assert all(len(held[d]) < 12 for d in range(4)), held
    np.testing.assert_array_equal(first.numpy(), np.arange(16.0))
    want = np.arange(16.0)
    for _ in range(31):
        want = want * 2 + 1
    np.testing.assert_array_equal(u.numpy(), want)
    gone = first._handles[0].sid
    del first
    gc.collect()
    step(u).numpy()
    assert gone not in rt.held()[0]
    with pytest.raises(TypeError, match="stays in the driver"):
        pickle.dumps(u._handles[0])


def test_small_puts_go_with_the_next_call_and_keep_the_value_put(cluster):
    """A small array put waits for the next call to its actor: changing the numpy array
    after device_put changes nothing; one put and dropped before any call is never read."""
    import gc
    _, rt = cluster
    mesh = spmd.Mesh((4,), ("x",))
    src = np.arange(16.0)
    a = spmd.device_put(src, mesh.sharding("x"))
    b = spmd.device_put(src * 3, mesh.sharding("x"))
    gone = b._handles[2].sid
    del b
    gc.collect()
    src[:] = -1
    f = spmd.jit(lambda v: v + 1, in_shardings=mesh.sharding("x"))
    np.testing.assert_array_equal(f(a).numpy(), np.arange(16.0) + 1)
    np.testing.assert_array_equal(a.numpy(), np.arange(16.0))
    assert gone not in rt.held()[2]


class _BusyRank1:
    """Rank 1 computes alone for a while before the collective the others wait in."""
    num_outputs = 1

    def __call__(self, inputs, comm):
        if comm.rank == 1:
            time.sleep(3)
        return [comm.all_reduce(np.full(2, float(comm.rank)), "x")]


def test_a_busy_rank_is_waited_for(cluster, monkeypatch):
    _, rt = cluster
    monkeypatch.delenv("SPMD_COLLECTIVE_TIMEOUT", raising=False)
    got = run(rt, _BusyRank1(), spmd.Mesh((4,), ("x",)))
    assert all(np.array_equal(v[0], np.full(2, 6.0)) for v in got.values())


def test_nan_reductions_and_per_process_data_as_on_every_backend(cluster):
    mesh = spmd.Mesh((4,), ("x",))
    row = mesh.sharding("x", None)
    x = np.arange(32.0).reshape(8, 4)
    x[5, 1] = x[0, 3] = np.nan
    for f in (lambda v: v.max(axis=0), lambda v: v.min(axis=0), lambda v: np.argmax(v, axis=0),
              lambda v: np.argmin(v, axis=0)):
        np.testing.assert_array_equal(np.asarray(spmd.jit(f, in_shardings=row)(x)), f(x))
    a = spmd.make_array_from_process_local_data(row, x)     # the driver holds every device
    assert a.shape == (8, 4) and a.sharding == row
    np.testing.assert_array_equal(a.numpy(), x)
    np.testing.assert_array_equal(spmd.process_allgather(np.arange(3)), [np.arange(3)])


def test_collective_timeout_names_the_missing_rank(cluster, monkeypatch):
    _, rt = cluster
    from spmd.transports.ray.ray_mailbox import Mailbox
    box = Mailbox()
    box.start(1)
    box.deposit(1, 1, 0, "t", np.ones(1))
    t0 = time.monotonic()
    with pytest.raises(CollectiveError, match=r"timed out after 0.2 s waiting for rank\(s\) \[3\]"):
        box.take(1, 1, [0, 3], 0.2, "all_reduce over ('x',) on rank 1", [0, 1, 3])
    assert time.monotonic() - t0 < 2


# -- the same programs as on the other backends ---------------------------------------------
def test_validation_programs_identical_to_local(cluster):
    """The partitioner's validation programs give the local runtime's results, bit for bit."""
    import validation_programs as vp
    from spmd.transports.local.local_runtime import LocalRuntime
    _, rt = cluster

    def on_ray(exe, mesh, per_dev):
        out = rt.run(exe, mesh, {d: [rt.put(d, a) for a in per_dev[d]] for d in per_dev})
        return {d: [rt.get({d: h})[d] for h in out[d]] for d in out}

    local = LocalRuntime()
    want = vp.flat(vp.run_all(lambda exe, mesh, per_dev: local.run(exe, mesh, per_dev)))
    vp.assert_same(vp.flat(vp.run_all(on_ray)), want, "ray (4 actors, 2 nodes) vs local")


@pytest.mark.slow
def test_a_script_joins_the_cluster_as_a_ray_job_does(cluster):
    """`ray job submit -- python mlp.py --backend ray` runs the script on the cluster with
    RAY_ADDRESS set; the script's spmd.init(backend="ray", num_devices=4) joins it."""
    c, _ = cluster
    env = dict(os.environ, PYTHONPATH=ROOT, RAY_ADDRESS=c.address)
    env.pop("SPMD_BACKEND", None)
    p = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "mlp.py"), "--backend", "ray", "--steps", "4"],
                       capture_output=True, text=True, timeout=100, env=env)
    assert p.returncode == 0, p.stderr
    assert "Connecting to existing Ray cluster" in p.stderr
    got = [float(v) for v in re.findall(r"loss ([\d.]+)", p.stdout)]
    np.testing.assert_allclose(got, _local_losses(), rtol=1e-6)


def test_timeline_has_a_track_per_actor_with_its_collectives(cluster, monkeypatch, tmp_path):
    """SPMD_TRACE on Ray: the actors record spans, the driver merges them into one file."""
    import json

    from spmd.tools import timeline
    _, rt = cluster
    path = tmp_path / "trace.json"
    monkeypatch.setenv("SPMD_TRACE", str(path))
    timeline.take_events()
    mesh = spmd.Mesh((4,), ("x",))
    f = spmd.jit(lambda v: np.tanh(v).sum(), in_shardings=mesh.sharding("x"))
    np.testing.assert_allclose(float(f(np.arange(16.0))), np.tanh(np.arange(16.0)).sum())
    rt._collect_trace()
    events = timeline.take_events()
    assert {e["tid"] for e in events} == {0, 1, 2, 3}          # one track per rank, from 4 actors
    for r in range(4):
        mine = [e for e in events if e["tid"] == r]
        assert [e["name"] for e in mine if e["cat"] == "collective"] == ["all_reduce"], mine
        assert any(e["cat"] == "compute" for e in mine)
    timeline.write(str(path), events)
    data = json.loads(path.read_text())["traceEvents"]
    spans = [e for e in data if e["ph"] == "X"]
    assert min(e["ts"] for e in spans) == 0 and max(e["ts"] for e in spans) < 60e6   # one time axis
    assert {e["args"]["name"] for e in data if e["ph"] == "M" and e["name"] == "thread_name"} == \
        {"rank 0", "rank 1", "rank 2", "rank 3"}
    # the actors follow the driver's SPMD_TRACE at every run (they keep their setting
    # between runs, and change it when the driver's changes)
    monkeypatch.delenv("SPMD_TRACE")
    float(f(np.arange(16.0)))
    monkeypatch.setenv("SPMD_TRACE", str(path))
    rt._collect_trace()                    # (the driver collects only while it traces)
    assert timeline.take_events() == []    # the untraced run recorded nothing in the actors
    float(f(np.arange(16.0)))
    rt._collect_trace()
    assert {e["tid"] for e in timeline.take_events() if e["cat"] == "collective"} == {0, 1, 2, 3}


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_rank_killed_during_training_fails_the_step_naming_it_then_the_run_resumes(cluster, tmp_path, monkeypatch):
    """train_gpt on 4 actors, checkpoints every 2 steps; rank 1's actor is SIGKILLed
    before step 5: the step raises promptly naming rank 1; the same script run again
    resumes from the step-3 checkpoint (on a replacement actor) with the losses of an
    uninterrupted run, bit for bit."""
    _, rt = cluster
    monkeypatch.setenv("SPMD_COLLECTIVE_TIMEOUT", "30")
    gpt = train_gpt("train_gpt_ray")
    base = ["--mesh", "2x2", "--batch", "4", "--seq", "8", "--d-model", "8", "--layers", "1", "--heads", "2",
            "--corpus-bytes", "20000", "--plot", "", "--quiet", "--steps", "7"]
    full = gpt.main(base)
    ck = base + ["--checkpoint-dir", str(tmp_path / "ck"), "--save-every", "2"]

    batches, killed = gpt.batches, []

    def killing(*args, **kwargs):
        for item in batches(*args, **kwargs):
            if item[0] == 5 and not killed:
                pid = {w["rank"]: w["pid"] for w in rt.where()}[1]
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
                killed.append(time.monotonic())
            yield item

    monkeypatch.setattr(gpt, "batches", killing)
    with pytest.raises(CollectiveError, match=r"rank 1 died"):
        gpt.main(ck)
    assert time.monotonic() - killed[1] < 15
    monkeypatch.setattr(gpt, "batches", batches)
    rest = gpt.main(ck)
    assert rest == full[4:]
    assert {w["rank"]: w["pid"] for w in rt.where()}[1] != killed[0]
