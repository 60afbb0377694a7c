"""The driver's own line to each Ray rank actor: one TCP connection per actor, on which
every call to it goes (a put, a read, a run, call_on) and its reply comes back.

Why not Ray actor calls: each costs the driver a round trip through Ray's core worker
(1-2 ms on a loaded 2-core machine), and a step took three of them (the run, the wait,
the read of its loss). Here a step is one message to each rank and one reply, read by
the driver's own thread with select (no thread hand-off on either side); the reply
carries the step's small results, so reading a loss needs nothing more.

    Listener(host_ip)        in the actor: .address (ip, port, token, local name) for the
                             driver; .serve(handle) answers each message with
                             handle(message), one at a time, on a thread of its own, in
                             the order sent
    Channel(address, near)   in the driver: .send(message), .receive() -> reply, .pull()
                             (has the reply come? without waiting); .lock for a caller
                             that sends and then receives; near: the actor is on the
                             driver's host (a Unix socket then, ray_links.connect)
    Inbox(sock)              both ends' reading of a line: one receive takes what has
                             come (a step's message whole), the rest kept for the next

A message is anything cloudpickle takes; numpy arrays in it travel as raw bytes after it
(pickle protocol 5's out-of-band buffers), not copied into the pickle. The connection
starts with the listener's token: a stray connection is refused. A closed connection is
ConnectionError on the driver's side: the actor's process died.
"""
from __future__ import annotations

import os
import pickle
import secrets
import select
import socket
import struct
import threading
import time

import numpy as np
from ray import cloudpickle

from .ray_links import accept, close_socket, connect, listen, receive_exact, tune_socket

# pickle bytes, number of out-of-band buffers, bytes after the head (sizes, pickle, buffers)
_HEAD = struct.Struct("<QIQ")
# below this many bytes in all, a message goes out in one send (one system call)
JOIN_BYTES = 1 << 16


def pack(obj, by_value=False):
    """obj as the bytes to send: pickle's (cloudpickle's for by_value: functions of the
    user's script, which the actor cannot import), arrays out of band."""
    bufs = []
    if by_value:
        data = cloudpickle.dumps(obj, protocol=5, buffer_callback=bufs.append)
    else:
        try:
            data = pickle.dumps(obj, protocol=5, buffer_callback=bufs.append)
        except Exception:        # noqa: BLE001 - e.g. a local class in a result: by value
            bufs = []
            data = cloudpickle.dumps(obj, protocol=5, buffer_callback=bufs.append)
    raws = [b.raw() for b in bufs]
    sizes = [r.nbytes for r in raws]
    head = _HEAD.pack(len(data), len(raws), 8 * len(raws) + len(data) + sum(sizes)) + struct.pack(f"<{len(raws)}Q", *sizes)
    if len(data) + sum(sizes) <= JOIN_BYTES:
        return [b"".join([head, data, *raws])]
    return [head + data, *raws]


def send_message(sock, obj, by_value=False):
    send_packed(sock, pack(obj, by_value))


def send_packed(sock, parts):
    for p in parts:
        sock.sendall(p)


# one receive takes up to this many bytes: a step's run or its reply, head and all
READ_BYTES = 1 << 17


class Inbox:
    """The messages coming on one socket, read ahead: one receive takes whatever has
    come (a step's run, or its reply, whole), where reading its head and then the rest
    took two; what it read past a message is the next one's start. Every read of the
    socket goes through its Inbox."""

    def __init__(self, sock):
        self.sock = sock
        self.buf = bytearray(READ_BYTES)
        self.view = memoryview(self.buf)
        self.lo = self.hi = 0            # buf[lo:hi]: read, not yet taken

    def ready(self) -> bool:
        """Has a message come, whole (taking it needs no receive), or the head of one too
        large for this Inbox (taking it reads the rest as it comes)?"""
        n = self.hi - self.lo
        if n < _HEAD.size:
            return False
        rest = _HEAD.unpack_from(self.buf, self.lo)[2]
        return n >= _HEAD.size + rest or _HEAD.size + rest > len(self.buf)

    def pull(self) -> bool:
        """What has come, taken without waiting (one receive); whether a message is
        `ready` now."""
        if not self.ready():
            self._room()
            try:
                self._receive(socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                return False
        return self.ready()

    def receive(self):
        """The next message (waits for it). A small one is read into this Inbox's buffer
        and its arrays copied out; a larger one's arrays are received straight into
        their buffers."""
        self._fill(_HEAD.size)
        n, k, rest = _HEAD.unpack_from(self.buf, self.lo)
        if _HEAD.size + rest <= len(self.buf):
            self._fill(_HEAD.size + rest)
            sizes = self.lo + _HEAD.size            # k sizes, the pickle, its buffers
            data = sizes + 8 * k
            at = data + n
            bufs = []
            for size in struct.unpack_from(f"<{k}Q", self.buf, sizes):
                b = np.empty(size, np.uint8)         # aligned, writable: arrays are made on it
                b[:] = np.frombuffer(self.view[at:at + size], np.uint8)
                bufs.append(b)
                at += size
            self._took(at)
            return pickle.loads(self.view[data:data + n], buffers=bufs)
        self._took(self.lo + _HEAD.size)
        sizes = bytearray(8 * k)
        self._take_exact(memoryview(sizes))
        data = bytearray(n)
        self._take_exact(memoryview(data))
        bufs = []
        for size in struct.unpack(f"<{k}Q", sizes):
            b = np.empty(size, np.uint8)
            self._take_exact(memoryview(b))
            bufs.append(b)
        return pickle.loads(data, buffers=bufs)

    def _fill(self, need):
        """At least `need` bytes read and not taken (need <= READ_BYTES)."""
        if self.lo + need > len(self.buf):
            self._room()
        while self.hi - self.lo < need:
            self._receive()

    def _receive(self, flags=0):
        """One receive into the room after what was read."""
        k = self.sock.recv_into(self.view[self.hi:], len(self.buf) - self.hi, flags)
        if k == 0:
            raise ConnectionError("the connection was closed")
        self.hi += k

    def _room(self):
        """What is left moved to the front: the rest of its message fits after it."""
        if self.lo:
            left = self.hi - self.lo
            self.buf[:left] = self.buf[self.lo:self.hi]
            self.lo, self.hi = 0, left

    def _took(self, at):
        self.lo = at
        if self.lo == self.hi:
            self.lo = self.hi = 0

    def _take_exact(self, out):
        """out filled: from what was read ahead first, then from the socket."""
        have = min(len(out), self.hi - self.lo)
        out[:have] = self.view[self.lo:self.lo + have]
        self._took(self.lo + have)
        if have < len(out):
            receive_exact(self.sock, out[have:])


# after answering, the actor polls its line this long before it sleeps in a receive
# (when its host has a core for each of its ranks: `Listener.spin`): the driver's next
# message (a step's run) mostly comes sooner, and a rank woken from sleep starts late
SPIN_SECONDS = 0.005


def _spin_until_readable(poller, seconds):
    end = time.perf_counter() + seconds
    while not poller.poll(0):
        if time.perf_counter() > end:
            return
        os.sched_yield()


class Listener:
    """The actor's end: accepts the driver's connection and answers its messages."""

    def __init__(self, host_ip):
        self.token = secrets.token_bytes(16)
        self.listeners, self.address = listen(host_ip, self.token, backlog=4)
        self.spin = 0.0          # seconds to poll for the next message after an answer

    def serve(self, handle):
        threading.Thread(target=self._serve, args=(handle,), name="spmd-ray-control", daemon=True).start()

    def _serve(self, handle):
        while True:
            try:
                s = accept(self.listeners, None)
            except (OSError, ValueError):
                return
            try:
                token = bytearray(len(self.token))
                s.settimeout(10)
                receive_exact(s, memoryview(token))
                s.settimeout(None)
            except OSError:
                s.close()
                continue
            if bytes(token) != self.token:
                s.close()
                continue
            tune_socket(s)
            poller = select.poll()
            poller.register(s, select.POLLIN)
            inbox = Inbox(s)
            try:
                while True:
                    message = inbox.receive()
                    reply = handle(message)
                    if reply is not None:
                        send_message(s, reply)
                    if self.spin and not inbox.ready():
                        _spin_until_readable(poller, self.spin)
            except (OSError, EOFError):
                pass                 # the driver went away: wait for the next one
            finally:
                s.close()


class Channel:
    """The driver's end of one actor's connection."""

    def __init__(self, address, near=False, timeout=60.0):
        self.sock = connect(address, near, timeout)
        tune_socket(self.sock)
        self.sock.sendall(address[2])
        self.sock.settimeout(None)
        self.inbox = Inbox(self.sock)
        self.lock = threading.Lock()
        self.stale = 0          # replies owed to requests nobody waits for any more
        self.closed = False

    def fileno(self):
        return self.sock.fileno()

    def send(self, message, by_value=False):
        send_message(self.sock, message, by_value)

    def send_packed(self, parts):
        send_packed(self.sock, parts)

    def receive(self):
        """The reply to the oldest request still waited for (the replies of a run the
        driver stopped waiting for, interrupted, are read and dropped first)."""
        while self.stale:
            self.inbox.receive()
            self.stale -= 1
        return self.inbox.receive()

    def pull(self):
        """Is the reply to the oldest request here (read without waiting)? (Stale replies
        before it are read then.)"""
        while self.inbox.pull():
            if not self.stale:
                return True
            self.inbox.receive()
            self.stale -= 1
        return False

    def close(self):
        self.closed = True
        close_socket(self.sock)
