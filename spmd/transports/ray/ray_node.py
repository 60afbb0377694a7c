"""One node of a Ray cluster that `spmd run --backend ray --hosts` starts over ssh, and
stops when the launcher goes away.

    python -m spmd.transports.ray.ray_node [ray start options...]

Reads the job's Ray authentication token from the first line of its standard input (so
it appears on no command line), runs `ray start --block` with the options given and the
token (RAY_AUTH_MODE=token), prints READY once Ray says it started,
and stops Ray (SIGTERM to `ray start`, which stops the processes it started; SIGKILL to
its process group after a grace period) as soon as its standard input closes: the ssh
connection that started it ended, because the job finished, the launcher was killed by
any signal, or the link to the launcher's host was cut and ssh gave up. So no Ray node
outlives its job.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

GRACE_SECONDS = 10


def ray_command() -> list:
    exe = os.path.join(os.path.dirname(sys.executable), "ray")
    return [exe] if os.path.exists(exe) else [sys.executable, "-m", "ray.scripts.scripts"]


def _stop(p):
    if p.poll() is not None:
        return
    p.send_signal(signal.SIGTERM)
    try:
        p.wait(GRACE_SECONDS)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    p.wait()


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    token = sys.stdin.readline().strip()
    env = dict(os.environ, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token) if token else None
    p = subprocess.Popen(ray_command() + ["start", "--block", *argv], stdin=subprocess.DEVNULL, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)

    def relay():
        said = False
        for line in p.stdout:
            sys.stderr.write(line)
            if not said and "Ray runtime started" in line:
                print("READY", flush=True)
                said = True
    threading.Thread(target=relay, daemon=True).start()
    stdin_closed = threading.Event()

    def watch_stdin():
        while sys.stdin.readline():
            pass
        stdin_closed.set()
    threading.Thread(target=watch_stdin, daemon=True).start()
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, lambda *_: stdin_closed.set())
    while not stdin_closed.wait(0.5):
        if p.poll() is not None:
            break
    _stop(p)
    sys.exit(p.returncode if p.returncode and p.returncode > 0 else 0)


if __name__ == "__main__":
    main()
