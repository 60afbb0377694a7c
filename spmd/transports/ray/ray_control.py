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
    Channel(address, near)   in the driver: .send(message), .receive() -> reply; .lock
                             for a caller that sends and then receives; near: the actor
                             is on the driver's host (a Unix socket then, ray_links.connect)

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


def receive_message(sock):
    """The next message on sock. A small one (a step's run, its reply) is read in two
    receives, its head and the rest, and its arrays copied out; a larger one's arrays are
    received straight into their buffers."""
    head = bytearray(_HEAD.size)
    receive_exact(sock, memoryview(head))
    n, k, rest = _HEAD.unpack(head)
    if rest <= JOIN_BYTES + 8 * k:
        body = bytearray(rest)
        receive_exact(sock, memoryview(body))
        view = memoryview(body)
        at = 8 * k + n
        bufs = []
        for size in struct.unpack_from(f"<{k}Q", body):
            b = np.empty(size, np.uint8)         # aligned, writable: arrays are made on it
            b[:] = np.frombuffer(view[at:at + size], np.uint8)
            bufs.append(b)
            at += size
        return pickle.loads(view[8 * k:8 * k + n], buffers=bufs)
    sizes = bytearray(8 * k)
    receive_exact(sock, memoryview(sizes))
    data = bytearray(n)
    receive_exact(sock, memoryview(data))
    bufs = []
    for size in struct.unpack(f"<{k}Q", sizes):
        b = np.empty(size, np.uint8)
        receive_exact(sock, memoryview(b))
        bufs.append(b)
    return pickle.loads(data, buffers=bufs)


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
            try:
                while True:
                    message = receive_message(s)
                    reply = handle(message)
                    if reply is not None:
                        send_message(s, reply)
                    if self.spin:
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
            receive_message(self.sock)
            self.stale -= 1
        return receive_message(self.sock)

    def close(self):
        self.closed = True
        close_socket(self.sock)
