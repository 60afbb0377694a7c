"""spmd run across hosts, the parts that need no hosts: --hosts, --hostfile and which
ranks each host gets; the rank parent; ssh; spmd doctor's verdicts."""
import os

import pytest

from spmd.launcher.hosts import HostsError, describe, parse_hosts, place, read_hostfile


def test_hosts_parse_with_and_without_slots():
    assert parse_hosts("h1,h2:4") == [("h1", None), ("h2", 4)]
    assert parse_hosts(" a.example , b ") == [("a.example", None), ("b", None)]
    for bad, msg in (("", "names no host"), ("h1:0", "slots must be a positive"), ("h1:x", "slots"),
                     ("h 1", "not a host name")):
        with pytest.raises(HostsError, match=msg):
            parse_hosts(bad)


def test_hostfile_takes_mpich_and_open_mpi_lines(tmp_path):
    f = tmp_path / "hosts"
    f.write_text("# the cluster\nh1:2\nh2 slots=3  # big one\n\nh3\n")
    assert read_hostfile(str(f)) == [("h1", 2), ("h2", 3), ("h3", None)]
    f.write_text("h1 slots=two\n")
    with pytest.raises(HostsError, match=r"hosts:1: .*slots"):
        read_hostfile(str(f))
    with pytest.raises(HostsError, match="No such file"):
        read_hostfile(str(tmp_path / "missing"))


@pytest.mark.parametrize("hosts, n, want", [
    ([("h1", None), ("h2", None)], 4, [("h1", [0, 1]), ("h2", [2, 3])]),        # blocks, even shares
    ([("h1", None), ("h2", None)], 3, [("h1", [0, 1]), ("h2", [2])]),
    ([("h1", 1), ("h2", None)], 4, [("h1", [0]), ("h2", [1, 2, 3])]),          # slots first, the rest shared
    ([("h1", 2), ("h2", 2)], 3, [("h1", [0, 1]), ("h2", [2])]),                # spare slots stay empty
])
def test_ranks_fill_hosts_in_blocks(hosts, n, want):
    assert place(hosts, n) == want


def test_too_few_slots_and_repeated_hosts_are_errors():
    with pytest.raises(HostsError, match="-n 5 but the hosts have 4 slots .h1:2,h2:2."):
        place([("h1", 2), ("h2", 2)], 5)
    with pytest.raises(HostsError, match="h1 named twice"):
        place([("h1", 2), ("h1", 2)], 4)
    assert describe([("h1", [0, 1]), ("h2", [3]), ("h3", [])]) == "h1 (ranks 0-1), h2 (rank 3)"


def test_the_rank_parent_names_how_a_rank_ended():
    from spmd.launcher.rank import how_it_ended, rank_of
    assert how_it_ended(0) is None
    assert how_it_ended(-9) == "was killed by SIGKILL" and how_it_ended(3) == "exited with status 3"
    assert rank_of({"PMI_RANK": "2"}) == "2" and rank_of({"SLURM_PROCID": "5"}) == "5" and rank_of({}) == "?"


def test_ssh_passes_the_jobs_variables_and_never_asks_for_a_password():
    from spmd.launcher.ssh import passed_env, ssh
    env = passed_env({"PYTHONPATH": "/src", "SPMD_HEARTBEAT_TIMEOUT": "4", "UCX_TLS": "tcp", "RAY_ADDRESS": "x:1",
                      "HOME": "/root", "RAY_AUTH_MODE": "token"})
    assert env == {"PYTHONPATH": "/src", "SPMD_HEARTBEAT_TIMEOUT": "4", "UCX_TLS": "tcp", "RAY_AUTH_MODE": "token"}
    cmd = ssh("h2", ["python", "-c", "print('a b')"], timeout=3, env={"A": "1 2"})
    assert cmd[:5] == ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=3"] and cmd[5] == "h2"
    assert cmd[6] == "env 'A=1 2' python -c 'print('\"'\"'a b'\"'\"')'"


def test_doctor_says_what_differs_and_what_to_do(monkeypatch):
    import json

    from spmd.launcher import doctor
    here = doctor.facts()
    there = dict(here, host="h2", ray="2.0.0", spmd=here["spmd"].replace("source ", "source 0"))
    monkeypatch.setattr(doctor, "run", lambda cmd, timeout: (0, json.dumps(there) + "\n", ""))
    fails, got = doctor.check_host("h2", here)
    assert got == there and len(fails) == 2, fails
    assert any(f.startswith("FAIL h2: ray is 2.0.0 there but") and "install the same ray" in f for f in fails)
    assert any(f.startswith("FAIL h2: spmd is") and "the same checkout or wheel" in f for f in fails)
    monkeypatch.setattr(doctor, "run", lambda cmd, timeout: (255, "", "ssh: connect to host h2 port 22: No route"))
    fails, got = doctor.check_host("h2", here)
    assert got is None and fails == ["FAIL h2: cannot be reached over ssh: ssh: connect to host h2 port 22: No route "
                                     "— check that it is up and that `ssh h2 true` works without a password"]


def test_mpiexec_across_hosts_runs_with_sigpipe_ignored_and_a_signal_death_is_named():
    """spmd run starts mpiexec across hosts as it execs it on one host: SIGPIPE ignored
    (hydra, killed by it when it wrote to a connection a proxy had just closed, made
    the job exit 243 without a word). A launcher killed by a signal is named, and the
    status is a shell's, 128 + the signal. (In a process of its own: run_on_hosts adopts
    and ends the orphans of the process it runs in.)"""
    import subprocess
    import sys

    from paths import ROOT

    def run(shell):
        code = ("import sys; from spmd.transports.mpi import mpi_launch as mpi; "
                f"sys.exit(mpi.run_on_hosts(['sh', '-c', {shell!r}], None, [('localhost', [0])]))")
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                              env=dict(__import__("os").environ, PYTHONPATH=ROOT))

    # a shell cannot undo a signal ignored when it started: the kill does nothing
    p = run("kill -PIPE $$; exit 0")
    assert p.returncode == 0, p.stderr
    p = run("kill -TERM $$")
    assert p.returncode == 128 + 15 and "spmd run: mpiexec was killed by SIGTERM" in p.stderr, p.stderr
    # hydra failing after every rank ended cleanly (each rank's parent, launcher/rank.py,
    # says so in SPMD_RANKS_FINISHED): the job succeeded; one rank short: mpiexec's status
    p = run('touch "$SPMD_RANKS_FINISHED/rank-0"; exit 255')
    assert p.returncode == 0 and "every one of the 1 ranks ended with status 0" in p.stderr, p.stderr
    p = run("exit 255")
    assert p.returncode == 255, p.stderr


def test_a_rank_parent_says_a_clean_end_only(tmp_path):
    """launcher/rank.py marks its rank finished in SPMD_RANKS_FINISHED on status 0, and
    not on a failure."""
    import subprocess
    import sys

    from paths import ROOT
    rank = os.path.join(ROOT, "spmd", "launcher", "rank.py")
    for status, rank_no in ((0, "3"), (2, "4")):
        script = tmp_path / f"s{status}.py"
        script.write_text(f"raise SystemExit({status})\n")
        env = dict(os.environ, SPMD_RANKS_FINISHED=str(tmp_path), PMI_RANK=rank_no)
        p = subprocess.run([sys.executable, "-I", rank, str(script)], env=env, timeout=60)
        assert p.returncode == status
    assert sorted(f for f in os.listdir(tmp_path) if f.startswith("rank-")) == ["rank-3"]
