"""Who runs where: world rank -> (host, pid), filled by MPIRuntime when it starts, and
which of those processes are gone (a process on this host that exited or was killed)."""
from __future__ import annotations

import os
import socket

# world rank -> (host, pid), filled by MPIRuntime when it starts: a timed-out collective
# then names the ranks of its group whose process on this host is gone
PEERS = {}


# -- the deadline ------------------------------------------------------------------------------
def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")   # a zombie is dead
    except OSError:
        try:
            os.kill(pid, 0)       # no /proc (not Linux): ask the kernel
            return True
        except ProcessLookupError:
            return False
        except OSError:
            return True


def gone(ranks):
    """The ranks among `ranks` whose process ran on this host and no longer does."""
    host = socket.gethostname()
    return [r for r in ranks if r in PEERS and PEERS[r][0] == host and not alive(PEERS[r][1])]


def ranks_text(ranks) -> str:
    """'rank(s) [2, 3]', with their hosts when the world spans several: 'rank(s) [2, 3]
    on host h2' (from PEERS), so a lost host is named with its ranks."""
    text = f"rank(s) {list(ranks)}"
    if len({h for h, _ in PEERS.values()}) > 1:
        hosts = sorted({PEERS[r][0] for r in ranks if r in PEERS})
        if hosts:
            text += f" on host{'s' if len(hosts) > 1 else ''} {', '.join(hosts)}"
    return text
