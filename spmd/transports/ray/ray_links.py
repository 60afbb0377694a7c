"""Links: one rank's TCP connections to every other rank of a Ray runtime, set up once
per set of rank actors and used by the Ray communicator (transports/ray/ray_communicator.py) for every
message: arrays, and small notes about arrays in shared memory (transports/ray/ray_shm.py).

Set-up, in two steps driven by the Ray runtime (each actor's half is here):

    links = Links(rank, host_ip)       # listens on host_ip, port chosen by the kernel
    links.address                      # -> (ip, port, token, local name), sent to every peer through Ray
    links.connect(addresses, deliver, lost, near)   # to every peer; returns when all are up

Rank r connects to the ranks above it and is connected to by those below it; each
connection starts with the connecting rank's number and a token of this set of links,
so a stray connection (or one from an older set) is refused. `host_ip` is the address
Ray uses for this node (the test hosts' addresses, or loopback on one machine): the
listener never binds every interface. Peers of the same host (`near`: same host name and
boot) connect through a Unix socket instead (Linux's abstract names: no file is made,
so none is left behind), where one exists and takes the connection: on this 2-core
machine a small message costs the sender ~3 us there against ~18 us through loopback
TCP, and the round trip half.

A message is a pickled header (anything small: kind, keys, tag, dtype, shape) followed
by the raw bytes of at most one contiguous array, received straight into a fresh array
(no pickling of array data). One thread per connection receives and hands each message
to `deliver(src, header, array)`; sends run on the caller's thread, one message at a time
per connection (a lock), or on a per-peer sender thread (`send_later`) for sends that
should overlap with compute. A receiving thread always drains its socket, so a send can
block only while the peer's kernel buffers are full, never forever.

A closed or reset connection is `lost(src, reason)`: the peer's process died (the kernel
closes its sockets at once) or its host became unreachable (keepalive probes and a limit
on unacknowledged data end the connection after SPMD_HEARTBEAT_TIMEOUT seconds, default
10); the communicator fails the collectives waiting for it. Nothing here waits without end: the set-up has a deadline, and
`close()` shuts every socket, which ends the threads.
"""
from __future__ import annotations

import pickle
import queue
import secrets
import select
import socket
import struct
import sys
import threading
import time

import numpy as np

from ...errors import CollectiveError
from ..communicator import heartbeat_timeout

# kernel buffer sizes asked for (the kernel caps them at net.core.[rw]mem_max)
SOCKET_BUFFER = 4 << 20
CONNECT_SECONDS = 60.0
_LEN = struct.Struct("<IQ")          # header bytes, array bytes
_HELLO = struct.Struct("<I16s")      # connecting rank, token


def tune_socket(s):
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SOCKET_BUFFER)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SOCKET_BUFFER)
    if s.family == socket.AF_UNIX:
        return                   # a local peer that dies closes its end at once: nothing to probe
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    # a peer whose host went away (a cut link, a crashed machine) closes nothing: the
    # kernel's keepalive probes, and a limit on unacknowledged data, end the connection
    # after the heartbeat timeout, however busy (or idle) the ranks are
    limit = heartbeat_timeout()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for opt, value in (("TCP_KEEPIDLE", max(1, int(limit / 2))), ("TCP_KEEPINTVL", 1),
                       ("TCP_KEEPCNT", max(1, int(limit / 2))), ("TCP_USER_TIMEOUT", int(limit * 1000))):
        if hasattr(socket, opt):
            s.setsockopt(socket.IPPROTO_TCP, getattr(socket, opt), value)


def listen(host_ip, token, backlog=128):
    """[a TCP listener on host_ip, a Unix one (Linux: under a random abstract name, so
    nothing is written to disk)], and this end's address (ip, port, token, local name
    or None) for whoever connects."""
    tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    tcp.bind((host_ip, 0))
    tcp.listen(backlog)
    listeners, name = [tcp], None
    if sys.platform.startswith("linux"):
        u = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            u.bind(b"\0spmd-" + secrets.token_hex(12).encode())
            u.listen(backlog)
            listeners.append(u)
            name = u.getsockname()
        except OSError:          # no Unix sockets here: TCP only
            u.close()
    return listeners, (host_ip, tcp.getsockname()[1], token, name)


def accept(listeners, timeout):
    """A connection to any of listeners (a new socket), or None when timeout passes first
    (None: no limit); OSError when they are closed."""
    ready, _, _ = select.select(listeners, [], [], timeout)
    if not ready:
        return None
    s, _ = ready[0].accept()
    return s


def connect(address, near, timeout):
    """A socket to address (as `listen` gives it): through its Unix socket when the other
    end is `near` (on this host) and takes the connection there, else TCP."""
    ip, port, _, name = address
    if near and name is not None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.settimeout(timeout)
            s.connect(name)
            return s
        except OSError:          # another network namespace, say: TCP then
            s.close()
    return socket.create_connection((ip, port), timeout=timeout)


def close_socket(s):
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    s.close()


def receive_exact(sock, view):
    got, n = 0, len(view)
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            raise ConnectionError("the connection was closed")
        got += k


class Links:
    def __init__(self, rank, host_ip, alloc=np.empty):
        self.rank, self.alloc = rank, alloc       # alloc(shape, dtype): where arrays are received
        self.token = secrets.token_bytes(16)
        self.listeners, self.address = listen(host_ip, self.token)
        self.socks = {}                       # peer rank -> socket
        self.locks = {}                       # peer rank -> send lock
        self.outbox = {}                      # peer rank -> queue of sends for its sender thread
        self.threads = []
        self.closed = False

    # -- set-up ----------------------------------------------------------------------------
    def connect(self, addresses, deliver, lost, near=()):
        """Connect to every rank in `addresses` ({rank: (ip, port, token, local name)},
        this one's included), to those in `near` (this host's) through their Unix sockets;
        deliver(src, header, array) and lost(src, reason) are called from the receiving
        threads."""
        self.deliver, self.lost = deliver, lost
        deadline = time.monotonic() + CONNECT_SECONDS
        below = sorted(r for r in addresses if r < self.rank)
        accepted = {}
        acceptor = threading.Thread(target=self._accept, args=(below, accepted, deadline),
                                    name=f"spmd-links-accept-{self.rank}", daemon=True)
        acceptor.start()
        for r in sorted(addresses):
            if r <= self.rank:
                continue
            s = connect(addresses[r], r in near, max(1.0, deadline - time.monotonic()))
            tune_socket(s)
            s.sendall(_HELLO.pack(self.rank, addresses[r][2]))
            s.settimeout(None)
            self.socks[r] = s
        acceptor.join(max(0.0, deadline - time.monotonic()))
        missing = [r for r in below if r not in accepted]
        if missing:
            self.close()
            raise CollectiveError(f"rank {self.rank}: rank(s) {missing} did not connect within "
                                  f"{CONNECT_SECONDS:g} s (is the port reachable between their hosts?)")
        self.socks.update(accepted)
        for r, s in self.socks.items():
            self.locks[r] = threading.Lock()
            t = threading.Thread(target=self._receive, args=(r, s), name=f"spmd-links-recv-{self.rank}<-{r}",
                                 daemon=True)
            t.start()
            self.threads.append(t)

    def _accept(self, below, accepted, deadline):
        while len(accepted) < len(below):
            try:
                s = accept(self.listeners, max(0.01, deadline - time.monotonic()))
            except (OSError, ValueError):          # close()
                return
            if s is None:            # the deadline
                return
            try:
                s.settimeout(max(0.01, deadline - time.monotonic()))
                hello = bytearray(_HELLO.size)
                receive_exact(s, memoryview(hello))
                r, token = _HELLO.unpack(hello)
            except OSError:
                s.close()
                continue
            if token != self.token or r not in below or r in accepted:
                s.close()            # not one of this set of links
                continue
            tune_socket(s)
            s.settimeout(None)
            accepted[r] = s

    # -- messages --------------------------------------------------------------------------
    def send(self, dst, header, array=None):
        """Send one message now (on this thread). CollectiveError if the link is down."""
        head = pickle.dumps(header, protocol=pickle.HIGHEST_PROTOCOL)
        data = b"" if array is None else np.ascontiguousarray(array).reshape(-1).view(np.uint8)
        s = self.socks.get(dst)
        if s is None:
            raise CollectiveError(f"rank {self.rank}: no link to rank {dst}")
        try:
            with self.locks[dst]:
                s.sendall(_LEN.pack(len(head), len(data)) + head)
                if len(data):
                    s.sendall(data)
        except OSError as e:
            raise CollectiveError(f"sending to it from rank {self.rank} failed ({e}): "
                                  f"rank {dst} died or its host is unreachable") from None

    def send_later(self, dst, header, array=None, failed=None):
        """Send on dst's sender thread (in order with its other later sends); the caller
        keeps `array` unmodified until the message is delivered. failed(reason) is called
        if the send fails."""
        q = self.outbox.get(dst)
        if q is None:
            q = self.outbox[dst] = queue.SimpleQueue()
            t = threading.Thread(target=self._sender, args=(dst, q), name=f"spmd-links-send-{self.rank}->{dst}",
                                 daemon=True)
            t.start()
            self.threads.append(t)
        q.put((header, array, failed))

    def _sender(self, dst, q):
        while True:
            item = q.get()
            if item is None:
                return
            header, array, failed = item
            try:
                self.send(dst, header, array)
            except CollectiveError as e:
                if failed is not None:
                    failed(str(e))

    def _receive(self, src, s):
        lens = bytearray(_LEN.size)
        try:
            while True:
                receive_exact(s, memoryview(lens))
                nh, nd = _LEN.unpack(lens)
                head = bytearray(nh)
                receive_exact(s, memoryview(head))
                header = pickle.loads(head)
                array = None
                if "shape" in header:
                    array = self.alloc(header["shape"], header["dtype"])
                    if nd:
                        receive_exact(s, memoryview(array.reshape(-1).view(np.uint8)))
                self.deliver(src, header, array)
        except (OSError, EOFError, pickle.UnpicklingError) as e:
            if not self.closed:
                self.lost(src, f"its connection to rank {self.rank} closed ({e or type(e).__name__}): "
                               f"rank {src} died or its host became unreachable")

    def close(self):
        self.closed = True
        for q in self.outbox.values():
            q.put(None)
        for s in list(self.socks.values()) + self.listeners:
            close_socket(s)
