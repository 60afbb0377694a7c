"""The reaper of a private Ray: run as a script (not imported) by transports/ray/ray_private.py,

    python ray_reaper.py DRIVER_PID        (stdin: a pipe whose writing end only the driver holds)

It notes, twice a second for a minute and every 5 s after, every process descended
from the driver whose command line names Ray (the GCS, the raylet, its agents and
workers), with its start time. When its
stdin closes, which the kernel does when the driver exits by any means, SIGKILL
included, it kills every noted process still running (same pid and start time), then
exits. Ray's own fate-sharing ends the GCS and the raylet with the driver, but not the
raylet's agents, which outlive it; and a process orphaned by a death can no longer be
found from the driver, hence the notes taken while it lives.

Only the standard library, and nothing of spmd: it starts in milliseconds.
"""
import os
import select
import signal
import sys
import time


def stat(pid):
    """(ppid, start time) of pid, or None when it is gone (a zombie counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except OSError:
        return None
    if fields[0] in (b"Z", b"X"):
        return None
    return int(fields[1]), int(fields[19])


def is_ray(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"ray" in f.read()
    except OSError:
        return False


def note(driver, me, noted):
    """Add the driver's Ray descendants to noted {pid: start time}."""
    children = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = stat(int(name))
            if st is not None:
                children.setdefault(st[0], []).append((int(name), st[1]))
    todo = [driver]
    while todo:
        for pid, start in children.get(todo.pop(), ()):
            if pid == me:
                continue
            if pid not in noted and is_ray(pid):
                noted[pid] = start
            todo.append(pid)


def reap(noted):
    for pid, start in noted.items():
        st = stat(pid)
        if st is not None and st[1] == start:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def main():
    driver, me = int(sys.argv[1]), os.getpid()
    signal.signal(signal.SIGINT, signal.SIG_IGN)     # a Ctrl-C in the terminal is the driver's to handle
    noted = {}
    started = time.monotonic()
    while True:
        # Ray's processes (and the agents that outlive the driver) start with it: look
        # often at first, then seldom (a look reads every process's /proc entry)
        period = 0.5 if time.monotonic() - started < 60 else 5.0
        ready, _, _ = select.select([0], [], [], period)
        if ready and not os.read(0, 4096):
            break
        note(driver, me, noted)
    reap(noted)


if __name__ == "__main__":
    main()
