"""The Communicator base checks every collective's arguments once for all transports
(spmd/transports/collective_args.py): each call of tests/collective_checks.rejections
raises the same CollectiveError on the local transport here, on MPI (the script
tests/mpi_scripts/collectives.py, tests/transports/test_mpi.py) and on Ray's communicator
(tests/transports/test_ray_transport.py), before any rank waits for another."""
import threading

import numpy as np
import pytest

import collective_checks
from spmd.errors import CollectiveError
from spmd.sharding import Mesh
from spmd.transports.local.local_communicator import LocalWorld

MESHES = [Mesh((2,), ("x",)), Mesh((4,), ("x",)), Mesh((2, 2), ("a", "b"), devices=[[2, 0], [3, 1]])]


@pytest.mark.parametrize("mesh", MESHES, ids=lambda m: str(m.shape))
def test_every_rank_rejects_bad_arguments_alike(mesh):
    world = LocalWorld(mesh, timeout=30)
    got, errors = {}, []

    def rank(r):
        try:
            got[r] = collective_checks.check_rejections(world.communicator(r))
        except BaseException as e:       # noqa: BLE001 - reported below
            errors.append(e)
            world.abort(r, e)
    threads = [threading.Thread(target=rank, args=(r,)) for r in range(mesh.size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert set(got.values()) == {len(collective_checks.rejections(mesh)) + 2}


def test_one_rank_alone_fails_at_once():
    """A bad call raises on the rank that made it, without waiting for its group (the
    other ranks never call anything here)."""
    comm = LocalWorld(Mesh((4,), ("x",)), timeout=30).communicator(2)
    for call, message in collective_checks.rejections(comm.mesh):
        with pytest.raises(CollectiveError) as e:
            call(comm)
        assert str(e.value) == message


def test_good_arguments_in_other_forms_are_accepted():
    """numpy integers as dims and roots, a list of axes, pairs as lists: checked, not
    refused (one rank's group of one: no other rank needed)."""
    comm = LocalWorld(Mesh((1, 2), ("a", "b")), timeout=30).communicator(0)
    x = np.arange(6.0).reshape(2, 3)
    assert np.array_equal(comm.all_gather(x, ["a"], np.int64(1)), x)
    assert np.array_equal(comm.broadcast(x, "a", root=np.int32(0)), x)
    assert np.array_equal(comm.permute(x, ("a",), [[0, 0]]), x)
    out = np.empty_like(x)
    assert comm.all_reduce(x, "a", out=out) is out and np.array_equal(out, x)
