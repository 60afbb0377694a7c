import os
import sys

from hypothesis import settings

# tests import their shared helpers (opinfo, partition_util) as top-level modules
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# CI replays the same examples every run (a red CI is then a real, reproducible bug);
# locally hypothesis explores new ones each time.
# every stage's graph is checked by ir.verify (SSA, shapes, shardings) in the tests,
# including the MPI and Ray processes they start (they inherit the environment)
os.environ.setdefault("SPMD_VERIFY", "1")
# every test runs the passes it tests: some plant a broken pass or rule and expect it to
# be caught, which a program loaded from the disk cache would hide (test_program_cache.py
# turns the cache on in processes of its own)
os.environ.setdefault("SPMD_PROGRAM_CACHE", "0")

settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


import pytest  # noqa: E402


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist (pyproject's addopts: -n 2 --dist loadgroup) each file's tests run
    on one worker, in order, its module-scoped fixtures (a Ray cluster, an MPI job) made
    once; the files that share the session's test bed of hosts all on one worker, which
    makes it once."""
    def group(item):
        return "testbed" if "testbed" in getattr(item, "fixturenames", ()) else item.nodeid.split("::")[0]

    for item in items:
        item.add_marker(pytest.mark.xdist_group(group(item)))
    # the longest first, the short ones last to even out the two workers' ends: the test
    # bed's tests (minutes, on one worker), then the files that start MPI jobs or Ray
    # clusters or are marked slow, then the rest (each file stays whole, in its order)
    long_groups = {group(item) for item in items if any(item.get_closest_marker(m) for m in ("mpi", "ray", "slow"))}
    items.sort(key=lambda item: 0 if group(item) == "testbed" else 1 if group(item) in long_groups else 2)


@pytest.fixture(params=["numpy", "llvm"])
def compiler(request):
    """The compiler backends (spmd.jit(..., backend=compiler)): tests that run programs take
    this fixture to run under both; the numpy backend is the reference."""
    return request.param


@pytest.fixture(scope="session")
def testbed():
    """Two hosts h1, h2 (network namespaces, an sshd each, a 1 Gbit/s link; spmd/testing/
    cluster.py), shared by the tests of a session (those of the launcher and of the MPI
    and Ray transports across hosts). Where the machine cannot make them the tests skip,
    saying why; under CI they fail instead, so they are never skipped there unnoticed."""
    from spmd.testing.cluster import Cluster, unavailable
    why = unavailable()
    if why:
        if os.environ.get("CI"):
            pytest.fail(f"the test bed of hosts must run under CI: {why}")
        pytest.skip(why)
    with Cluster(2, rate="1gbit") as bed:
        yield bed
