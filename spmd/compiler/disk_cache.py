"""Where spmd keeps what it compiled, for the next process: `$SPMD_CACHE_DIR`, else
`$XDG_CACHE_HOME/spmd`, else `~/.cache/spmd`. SPMD_CACHE=0 turns every disk cache off.

Everything here is best effort: a read-only or missing directory only costs the next
process time, never a wrong result (a file is written whole or not at all).
"""
from __future__ import annotations

import contextlib
import os
import tempfile


def enabled() -> bool:
    return os.environ.get("SPMD_CACHE", "1") != "0"


def cache_dir() -> str:
    d = os.environ.get("SPMD_CACHE_DIR")
    if not d:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        d = os.path.join(base, "spmd")
    return d


def read(path):
    """The file's bytes, or None."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


def write_atomic(path, data):
    """Write `data` to `path` through a temporary file and a rename, so a reader (another
    rank on this host) never sees half a file."""
    if not enabled():
        return
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError:
        pass


@contextlib.contextmanager
def host_lock(path):
    """An advisory lock on `path`.lock, so processes of one host (MPI ranks) making the
    same entry take turns: one makes it, the others then read it."""
    fd = None
    try:
        import fcntl
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd = os.open(path + ".lock", os.O_CREAT | os.O_RDWR, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX)
    except (OSError, ImportError):
        if fd is not None:
            os.close(fd)
        fd = None
    try:
        yield
    finally:
        if fd is not None:
            os.close(fd)        # closing releases the lock
