"""Across hosts for real: `spmd run --hosts` on a test bed of two hosts (network
namespaces h1 and h2, an sshd each, joined by a 1 Gbit/s link; spmd/testing/cluster.py).
Every job is started on h1, as a person logged in there would; MPICH's hydra reaches
h2 over ssh, and the ranks' bytes cross the link (UCX over TCP, counted on h2's link).

Faults: a host's link cut, a host's processes killed, a host that never starts: each
ends the job within the heartbeat timeout (4 s here) with a message naming the host and
its ranks."""
import json
import os
import re
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from spmd.transports.mpi.mpi_watchdog import ABORT_GRACE
from spmd.transports.mpi.mpi_launch import find_mpiexec
from gpt_programs import local_gpt_losses
from paths import ROOT, SCRIPTS

pytestmark = [pytest.mark.mpi, pytest.mark.skipif(find_mpiexec() is None, reason="no mpiexec"),
              pytest.mark.timeout(180)]

HEARTBEAT = 4
GPT = ["--mesh", "2x2", "--batch", "4", "--seq", "8", "--d-model", "8", "--layers", "1", "--heads", "2",
       "--corpus-bytes", "20000", "--plot", "", "--quiet", "--steps", "6"]


def env(bed, **extra):
    e = bed.env({"PYTHONPATH": ROOT, "SPMD_HEARTBEAT_TIMEOUT": str(HEARTBEAT), **extra})
    for k in ("SPMD_BACKEND", "SPMD_NUM_DEVICES", "SPMD_COLLECTIVE_TIMEOUT", "RAY_ADDRESS"):
        e.pop(k, None)
    return e


def spmd_run(bed, *args, timeout=150, **extra):
    t0 = time.monotonic()
    p = bed.run("h1", ["spmd", "run", *args], timeout=timeout, env=env(bed, **extra))
    return p, p.stdout + p.stderr, time.monotonic() - t0


def losses_of(out):
    got = re.findall(r"^LOSSES (.*)$", out, re.M)
    assert len(got) == 1, out
    return json.loads(got[0])


def test_hosts_are_separate_machines_joined_by_a_shaped_link(testbed):
    """Each host has its own name, address and /etc/hosts; ssh reaches the other; spmd
    doctor finds the same software on both and measures the link at its 1 Gbit/s."""
    assert testbed.run("h2", ["hostname"]).stdout.strip() == "h2"
    p = testbed.run("h1", ["ssh", "h2", "hostname; getent hosts h1"])
    assert p.returncode == 0 and p.stdout.split()[:2] == ["h2", "10.77.0.1"], p.stderr
    p = testbed.run("h1", ["spmd", "doctor", "--hosts", "h1,h2"], env=env(testbed))
    assert p.returncode == 0, p.stdout + p.stderr
    assert "ok   h1:" in p.stdout and "ok   h2: reachable (hostname h2)" in p.stdout, p.stdout
    gbit = float(re.search(r"link h1 -> h2: ([\d.]+) Gbit/s|$", p.stdout).group(1) or 0)
    mbit = re.search(r"link h1 -> h2: (\d+) Mbit/s", p.stdout)
    rate = gbit * 1000 if gbit else float(mbit.group(1)) if mbit else 0
    assert 700 < rate < 1100, p.stdout


def test_doctor_names_what_differs_and_what_to_do(testbed, tmp_path):
    """A host whose sshd is gone, and a host whose Python cannot import this spmd: one
    line each, saying what is wrong and what to do; the exit status says it failed."""
    testbed.kill("h2")
    try:
        p = testbed.run("h1", ["spmd", "doctor", "--hosts", "h1,h2"], env=env(testbed, SPMD_HEARTBEAT_TIMEOUT="2"))
        assert p.returncode == 1
        assert re.search(r"^FAIL h2: cannot be reached over ssh: .*refused — check that it is up", p.stdout, re.M), \
            p.stdout
        assert "ok   h1:" in p.stdout
    finally:
        testbed.reset()
    e = env(testbed)
    # hosts whose Python finds another spmd first (one that cannot be imported), whatever
    # this machine has installed
    other = tmp_path / "other"
    (other / "spmd").mkdir(parents=True)
    (other / "spmd" / "__init__.py").write_text("raise ImportError('an older spmd without a launcher')\n")
    e["PYTHONPATH"] = str(other)
    p = testbed.run("h1", [sys.executable, "-c", f"import sys; sys.path.insert(0, {ROOT!r}); "
                           "from spmd.launcher.cli import main; main(['doctor', '--hosts', 'h2'])"], env=e)
    assert p.returncode == 1 and re.search(r"^FAIL h2: cannot import spmd .* install spmd there", p.stdout, re.M), \
        p.stdout + p.stderr


def test_an_all_reduce_crosses_the_link(testbed):
    """One rank a host: three 8 MB all-reduces move at least 4 MB each way per
    all-reduce through h2's interface, not through shared memory."""
    before = testbed.counters("h2")
    p, out, _ = spmd_run(testbed, "-n", "2", "--hosts", "h1,h2", os.path.join(SCRIPTS, "big_allreduce.py"))
    after = testbed.counters("h2")
    assert p.returncode == 0 and "OK big_allreduce" in out, out
    assert after["tx"] - before["tx"] > 12e6 and after["rx"] - before["rx"] > 12e6, (before, after)


def test_an_all_reduce_over_two_hosts_goes_host_by_host(testbed):
    """Two ranks a host: three 8 MB all-reduces over the 4 ranks reduce within each host,
    exchange between the hosts and gather within: about 8 MB cross the link each way
    per all-reduce, where the group-order all-reduce of 4 ranks moves 16 MB."""
    before = testbed.counters("h2")
    p, out, _ = spmd_run(testbed, "-n", "4", "--hosts", "h1,h2", os.path.join(SCRIPTS, "big_allreduce.py"))
    after = testbed.counters("h2")
    assert p.returncode == 0 and "OK big_allreduce" in out, out
    for way in ("tx", "rx"):
        assert 24e6 < after[way] - before[way] < 34e6, (before, after)


@pytest.mark.slow
def test_every_all_reduce_across_two_hosts_matches_numpy(testbed):
    """tests/mpi_scripts/hosts_collectives.py: every dtype and reduction, lengths no block
    divides, blocking and started, on every axis group of three meshes of 2 hosts x 2
    ranks: host by host where the group has two members on each host (its bits: the sum
    over the hosts of each host's sum), in group order elsewhere."""
    p, out, _ = spmd_run(testbed, "-n", "4", "--hosts", "h1,h2", os.path.join(SCRIPTS, "hosts_collectives.py"))
    assert p.returncode == 0 and re.search(r"^OK \d{3}", out, re.M), out


def test_hostfile_places_ranks_in_blocks(testbed, tmp_path):
    script = tmp_path / "where.py"
    script.write_text("import socket, spmd\nspmd.init()\n"
                      "print('WHERE', spmd.process_index(), socket.gethostname(), flush=True)\n")
    hostfile = tmp_path / "hosts"
    hostfile.write_text("h1 slots=1\nh2:3\n")
    p, out, _ = spmd_run(testbed, "-n", "4", "--hostfile", str(hostfile), str(script))
    assert p.returncode == 0, out
    where = dict(re.findall(r"WHERE (\d) (\w+)", out))
    assert where == {"0": "h1", "1": "h2", "2": "h2", "3": "h2"}, out


@pytest.mark.slow
def test_train_gpt_on_two_hosts_gives_the_single_host_losses_and_its_checkpoint_restores_on_one(testbed, tmp_path):
    """train_gpt on a 2x2 mesh, two ranks a host, saving every 3 steps: the losses of
    the same run on one host; then the step-2 checkpoint, written by both hosts,
    resumes on one host with the losses of the uninterrupted run."""
    ck = str(tmp_path / "ck")
    p, out, _ = spmd_run(testbed, "-n", "4", "--hosts", "h1,h2", os.path.join(SCRIPTS, "train_killed.py"),
                         *GPT, "--checkpoint-dir", ck, "--save-every", "3")
    assert p.returncode == 0, out
    two_hosts = losses_of(out)
    one_host = local_gpt_losses(GPT)
    np.testing.assert_allclose(two_hosts, one_host, rtol=1e-5)
    assert sorted(os.listdir(ck)) == ["step_00000002", "step_00000005"]
    import shutil
    shutil.rmtree(os.path.join(ck, "step_00000005"))
    resumed = local_gpt_losses(GPT + ["--checkpoint-dir", ck])
    np.testing.assert_allclose(resumed, two_hosts[3:], rtol=1e-5)


# -- faults ------------------------------------------------------------------------------------
def _start_loop(bed, backend="mpi"):
    """The looping job on both hosts (2 ranks each); returns it once rank 0 said READY."""
    p = bed.popen("h1", ["spmd", "run", "-n", "4", "--backend", backend, "--hosts", "h1,h2",
                         os.path.join(SCRIPTS, "hosts_loop.py")],
                  env=env(bed, LOOP_SECONDS="60"), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    for line in p.stdout:
        lines.append(line)
        if line.startswith("READY"):
            return p, lines
    pytest.fail("the job did not start: " + "".join(lines))


def _finish(p, lines, timeout=60):
    """Wait for the job to end: (seconds it took, its output)."""
    t0 = time.monotonic()
    reader = threading.Thread(target=lambda: lines.extend(p.stdout), daemon=True)
    reader.start()
    try:
        p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        pytest.fail(f"the job was still running {timeout} s after the fault: " + "".join(lines))
    reader.join(5)
    return time.monotonic() - t0, "".join(lines)


def test_a_cut_link_ends_the_job_naming_the_host_and_its_ranks(testbed):
    """...and nothing of the job outlives it: not hydra's ssh client on h1, which waits for
    the lost host, nor the ranks on h2, whose MPI_Abort cannot reach mpiexec."""
    p, lines = _start_loop(testbed)
    try:
        testbed.cut("h2")
        took, out = _finish(p, lines)
        left_h1 = _processes(testbed, "h1")
        deadline = time.monotonic() + HEARTBEAT + ABORT_GRACE + 6
        while _processes(testbed, "h2") and time.monotonic() < deadline:
            time.sleep(0.2)
        left_h2 = _processes(testbed, "h2")
    finally:
        testbed.reset()
    assert p.returncode != 0 and "LOOP DONE" not in out
    assert took < HEARTBEAT + 8, (took, out)       # the silence, then the abort's 1 s for the message
    assert "rank(s) [2, 3] on host h2 of this group died or hang: no sign of life for 4 s" in out, out
    assert left_h1 == [] and left_h2 == [], (left_h1, left_h2)


def _processes(bed, host):
    """The command lines of the processes on host, but its sshd."""
    out = []
    for pid in bed.pids(host):
        try:
            with open(f"/proc/{pid}/cmdline") as f:
                cmd = f.read().replace("\0", " ").strip()
        except OSError:
            continue
        if cmd and not cmd.startswith("sshd:") and not _gone(pid):
            out.append(cmd)
    return out


def test_a_killed_host_ends_the_job_naming_the_host_and_its_ranks(testbed):
    p, lines = _start_loop(testbed)
    try:
        testbed.kill("h2")
        took, out = _finish(p, lines)
    finally:
        testbed.reset()
    assert p.returncode != 0 and "LOOP DONE" not in out
    assert took < HEARTBEAT, (took, out)
    assert "spmd run: host h2 (ranks 2-3) was lost: it no longer answers ssh" in out, out


@pytest.mark.slow
def test_a_killed_host_ends_a_ray_job_naming_the_host_and_its_ranks(testbed):
    """The same on a two-node Ray cluster of `spmd run --backend ray`: h2's Ray node and
    rank actors are killed; the driver's error names a rank of h2 with its host, and the
    launcher says the host was lost."""
    pytest.importorskip("ray")
    p, lines = _start_loop(testbed, "ray")
    try:
        testbed.kill("h2")
        took, out = _finish(p, lines)
    finally:
        testbed.reset()
    assert p.returncode != 0 and "LOOP DONE" not in out
    assert took < HEARTBEAT + 4, (took, out)
    assert re.search(r"rank \d on host h2 died", out), out         # (Ray's placement picks which)
    assert "spmd run: host h2 (2 of the ranks) was lost" in out, out


@pytest.mark.parametrize("backend", ["mpi", "ray"])
def test_a_host_that_never_starts_is_named_before_anything_runs(testbed, backend):
    testbed.cut("h2")
    try:
        p, out, took = spmd_run(testbed, "-n", "4", "--backend", backend, "--hosts", "h1,h2",
                                os.path.join(SCRIPTS, "hosts_loop.py"))
    finally:
        testbed.reset()
    assert p.returncode != 0 and "READY" not in out
    assert took < HEARTBEAT + 5, (took, out)
    assert re.search(r"spmd run: host h2 \(ranks 2-3\) cannot be reached: ssh: .*timed out", out), out
    assert "nothing was started" in out


def test_a_killed_rank_is_named_by_spmd_run(testbed):
    """Rank 2 (on h2) SIGKILLs itself: mpiexec only says a process was killed; spmd run
    says which rank, where."""
    p, out, took = spmd_run(testbed, "-n", "4", "--hosts", "h1,h2", os.path.join(SCRIPTS, "multihost.py"), "dead")
    assert p.returncode != 0 and "UNREACHABLE" not in out
    assert re.search(r"spmd run: rank 2 \(pid \d+ on h2\) was killed by SIGKILL", out), out
    assert took < 30


def test_a_crashed_runs_bed_is_removed_by_the_next(testbed):
    """A process that made a bed is SIGKILLed (no atexit, no fixture teardown): the next
    bed removes its namespaces, its /etc/netns files, its processes and its directory."""
    from spmd.testing import cluster
    code = ("import time; from spmd.testing.cluster import Cluster; c = Cluster(1).start(); "
            "print(c.tag, c.dir, flush=True); time.sleep(120)")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                         env=dict(os.environ, PYTHONPATH=ROOT))
    tag, path = p.stdout.readline().split()
    ns = f"{tag}-h1"
    pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()
    assert pids, "the crashed bed's sshd should be running"
    p.kill()
    p.wait()
    assert ns in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    cluster.clean_stale()
    assert tag not in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not os.path.exists(path) and not os.path.exists(os.path.join(cluster.NETNS_ETC, ns))
    assert all(_gone(int(q)) for q in pids), pids
    assert testbed.run("h1", ["ssh", "h2", "true"]).returncode == 0          # the live bed is untouched


def _gone(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        return True
