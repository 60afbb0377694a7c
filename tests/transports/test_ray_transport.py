"""The Ray backend's transport (transports/ray/ray_communicator.py over transports/ray/ray_links.py and
transports/ray/ray_shm.py) without Ray: N ranks as threads of this process, each with its own
Transport (TCP links on loopback, its own shared-memory slab) and RayCommunicator, as
each rank actor has. Ranks can be told they sit on different hosts: then they talk over
TCP only, and all_reduce goes hierarchical. Every collective is checked against numpy.
"""
import socket
import threading

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import spmd
import spmd.transports.ray.ray_communicator as R
from spmd.transports.ray.ray_communicator import RayCommunicator
from spmd.transports.ray.ray_mailbox import Mailbox
from spmd.transports.ray.ray_transport import Transport
from spmd.errors import CollectiveError

import collective_checks

pytestmark = pytest.mark.timeout(120)


class World:
    """n connected Transports; hosts[r] names rank r's (pretended) host."""

    def __init__(self, n, hosts=None):
        self.ts = [Transport(r, "127.0.0.1", Mailbox()) for r in range(n)]
        infos = {r: t.info() for r, t in enumerate(self.ts)}
        if hosts is not None:
            for r in infos:
                infos[r] = dict(infos[r], host=(f"host-{hosts[r]}", "test"))
            for r, t in enumerate(self.ts):
                t.host = (f"host-{hosts[r]}", "test")
        self.run_id = 0
        errors = self._threads(lambda r: self.ts[r].connect(infos))
        assert not errors, errors

    def _threads(self, fn):
        errors, results = {}, {}

        def go(r):
            try:
                results[r] = fn(r)
            except BaseException as e:      # noqa: BLE001 - reported to the test
                errors[r] = e
        threads = [threading.Thread(target=go, args=(r,)) for r in range(len(self.ts))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(100)
        self.results = results
        return errors

    def run(self, mesh, program, timeout=float("inf")):
        """program(comm) on every rank (a thread each); {rank: result}, or the first error."""
        self.run_id += 1
        run_id = self.run_id
        for t in self.ts:
            t.mailbox.start(run_id)
            t.new_run(run_id)

        def one(r):
            comm = RayCommunicator(mesh, r, self.ts[r], run_id, timeout)
            try:
                return program(comm)
            except BaseException as e:
                self.ts[r].abort_peers(run_id, f"rank {r} failed: {e}", range(len(self.ts)))
                raise
        errors = self._threads(one)
        if errors:
            raise errors[min(errors)]
        return self.results

    def close(self):
        for t in self.ts:
            t.close()


@pytest.fixture
def small_thresholds(monkeypatch):
    """Every path on small arrays: shared memory above 64 bytes, block-wise above 256, and
    all_gathers and all_to_alls of 100 bytes or more written into the results."""
    monkeypatch.setattr(R, "INLINE_BYTES", 64)
    monkeypatch.setattr(R, "BLOCKWISE_BYTES", 256)
    monkeypatch.setattr(R, "PUSH_BYTES", 100)


MESHES = [spmd.Mesh((4,), ("x",)), spmd.Mesh((2, 2), ("a", "b")), spmd.Mesh((2, 2), ("a", "b"), devices=[[2, 0], [3, 1]])]


def test_bad_arguments_are_rejected_as_on_every_transport():
    """The calls of collective_checks.rejections raise the CollectiveError every
    transport raises (the Communicator base checks them), on every rank, and the ranks
    still agree on the next collective."""
    w = World(4, None)
    try:
        for mesh in MESHES:
            got = w.run(mesh, collective_checks.check_rejections)
            assert set(got.values()) == {len(collective_checks.rejections(mesh)) + 2}, got
    finally:
        w.close()


@pytest.mark.parametrize("hosts", [None, [0, 0, 1, 1], [0, 1, 0, 1]], ids=["one-host", "2x2-hosts", "interleaved"])
def test_every_collective_and_dtype_matches_numpy(hosts, small_thresholds):
    """collective_checks on every mesh: every collective, float/int/bool/complex dtypes,
    started all_reduces in flight across other collectives; then float16 and bfloat16 (sums
    in float32 in group order, the same bits as every backend)."""
    w = World(4, hosts)
    try:
        for mesh in MESHES:
            got = w.run(mesh, lambda c: collective_checks.check_collectives(c, big=True, regrouped=hosts is not None))
            assert len(set(got.values())) == 1 and got[0] > 100, got
            got = w.run(mesh, collective_checks.check_half_collectives)
            assert len(set(got.values())) == 1 and got[0] >= 20, got
        if hosts is not None:            # ranks of other hosts talked over TCP only
            assert all(not (t.shm_peers - {r for r in range(4) if hosts[r] == hosts[k]})
                       for k, t in enumerate(w.ts))
        else:
            assert all(t.shm_peers == set(range(4)) - {k} for k, t in enumerate(w.ts))
        # peers of one host are linked by Unix sockets, of other hosts by TCP
        same = hosts or [0] * 4
        assert {(k, p): s.family for k, t in enumerate(w.ts) for p, s in t.links.socks.items()} == \
            {(k, p): socket.AF_UNIX if same[k] == same[p] else socket.AF_INET
             for k in range(4) for p in range(4) if p != k}
    finally:
        w.close()


def _value(dev, shape, dtype):
    rng = np.random.default_rng(dev)
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return rng.random(shape) < 0.5
    if dt.kind == "c":
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dt)
    if dt.kind in "iu":
        return rng.integers(-50, 50, shape).astype(dt)
    return rng.uniform(-4, 4, shape).astype(dt)


DTYPES = ["float64", "float32", "int32", "int64", "bool", "complex128", "complex64", "float16",
          np.dtype(ml_dtypes.bfloat16)]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.sampled_from([2, 3, 4]), size=st.integers(0, 300), dtype=st.sampled_from(DTYPES),
       op=st.sampled_from(["sum", "max", "min", "prod"]), layout=st.sampled_from(["one", "split", "alone"]),
       started=st.booleans())
def test_all_reduce_of_any_size_matches_numpy(small_thresholds, n, size, dtype, op, layout, started):
    """All sizes, uneven over the ranks (size 0, fewer elements than ranks, primes) on one
    host, on two hosts (hierarchical when they hold as many ranks each), and with every rank
    on a host of its own; blocking or started. Group order gives numpy's bits exactly;
    host by host (float sums and products over several hosts) is within rounding; every rank
    gets the same bits."""
    dt = np.dtype(dtype)
    if dt == np.bool_ and op in ("max", "prod"):
        op = "sum"
    hosts = {"one": None, "split": [r * 2 // n for r in range(n)], "alone": list(range(n))}[layout]
    xs = [_value(d, (size,), dt) for d in range(n)]
    half = dt.name in ("float16", "bfloat16")        # summed in float32, rounded once
    want = collective_checks.reduce_in_order(op, [x.astype(np.float32) if half else x for x in xs]).astype(dt)

    def program(comm):
        x = xs[comm.rank].copy()
        if started:
            h = comm.all_reduce_start(x, "x", op)
            comm.barrier()
            got = comm.wait(h)
        else:
            got = comm.all_reduce(x, "x", op)
        assert np.array_equal(x, xs[comm.rank])          # the input is left alone
        return got

    w = World(n, hosts)
    try:
        got = w.run(spmd.Mesh((n,), ("x",)), program)
    finally:
        w.close()
    bits = [g.view(np.uint8) if g.size else g for g in got.values()]
    assert all(np.array_equal(b, bits[0]) for b in bits), "the ranks got different bits"
    g = got[0]
    assert g.dtype == dt and g.shape == (size,)
    regrouped = layout == "split" and n == 4 and op in ("sum", "prod") and dt.kind in "fc" and dt.itemsize > 2
    if regrouped:
        np.testing.assert_allclose(g, want, rtol=1e-4 if dt in (np.float32, np.complex64) else 1e-12)
    else:
        np.testing.assert_array_equal(g.view(np.uint8), want.view(np.uint8))


def test_a_group_spanning_hosts_reduces_host_by_host_through_tcp(small_thresholds, monkeypatch):
    """2 hosts x 2 ranks: the only messages between hosts are the cross-host block-wise
    all_reduce's (each rank exchanges half of its part with its counterpart)."""
    sent = []
    from spmd.transports.ray import ray_links as sockets
    real = sockets.Links.send

    def spy(self, dst, header, array=None):
        sent.append((self.rank, dst, header.get("kind"), 0 if array is None else np.asarray(array).nbytes))
        return real(self, dst, header, array)
    monkeypatch.setattr(sockets.Links, "send", spy)
    hosts = [0, 0, 1, 1]
    w = World(4, hosts)
    x = [np.full(1000, float(r + 1)) for r in range(4)]
    try:
        got = w.run(spmd.Mesh((4,), ("x",)), lambda c: c.all_reduce(x[c.rank], "x"))
    finally:
        w.close()
    assert all(np.array_equal(g, np.full(1000, 10.0)) for g in got.values())
    across = [s for s in sent if hosts[s[0]] != hosts[s[1]]]
    # 8 KB per rank: part = 4 KB, sent as two 2 KB blocks (scatter, gather) to one peer
    assert sorted({(a, b) for a, b, _, _ in across}) == [(0, 2), (1, 3), (2, 0), (3, 1)]
    assert sum(nb for *_, nb in across) == 4 * 2 * 2000, across
    assert all(k == "data" for _, _, k, _ in across)
    within = [s for s in sent if hosts[s[0]] == hosts[s[1]] and s[2] != "release"]
    assert within and all(k == "shm" for _, _, k, _ in within)     # within a host: shared memory


def test_a_disagreeing_group_fails_naming_the_ranks():
    w = World(4)
    try:
        with pytest.raises(CollectiveError, match=r"does not agree.*rank\(s\) \[(1|0, 2, 3)\] called"):
            w.run(spmd.Mesh((4,), ("x",)),
                  lambda c: c.all_gather(np.ones(4), "x") if c.rank == 1 else c.all_reduce(np.ones(4), "x"))
    finally:
        w.close()


@pytest.mark.parametrize("collective", ["all_reduce", "all_gather", "reduce_scatter"])
def test_a_lost_peer_fails_the_waiting_ranks_at_once_naming_it(collective):
    """Rank 2's links close (its process died: the kernel closes its sockets): the ranks
    waiting for it in a collective fail naming rank 2, without any stopwatch; also those
    waiting on its board (large collectives within a host)."""
    w = World(4)
    gone = threading.Event()

    def program(comm):
        if comm.rank == 2:
            comm.t.links.close()
            gone.set()
            return None
        gone.wait(10)
        x = np.ones(3) if collective == "all_reduce" else np.ones(1 << 18)
        return getattr(comm, collective)(x, "x")
    try:
        with pytest.raises(CollectiveError, match=r"rank 2 is lost.*rank 2 died"):
            w.run(spmd.Mesh((4,), ("x",)), program)
    finally:
        w.close()


def test_a_rank_that_never_comes_to_a_large_collective_is_named_at_the_timeout():
    """Waiting on a board (a large all_gather within a host) ends at the collective
    timeout, naming the rank that never came."""
    w = World(3)

    def program(comm):
        if comm.rank == 2:
            return None
        return comm.all_gather(np.ones(1 << 18), "x")
    try:
        with pytest.raises(CollectiveError, match=r"timed out after 0.5 s waiting for rank\(s\) \[2\]"):
            w.run(spmd.Mesh((3,), ("x",)), program, timeout=0.5)
    finally:
        w.close()


def test_links_refuse_a_stranger():
    """A connection that does not bring the set's token is closed, not taken for a rank."""
    import socket
    import time
    t = Transport(1, "127.0.0.1", Mailbox())
    other = Transport(0, "127.0.0.1", Mailbox())
    try:
        infos = {0: other.info(), 1: t.info()}
        s = socket.create_connection(t.links.address[:2])
        s.sendall((0).to_bytes(4, "little") + b"not the token!!!")
        th = threading.Thread(target=other.connect, args=(infos,))
        th.start()
        t.connect(infos)
        th.join(10)
        assert set(t.links.socks) == {0} and set(other.links.socks) == {1}
        time.sleep(0.1)
        assert s.recv(1) == b""              # the stranger's connection was closed
        s.close()
    finally:
        t.close()
        other.close()


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(hosts=st.sampled_from([[0, 0, 1, 1], [0, 1, 0, 1], [0, 0, 1, 1, 2, 2], [0, 0, 0, 1]]),
       rows=st.integers(1, 40), dim=st.sampled_from([0, 1]), dtype=st.sampled_from(DTYPES))
def test_all_gather_across_hosts_matches_numpy(small_thresholds, hosts, rows, dim, dtype):
    """Hosts holding as many ranks each (every array crosses once, then goes round the
    host), and not (flat); on a 2-d mesh too, whose groups span hosts or not."""
    n = len(hosts)
    dt = np.dtype(dtype)
    xs = [_value(d, (rows, 3), dt) for d in range(n)]
    meshes = [spmd.Mesh((n,), ("x",))] + ([spmd.Mesh((2, n // 2), ("a", "b"))] if n % 2 == 0 else [])
    w = World(n, hosts)
    try:
        for mesh in meshes:
            for axes in collective_checks.axis_groups(mesh):
                got = w.run(mesh, lambda c: c.all_gather(xs[c.rank], axes, dim))
                for r, g in got.items():
                    want = np.concatenate([xs[d] for d in mesh.group(r, axes)], axis=dim)
                    assert g.dtype == dt and np.array_equal(g.view(np.uint8), want.view(np.uint8)), (mesh, axes, r)
    finally:
        w.close()


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(hosts=st.sampled_from([None, [0, 0, 1, 1], [0, 1, 0, 1]]),
       dims=st.lists(st.integers(1, 5), min_size=2, max_size=3),
       split=st.integers(0, 2), concat=st.integers(0, 2), dtype=st.sampled_from(DTYPES))
def test_all_to_all_matches_numpy(small_thresholds, hosts, dims, split, concat, dtype):
    """Any split and concat dim (blocks that are not contiguous, odd sizes elsewhere),
    every dtype, through shared memory on one host and TCP between hosts, over every
    axis group of a 1-d and a 2-d mesh."""
    split, concat = split % len(dims), concat % len(dims)
    dt = np.dtype(dtype)
    w = World(4, hosts)
    try:
        for mesh in MESHES[:2]:
            for axes in collective_checks.axis_groups(mesh):
                G = len(mesh.group(0, axes))
                shape = list(dims)
                shape[split] *= G
                xs = [_value(d, tuple(shape), dt) for d in range(4)]
                got = w.run(mesh, lambda c: c.all_to_all(xs[c.rank], axes, split, concat))
                for r, g in got.items():
                    group, i = mesh.group(r, axes), mesh.index_in_group(r, axes)
                    want = np.concatenate([np.split(xs[d], G, split)[i] for d in group], axis=concat)
                    assert g.dtype == dt and g.shape == want.shape, (mesh, axes, r)
                    assert np.array_equal(g.view(np.uint8), want.view(np.uint8)), (mesh, axes, r)
    finally:
        w.close()


def test_all_gather_across_two_hosts_sends_each_array_across_once(small_thresholds, monkeypatch):
    sent = []
    from spmd.transports.ray import ray_links as sockets
    real = sockets.Links.send

    def spy(self, dst, header, array=None):
        sent.append((self.rank, dst, 0 if array is None else np.asarray(array).nbytes))
        return real(self, dst, header, array)
    monkeypatch.setattr(sockets.Links, "send", spy)
    hosts = [0, 0, 1, 1]
    w = World(4, hosts)
    try:
        got = w.run(spmd.Mesh((4,), ("x",)), lambda c: c.all_gather(np.full(1000, float(c.rank)), "x"))
    finally:
        w.close()
    want = np.repeat(np.arange(4.0), 1000)
    assert all(np.array_equal(g, want) for g in got.values())
    across = sum(nb for a, b, nb in sent if hosts[a] != hosts[b])
    assert across == 4 * 8000, across          # each rank's 8 KB crosses once


def test_senders_write_into_results_that_stay_their_owners(small_thresholds):
    """On one host, large all_gathers and all_to_alls are written by their senders into the
    receivers' results (nothing goes through the senders' slabs). A result is the caller's
    own: held across more calls than the buffers kept per size, and written in place by
    its owner, every result keeps its values; a held result the pool does not keep holds
    no fd."""
    n = 3
    w = World(n)
    xs = [_value(d, (6, 5), "float64") for d in range(n)]

    def program(comm):
        x = xs[comm.rank]
        held = []
        for k in range(6):
            held.append((k, comm.all_gather(x + k, "x", k % 2), comm.all_to_all(x + k, "x", 0, 1)))
        held[0][1][:] = -1.0             # the owner's write touches no other result
        for k, gathered, swapped in held[1:]:
            assert np.array_equal(gathered, np.concatenate([y + k for y in xs], axis=k % 2)), k
            want = np.concatenate([np.split(y + k, n, 0)[comm.rank] for y in xs], axis=1)
            assert np.array_equal(swapped, want), k
        open_fds = sum(fd >= 0 for fd, _ in comm.t.buffers.fds.values())
        assert len(comm.t.buffers.fds) == 12 and open_fds == 8, (len(comm.t.buffers.fds), open_fds)
        return len(comm.t.slab.segments)
    try:
        got = w.run(spmd.Mesh((n,), ("x",)), program)
        assert got == {0: 0, 1: 0, 2: 0}, got
    finally:
        w.close()


def test_a_group_that_decides_differently_fails_naming_the_ranks(small_thresholds):
    """Every member decides alike whether senders write into the results; a rank that
    (wrongly) thinks a peer shares no memory with it fails the call, and its peers,
    with the call they disagree on, not a wrong result or a hang."""
    w = World(3)
    w.ts[0].shm_peers.discard(1)
    try:
        with pytest.raises(CollectiveError, match="does not agree on the call"):
            w.run(spmd.Mesh((3,), ("x",)), lambda c: c.all_gather(np.arange(60.0) + c.rank, "x"), timeout=30)
    finally:
        w.close()


def test_a_sender_gets_its_shared_memory_back(small_thresholds):
    """Readers say they are done with a region on their next message to its sender (the
    root of broadcasts hears nothing back until then, but is told in batches): once the
    ranks meet again, every region is free."""
    w = World(3)
    x = np.arange(100.0)

    def program(comm):
        for k in range(40):
            got = comm.broadcast(x + k if comm.rank == 0 else np.zeros(100), "x", root=0)
            assert np.array_equal(got, x + k)
        for k in range(5):
            comm.all_gather(x, "x")
        comm.barrier()                   # its messages carry the last regions read
        return len(comm.t.slab.regions)
    try:
        got = w.run(spmd.Mesh((3,), ("x",)), program)
    finally:
        w.close()
    assert got == {0: 0, 1: 0, 2: 0}, got


@pytest.mark.skipif(not R.shm.supported(), reason="no shared memory between processes here")
def test_a_slab_region_outlives_the_next_run_until_its_readers_are_done():
    """The driver sends a run before it has read the replies to the one before, so a
    rank may start run k+1 while a peer still reads what it put in run k: run k's regions
    stay intact through run k+1 (unless their readers release them), and are free from
    run k+2 on (every rank ended run k before the driver sent it)."""
    slab = R.shm.Slab()
    try:
        slab.new_run(1)
        kept = [slab.put(np.full(1000, float(i)), readers=1) for i in range(3)]
        released = slab.put(np.full(1000, 7.0), readers=1)
        slab.release(released[0])

        def view(region):
            rid, fd, off, dtype, shape = region
            seg = next(s for s in slab.segments if s.fd == fd)
            return seg.bytes[off:off + 8000].view(dtype).reshape(shape)

        slab.new_run(2)
        newer = [slab.put(np.full(1000, -1.0), readers=1) for _ in range(8)]
        for i, region in enumerate(kept):
            assert np.array_equal(view(region), np.full(1000, float(i)))   # not written over
            assert region[0] in slab.regions
        assert released[0] not in slab.regions
        assert all(r[0] in slab.regions for r in newer)
        slab.new_run(3)
        assert sorted(slab.regions) == sorted(r[0] for r in newer)    # run 1's are free
        slab.new_run(4)
        assert slab.regions == {} and all(s.live == 0 for s in slab.segments)
    finally:
        slab.close()


def test_a_take_is_woken_once_when_its_last_message_comes():
    """The run thread sleeps until every message it waits for is in (one wake-up per
    collective, not one per peer), and is woken then, not by its 1 s poll; messages it
    does not wait for wake nobody."""
    box = Mailbox()
    box.start(1)
    asleep, wakes, notes = threading.Event(), [], []
    real_wait, real_notify = box.cond.wait, box.cond.notify_all

    def wait(timeout=None):
        asleep.set()
        notified = real_wait(timeout)
        wakes.append(notified)
        return notified

    def notify_all():
        notes.append(sorted(k[2] for k in box.box if k[1] == (1, 0)))
        real_notify()
    box.cond.wait, box.cond.notify_all = wait, notify_all

    def deliver():
        asleep.wait(10)
        with box.cond:                  # the taker sleeps in cond.wait: it released the lock
            pass
        box.deposit(1, (9, 0), 1, "other", None)        # another call's: nobody waits for it
        for src in (3, 1, 2):
            box.deposit(1, (1, 0), src, "t", src)
    th = threading.Thread(target=deliver)
    th.start()
    got = box.take(1, (1, 0), [1, 2, 3], float("inf"), "test", [0, 1, 2, 3])
    th.join(10)
    assert {s: p for s, (_, p, _) in got.items()} == {1: 1, 2: 2, 3: 3}
    assert notes == [[1, 2, 3]], notes              # notified once, when the last came
    assert wakes == [True], wakes                   # and woken by it


@pytest.mark.parametrize("near,reachable,family", [(True, True, socket.AF_UNIX), (False, True, socket.AF_INET),
                                                   (True, False, socket.AF_INET)],
                         ids=["near", "far", "near-unreachable"])
def test_the_drivers_line_is_a_unix_socket_to_an_actor_of_its_host(near, reachable, family):
    """The driver's line to an actor of its host goes through the actor's Unix socket, to
    one of another host through TCP, and through TCP when the Unix name cannot be reached
    (another network namespace); the messages and their arrays arrive the same."""
    from spmd.transports.ray.ray_control import Channel, Listener
    listener = Listener("127.0.0.1")
    listener.serve(lambda m: ("ok", m[1] * 2, m[0]))
    address = listener.address
    if not reachable:
        address = address[:3] + (b"\0spmd-nobody-listens-here",)
    ch = Channel(address, near=near)
    try:
        assert ch.sock.family == family
        for n in (3, 70_000):            # one send, and arrays out of band
            x = np.arange(n, dtype=np.float32)
            ch.send(("step", x))
            got = ch.receive()
            assert got[0] == "ok" and got[2] == "step" and np.array_equal(got[1], x * 2)
    finally:
        ch.close()
        for s in listener.listeners:
            s.close()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sizes=st.lists(st.sampled_from([0, 1, 5, 300, 9_000, 40_000, 200_000]), min_size=1, max_size=8),
       chunk=st.sampled_from([1, 7, 4096, 1 << 20]), pulls=st.booleans())
def test_the_inbox_reads_ahead_and_gives_every_message_whole_and_in_order(sizes, chunk, pulls):
    """Messages sent back to back, arriving in pieces of any size: one receive may take
    a message and the start of the next (read ahead); each comes out whole, its arrays
    equal and writable, in order; `pull` says a message is whole only when it is."""
    from spmd.transports.ray.ray_control import Inbox, pack
    a, b = socket.socketpair()
    try:
        msgs = [("m", i, np.arange(n, dtype=np.int32) + i) for i, n in enumerate(sizes)]
        data = b"".join(bytes(p) for m in msgs for p in pack(m))

        step = max(chunk, len(data) // 3000)       # (pieces of a few bytes, but not a million sends)

        def feed():
            for i in range(0, len(data), step):
                a.sendall(data[i:i + step])
        th = threading.Thread(target=feed)
        th.start()
        inbox = Inbox(b)
        for m in msgs:
            if pulls:
                while not inbox.pull():
                    pass
                assert inbox.ready()
            got = inbox.receive()
            assert got[:2] == m[:2] and np.array_equal(got[2], m[2]) and got[2].flags.writeable
        th.join(10)
        assert not inbox.ready() and not inbox.pull()
    finally:
        a.close()
        b.close()
