import os

import pytest


@pytest.fixture(scope="session")
def testbed():
    """Two hosts h1, h2 (network namespaces, an sshd each, a 1 Gbit/s link; spmd/testing/
    cluster.py), shared by the tests of a session. Where the machine cannot make them the
    tests skip, saying why; under CI they fail instead, so they are never skipped there
    unnoticed."""
    from spmd.testing.cluster import Cluster, unavailable
    why = unavailable()
    if why:
        if os.environ.get("CI"):
            pytest.fail(f"the test bed of hosts must run under CI: {why}")
        pytest.skip(why)
    with Cluster(2, rate="1gbit") as bed:
        yield bed
