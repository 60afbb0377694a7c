"""Single-copy reads within a host (collectives/cma.py) in the Ray transport: all_gather and
all_to_all read peers' arrays straight into their results, the senders waiting for acks.
Ranks are threads with their own Transports (test_ray_transport.World); process_vm_readv
also reads its own process, so the same path runs as between rank actors. Each check runs
with single-copy reads on and turned off (SPMD_RAY_CMA=0, and a kernel that refuses)."""
import ctypes
import errno
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import spmd
import spmd.collectives.ray as R
from spmd.collectives import cma, sockets
from spmd.errors import CollectiveError

import collective_checks
from test_ray_transport import DTYPES, MESHES, World, _value

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def sent(monkeypatch):
    """The kinds of the messages the ranks send, and small thresholds (every array above
    64 bytes leaves the note)."""
    monkeypatch.setattr(R, "INLINE_BYTES", 64)
    monkeypatch.setattr(R, "BLOCKWISE_BYTES", 256)
    kinds = []
    real = sockets.Links.send

    def spy(self, dst, header, array=None):
        kinds.append(header.get("kind"))
        return real(self, dst, header, array)
    monkeypatch.setattr(sockets.Links, "send", spy)
    return kinds


def _single_copy(monkeypatch, on):
    monkeypatch.setenv("SPMD_RAY_CMA", "1" if on else "0")


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(on=st.booleans(), n=st.sampled_from([2, 3, 4]), dims=st.lists(st.integers(1, 7), min_size=1, max_size=3),
       dim=st.integers(0, 2), split=st.integers(0, 2), dtype=st.sampled_from(DTYPES))
def test_all_gather_and_all_to_all_match_numpy(monkeypatch, sent, on, n, dims, dim, split, dtype):
    """Odd shapes, any gather / split / concat dim (slots of the result that are not
    contiguous, blocks that are not), every dtype; single-copy reads on or off."""
    _single_copy(monkeypatch, on)
    dim, split = dim % len(dims), split % len(dims)
    dt = np.dtype(dtype)
    shape = list(dims)
    shape[split] *= n
    xs = [_value(d, tuple(shape), dt) for d in range(n)]
    keep = [x.copy() for x in xs]
    w = World(n)
    try:
        assert all(bool(t.cma_peers) == on for t in w.ts)
        sent.clear()
        gathered = w.run(spmd.Mesh((n,), ("x",)), lambda c: c.all_gather(xs[c.rank], "x", dim))
        kinds = {"all_gather": (set(sent), xs[0].nbytes)}
        sent.clear()
        swapped = w.run(spmd.Mesh((n,), ("x",)), lambda c: c.all_to_all(xs[c.rank], "x", split, dim))
        kinds["all_to_all"] = (set(sent), xs[0].nbytes // n)
    finally:
        w.close()
    want = np.concatenate(xs, axis=dim)
    for r in range(n):
        assert gathered[r].dtype == dt and np.array_equal(gathered[r].view(np.uint8), want.view(np.uint8))
        w2a = np.concatenate([np.split(xs[d], n, split)[r] for d in range(n)], axis=dim)
        assert swapped[r].shape == w2a.shape and np.array_equal(swapped[r].view(np.uint8), w2a.view(np.uint8))
    assert all(np.array_equal(x, k) for x, k in zip(xs, keep))        # the inputs are left alone
    for name, (used, nbytes) in kinds.items():       # single-copy above INLINE_BYTES, when on
        big = nbytes > 64
        assert ("cma" in used) == ("ack" in used) == (on and big), (name, used)
        assert ("shm" in used) == (not on and big), (name, used)


@pytest.mark.parametrize("how", ["env", "refused"])
def test_every_collective_matches_numpy_without_single_copy(monkeypatch, sent, how):
    """SPMD_RAY_CMA=0, or a kernel that refuses process_vm_readv (a container's seccomp
    profile, ptrace rules): the probe at set-up says no, and the slab carries the data."""
    if how == "env":
        _single_copy(monkeypatch, False)
    else:
        def refuse(*args):
            ctypes.set_errno(errno.EPERM)
            return -1
        monkeypatch.setattr(cma, "_READV", refuse)
        assert cma.supported() and not cma.reachable(*cma.probe()[0])
    sent.clear()
    w = World(4)
    try:
        assert all(not t.cma_peers for t in w.ts)
        for mesh in MESHES[:2]:
            got = w.run(mesh, lambda c: collective_checks.check_collectives(c, big=True))
            assert len(set(got.values())) == 1 and got[0] > 100, got
    finally:
        w.close()
    assert "cma" not in sent and "shm" in sent


@pytest.mark.parametrize("fate", ["lost", "failed"])
def test_a_sender_waiting_for_acks_stops_when_a_reader_is_lost_or_fails(monkeypatch, fate):
    """Rank 1 reads everyone's array, then its process dies (its links close) or its
    program raises, instead of acking: the others, waiting for its ack before they may
    return, fail naming rank 1 at once, no stopwatch."""
    monkeypatch.setattr(R, "INLINE_BYTES", 64)
    w = World(3)

    def program(comm):
        if comm.rank == 1:
            def instead(regions):
                if fate == "lost":
                    comm.t.links.close()
                else:
                    raise RuntimeError("rank 1's program failed")
            comm._release = instead
        return comm.all_gather(np.arange(100.0) + comm.rank, "x")
    try:
        with pytest.raises(CollectiveError) as e:
            w.run(spmd.Mesh((3,), ("x",)), program)
    finally:
        w.close()
    msg = str(e.value)
    assert "rank 0" in msg and "waiting for rank(s) [1, 2] to finish reading" in msg, msg
    assert ("rank 1 is lost" in msg) if fate == "lost" else ("aborted because rank 1 failed" in msg), msg


CHILD = """
import sys, numpy as np
a = np.arange(1000, dtype=np.int64) * 3
print(a.ctypes.data, flush=True)
sys.stdin.readline()
"""


def test_read_another_process_and_fail_once_it_is_gone():
    """Between processes (as between rank actors): the bytes arrive; once the process
    has died, a read fails with an error naming the rank, never returns stale bytes."""
    if not cma.supported():
        pytest.skip("process_vm_readv is not available here")
    p = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        address = int(p.stdout.readline())
        remote = cma.PeerArray(5, p.pid, address, np.int64, (1000,))
        got = np.zeros(1000, np.int64)
        remote.read_into(got)
        assert np.array_equal(got, np.arange(1000) * 3)
    finally:
        p.communicate("\n", timeout=30)
    with pytest.raises(CollectiveError, match="rank 5 is lost"):
        remote.read_into(got)
