"""Which hosts a job runs on and which ranks each one gets.

    parse_hosts("h1,h2:4") -> [("h1", None), ("h2", 4)]
    read_hostfile(path)    -> the same, from lines "host", "host:slots" or "host slots=N"
    place(hosts, n)        -> [("h1", [0, 1]), ("h2", [2, 3])]

Ranks fill the hosts in order, a block per host (as SLURM's block distribution and
MPICH's `host:slots` do), so neighbouring ranks — a mesh's inner axis — share a host.
A host without a slot count takes an even share of the ranks the counted hosts leave.
"""
from __future__ import annotations

import re


class HostsError(ValueError):
    """A host list or hostfile that cannot be used; the message says how to fix it."""


def parse_hosts(text: str) -> list:
    hosts = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        name, _, slots = item.partition(":")
        hosts.append((_name(name, item), _slots(slots, item) if slots else None))
    if not hosts:
        raise HostsError(f"--hosts {text!r} names no host (write h1,h2 or h1:2,h2:2)")
    return hosts


def read_hostfile(path: str) -> list:
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise HostsError(f"--hostfile {path}: {e.strerror}") from None
    hosts = []
    for k, line in enumerate(lines, start=1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        m = re.fullmatch(r"(\S+?)(?::(\S+)|\s+slots\s*=\s*(\S+))?", line)
        if m is None:
            raise HostsError(f"{path}:{k}: {line!r} is not 'host', 'host:slots' or 'host slots=N'")
        slots = m.group(2) or m.group(3)
        hosts.append((_name(m.group(1), f"{path}:{k}"), _slots(slots, f"{path}:{k}") if slots else None))
    if not hosts:
        raise HostsError(f"--hostfile {path} names no host")
    return hosts


def _name(name, where):
    if not re.fullmatch(r"[A-Za-z0-9_.\-\[\]]+", name):
        raise HostsError(f"{where}: {name!r} is not a host name")
    return name


def _slots(slots, where):
    try:
        n = int(slots)
    except ValueError:
        n = 0
    if n < 1:
        raise HostsError(f"{where}: slots must be a positive number, got {slots!r}")
    return n


def place(hosts: list, n: int) -> list:
    """[(host, [ranks])] for n ranks over hosts [(name, slots or None)]."""
    names = [h for h, _ in hosts]
    dup = sorted({h for h in names if names.count(h) > 1})
    if dup:
        raise HostsError(f"host(s) {', '.join(dup)} named twice; give one entry with its slots (h1:2)")
    counted = sum(s for _, s in hosts if s is not None)
    free = [h for h, s in hosts if s is None]
    if counted < n and not free:
        raise HostsError(f"-n {n} but the hosts have {counted} slots "
                         f"({','.join(f'{h}:{s}' for h, s in hosts)}): give more slots or fewer ranks")
    rest = max(0, n - counted)
    share = {h: rest // len(free) + (k < rest % len(free)) for k, h in enumerate(free)} if free else {}
    out, r = [], 0
    for h, s in hosts:
        k = min(s if s is not None else share[h], n - r)
        out.append((h, list(range(r, r + k))))
        r += k
    return out


def describe(placement: list) -> str:
    """'h1 (ranks 0-1), h2 (ranks 2-3)'."""
    return ", ".join(f"{h} ({ranks_text(rs)})" for h, rs in placement if rs)


def ranks_text(ranks) -> str:
    rs = sorted(ranks)
    if len(rs) == 1:
        return f"rank {rs[0]}"
    if rs == list(range(rs[0], rs[-1] + 1)):
        return f"ranks {rs[0]}-{rs[-1]}"
    return "ranks " + ", ".join(map(str, rs))
