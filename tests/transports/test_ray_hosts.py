"""A two-node Ray cluster on the test bed (spmd/testing/cluster.py), started for one job
by `spmd run --backend ray --hosts h1,h2`: train_gpt's 4 rank actors fill both nodes
(2 CPUs each) and give the single-host losses, and the checkpoint they save resumes on one
host; when the job ends nothing of Ray is left on either host. (A killed host ends the job
naming it: tests/launcher/test_hosts.py; a cut link: test_ray_links_hosts.py.)"""
import json
import os
import re

import numpy as np
import pytest

from gpt_programs import local_gpt_losses
from paths import ROOT, SCRIPTS

ray = pytest.importorskip("ray")
pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(300)]

GPT = ["--mesh", "2x2", "--batch", "4", "--seq", "8", "--d-model", "8", "--layers", "1", "--heads", "2",
       "--corpus-bytes", "20000", "--plot", "", "--quiet", "--steps", "4"]


def test_train_gpt_on_a_two_node_ray_cluster_gives_the_single_host_losses_and_its_checkpoint_restores_on_one(
        testbed, tmp_path):
    """...saving at step 2 from both nodes; the checkpoint resumes on one host (the local
    runtime) with the losses of the uninterrupted run."""
    env = testbed.env({"PYTHONPATH": ROOT, "RAY_USAGE_STATS_ENABLED": "0", "SPMD_RAY_OBJECT_STORE_MB": "100"})
    for k in ("SPMD_BACKEND", "SPMD_NUM_DEVICES", "RAY_ADDRESS"):
        env.pop(k, None)
    sshd = {h: set(testbed.pids(h)) for h in testbed.names}
    before = testbed.counters("h2")
    ck = str(tmp_path / "ck")
    p = testbed.run("h1", ["spmd", "run", "-n", "4", "--backend", "ray", "--hosts", "h1,h2",
                           os.path.join(SCRIPTS, "train_killed.py"), *GPT, "--checkpoint-dir", ck, "--save-every", "3"],
                    env=env, timeout=240)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-5000:]
    got = json.loads(re.search(r"^LOSSES (.*)$", p.stdout, re.M).group(1))
    np.testing.assert_allclose(got, local_gpt_losses(GPT), rtol=1e-5)
    assert sorted(os.listdir(ck)) == ["step_00000002"]
    resumed = local_gpt_losses(GPT + ["--checkpoint-dir", ck])
    np.testing.assert_allclose(resumed, got[3:], rtol=1e-5)
    nodes = json.loads(re.search(r"^RANK NODES (.*)$", p.stdout, re.M).group(1))
    assert sorted(nodes.values()) == ["10.77.0.1", "10.77.0.1", "10.77.0.2", "10.77.0.2"], nodes
    # the ranks on both nodes run as any program does, not at the nice 15 of Ray's workers
    nice = json.loads(re.search(r"^RANK NICE (.*)$", p.stdout, re.M).group(1))
    assert len(nice) == 4 and max(nice) < 15, nice
    assert testbed.counters("h2")["rx"] - before["rx"] > 1e5
    for h in testbed.names:                      # the Ray nodes stopped with the job
        assert set(testbed.pids(h)) == sshd[h], (h, [open(f"/proc/{q}/cmdline").read() for q in testbed.pids(h)])
