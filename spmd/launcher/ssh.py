"""Running commands on other hosts over ssh, as `spmd run --hosts` and `spmd doctor` do.

The ssh found first on PATH is used, non-interactively (BatchMode: a host that asks for
a password is reported, not waited for), with the job's variables set on the far side:
PYTHONPATH and every SPMD_*, UCX_*, RAY_* (but RAY_ADDRESS), OMP_* and OPENBLAS_*
variable of this process (`passed_env`).
"""
from __future__ import annotations

import os
import shlex
from concurrent.futures import ThreadPoolExecutor

PASSED_PREFIXES = ("SPMD_", "UCX_", "RAY_", "OMP_", "OPENBLAS_", "MPIR_CVAR_")
PASSED_NAMES = ("PYTHONPATH",)
NOT_PASSED = ("RAY_ADDRESS",)


def connect_timeout() -> int:
    """Seconds a host has to answer ssh: the heartbeat timeout, within which a job
    notices a lost host anyway."""
    return max(1, round(float(os.environ.get("SPMD_HEARTBEAT_TIMEOUT", "10") or 10)))


def passed_env(environ=None) -> dict:
    env = os.environ if environ is None else environ
    return {k: v for k, v in env.items()
            if (k in PASSED_NAMES or k.startswith(PASSED_PREFIXES)) and k not in NOT_PASSED}


def is_local(host) -> bool:
    """Whether host names this machine (then no ssh is needed to run there)."""
    import socket
    if host in ("localhost", socket.gethostname()):
        return True
    try:
        addr = socket.gethostbyname(host)
        return addr.startswith("127.") or addr == socket.gethostbyname(socket.gethostname())
    except OSError:
        return False


def ssh(host, argv, timeout=None, env=None) -> list:
    """The command that runs argv on host over ssh with `env` (default: passed_env());
    argv itself when host is this machine."""
    if is_local(host):
        return [str(a) for a in argv]
    t = timeout or connect_timeout()
    env = passed_env() if env is None else env
    remote = shlex.join((["env", *(f"{k}={v}" for k, v in sorted(env.items()))] if env else [])
                        + [str(a) for a in argv])
    return ["ssh", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={t}", host, remote]


def last_line(text, default):
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1].strip() if lines else default


def run(cmd, timeout):
    """(exit status or None if it did not finish, stdout, stderr)."""
    import subprocess
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        return p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired:
        return None, "", f"no answer within {timeout:g} s"
    except OSError as e:
        return None, "", f"{cmd[0]}: {e.strerror}"


def unreachable(hosts, timeout=None) -> list:
    """[(host, why)] for every other host that does not run `true` over ssh in time."""
    t = timeout or connect_timeout()

    def one(h):
        code, _, err = run(ssh(h, ["true"], t, env={}), t + 5)
        return None if code == 0 else (h, last_line(err, f"ssh exited with status {code}"))
    others = [h for h in hosts if not is_local(h)]
    with ThreadPoolExecutor(max(1, len(others))) as ex:
        return [r for r in ex.map(one, others) if r]


# seconds a host has to answer ssh after a failed job (a reachable one answers in well under 1)
POST_MORTEM_TIMEOUT = 3


def say_lost_hosts(placement, stream=None, placed=True):
    """After a failed job: one line for each host of `placement` ([(host, [ranks])]) that
    no longer answers ssh. When a whole host is lost (crashed, its link cut), its ranks
    cannot speak, and the launcher only sees its own error. `placed`: the ranks run
    where `placement` says (MPI); on Ray its placement group decides which ranks a
    host's CPUs take, so only their number is known here."""
    import sys

    from .hosts import ranks_text
    stream = sys.stderr if stream is None else stream
    ranks = dict(placement)
    for host, why in unreachable([h for h, rs in placement if rs], timeout=POST_MORTEM_TIMEOUT):
        who = ranks_text(ranks[host]) if placed else f"{len(ranks[host])} of the ranks"
        stream.write(f"spmd run: host {host} ({who}) was lost: it no longer answers ssh ({why})\n")
    stream.flush()
