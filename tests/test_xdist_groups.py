"""conftest.py puts each file's tests on one pytest-xdist worker, in order, so that a
module-scoped fixture (a Ray cluster, a test bed of hosts) starts once: its hook must run
before xdist's own, which reads the groups as it collects. The first test leaves the
worker it ran on where the second, on any worker, finds it (a directory the session's
workers share: the run's id names it)."""
import os
import tempfile

import pytest

RUN = os.environ.get("PYTEST_XDIST_TESTRUNUID")
WORKER = os.environ.get("PYTEST_XDIST_WORKER")
NOTE = os.path.join(tempfile.gettempdir(), f"spmd-xdist-{RUN}-{os.path.basename(__file__)}")


@pytest.mark.skipif(RUN is None, reason="runs under pytest-xdist")
def test_first_of_the_file_notes_its_worker():
    with open(NOTE, "w") as f:
        f.write(WORKER)


@pytest.mark.skipif(RUN is None, reason="runs under pytest-xdist")
def test_the_rest_of_the_file_runs_on_the_same_worker():
    if not os.path.exists(NOTE):
        pytest.skip("the file's first test did not run")
    with open(NOTE) as f:
        first = f.read()
    os.unlink(NOTE)
    assert first == WORKER, f"this file's tests ran on workers {first} and {WORKER}"
