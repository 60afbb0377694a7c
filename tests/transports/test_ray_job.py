"""`ray job submit` for real: a Ray cluster with its dashboard (whose job server takes the
submission), two nodes on this machine (2 CPUs each, so 4 ranks span both), every address
on loopback; the real CLI submits examples/mlp.py as a user does:

    ray job submit --address http://127.0.0.2:PORT --working-dir examples -- python mlp.py --backend ray --steps 4

The job server runs the entrypoint on the head node with RAY_ADDRESS set to the cluster's
GCS address; the script's spmd.init(backend="ray") joins the cluster from there and places
its 4 rank actors. Needs ray[default] (the dashboard's job server).
"""
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid

import numpy as np
import pytest

ray = pytest.importorskip("ray")

from spmd.transports.ray.ray_placement import LOOPBACK  # noqa: E402
from test_ray import _local_losses  # noqa: E402 - examples/mlp.py's losses on the local backend
from paths import ROOT

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(600)]


def _free_port():
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


def _wait_for_dashboard(url, timeout=60):
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url + "/api/version", timeout=5) as r:
                if r.status == 200:
                    return
        except OSError as e:
            if time.monotonic() > deadline:
                raise AssertionError(f"the Ray dashboard at {url} did not come up in {timeout} s: {e}")
        time.sleep(0.5)


@pytest.fixture
def job_server(monkeypatch):
    """A two-node Cluster whose head runs the dashboard (and so the job server) on
    loopback; yields the job server's address. Its own temp dir and ports, so it does not
    meet test_ray.py's cluster."""
    try:
        import aiohttp  # noqa: F401
        import aiohttp_cors  # noqa: F401
    except ImportError as e:
        pytest.fail(f"the Ray job server needs ray[default] (pip install -e '.[test]'): {e}")
    from ray.cluster_utils import Cluster

    # the processes the cluster starts (and so the job's entrypoint) inherit this
    # environment: their `python` and `ray` are this interpreter's
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.delenv("SPMD_BACKEND", raising=False)
    # Ray puts unix sockets under its temp dir: keep the path short (pytest's tmp_path is not)
    tmp = tempfile.mkdtemp(prefix="spmdray", dir="/tmp")
    dash = _free_port()
    node = dict(num_cpus=2, node_ip_address=LOOPBACK, object_store_memory=100 << 20)
    c = Cluster()
    try:
        c.add_node(**node, include_dashboard=True, dashboard_host=LOOPBACK, dashboard_port=dash,
                   dashboard_agent_listen_port=_free_port(), temp_dir=tmp)
        c.add_node(**node)
        # the job server gives the entrypoint the address recorded in the head's temp dir,
        # else that of any Ray it finds running on the machine: another test's, when the
        # tests run side by side (pytest-xdist)
        with open(os.path.join(tmp, "ray_current_cluster"), "w") as f:
            f.write(c.address)
        url = f"http://{LOOPBACK}:{dash}"
        _wait_for_dashboard(url)
        yield url
    finally:
        c.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)


def test_ray_job_submit_runs_mlp_on_the_cluster_with_the_local_losses(job_server):
    from ray.job_submission import JobStatus, JobSubmissionClient
    from ray.util.state import list_actors

    url = job_server
    sid = f"spmd-mlp-{uuid.uuid4().hex[:8]}"
    ray_cli = os.path.join(os.path.dirname(sys.executable), "ray")
    if not os.path.exists(ray_cli):
        ray_cli = shutil.which("ray")
    p = subprocess.run([ray_cli, "job", "submit", "--address", url, "--submission-id", sid,
                        "--working-dir", os.path.join(ROOT, "examples"),
                        "--", "python", "mlp.py", "--backend", "ray", "--steps", "4"],
                       capture_output=True, text=True, timeout=400, cwd=ROOT)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    client = JobSubmissionClient(url)
    logs = client.get_job_logs(sid)
    assert client.get_job_status(sid) == JobStatus.SUCCEEDED, logs
    # `ray job submit` streamed the job's output back; the driver joined the cluster
    assert re.search(r"loss [\d.]+", p.stdout), out
    assert "Connecting to existing Ray cluster" in logs, logs
    got = [float(v) for v in re.findall(r"loss ([\d.]+)", logs)]
    assert len(got) == 4, logs
    np.testing.assert_allclose(got, _local_losses(), rtol=1e-6)
    # the job's 4 ranks were actors on both nodes
    actors = list_actors(address=url, filters=[("class_name", "=", "RankActor")], detail=True)
    assert len(actors) == 4, actors
    assert len({a.node_id for a in actors}) == 2, actors
