"""Single-copy reads between the rank processes of one host, for the Ray communicator:
Linux cross-memory attach (process_vm_readv), as MPICH's shared-memory path uses for
large messages. A receiver copies a peer's array straight into its result, so the
sender copies nothing; the sender keeps the array alive and unchanged until every
reader said it is done (collectives/ray.py).

    data = probe()                      # (pid, address, token), and the buffer to keep
    reachable(*data)                    # a peer: may it read this process's memory?
    read(pid, address, out)             # out (contiguous) <- out.nbytes bytes at address

Whether one process may read another's memory depends on the kernel and the container
(ptrace permission: same user, Yama's ptrace_scope, seccomp profiles that forbid the
call), so `reachable` tries it once when the links are set up; where it fails the
shared-memory slab (collectives/shm.py) carries the data instead. SPMD_RAY_CMA=0 turns
single-copy reads off.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import secrets
import sys

import numpy as np

from ..errors import CollectiveError


class _IOVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


def _load():
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        f = libc.process_vm_readv
    except (OSError, AttributeError):
        return None
    f.restype = ctypes.c_ssize_t
    f.argtypes = [ctypes.c_int, ctypes.POINTER(_IOVec), ctypes.c_ulong, ctypes.POINTER(_IOVec), ctypes.c_ulong,
                  ctypes.c_ulong]
    return f


# a ctypes call releases the GIL while the kernel copies: the links' threads keep running
_READV = _load()


def supported() -> bool:
    return _READV is not None and os.environ.get("SPMD_RAY_CMA", "1") != "0"


def read(pid, address, out):
    """Copy out.nbytes bytes from `address` in process `pid` into the contiguous `out`.
    OSError when the kernel refuses (the process is gone, or reading it is forbidden)."""
    n = out.nbytes
    dst = out.ctypes.data
    done = 0
    while done < n:                  # the kernel may copy less than asked (a partial read)
        local = _IOVec(dst + done, n - done)
        remote = _IOVec(address + done, n - done)
        k = _READV(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
        if k <= 0:
            e = ctypes.get_errno() if k < 0 else 0
            raise OSError(e, f"reading {n} bytes of process {pid}: {os.strerror(e) if e else 'nothing copied'}")
        done += k


class PeerArray:
    """A contiguous array in the memory of rank `src`'s process (pid) of this host, not
    copied yet."""

    def __init__(self, src, pid, address, dtype, shape):
        self.src, self.pid, self.address = src, pid, address
        self.dtype, self.shape = np.dtype(dtype), tuple(shape)
        self.size = int(np.prod(self.shape, dtype=np.int64))
        self.nbytes = self.size * self.dtype.itemsize

    def read_into(self, out):
        """out (contiguous, this size and dtype) <- the array."""
        try:
            read(self.pid, self.address, out)
        except OSError as e:
            raise CollectiveError(f"rank {self.src} is lost: reading its array failed ({e}): "
                                  f"its process died") from None


def probe():
    """A small buffer holding a random token, for peers to check they can read this
    process's memory: (pid, address, token), and the buffer (keep it while peers probe)."""
    token = secrets.token_bytes(16)
    buf = np.frombuffer(bytearray(token), np.uint8)
    return (os.getpid(), buf.ctypes.data, token), buf


def reachable(pid, address, token) -> bool:
    """Whether this process reads the memory of the probe (pid, address, token)."""
    if not supported():
        return False
    got = np.zeros(len(token), np.uint8)
    try:
        read(pid, address, got)
    except OSError:
        return False
    return got.tobytes() == token
