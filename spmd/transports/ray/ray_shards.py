"""Shards held in the rank actors' own memory: the driver's handle to one (`Shard`), the
actor's table of them (`ShardTable`), and how the driver tells an actor which ones
nobody holds any more (`Drops`).

Why not Ray's object store: a result returned from an actor call is copied into the
object store and its reference tracked by the driver, a 16 MB shard's copy costing
more than the step that made it; and an argument read from the store is a read-only
view of it. Here a result stays in the actor's process under a number the driver
chose before the call (so a run returns nothing but its success), and the next run
reads it where it is.

A small array put on a device goes with the driver's next call to its actor (which any
read of it is). A shard lives as long as the driver's `Shard` for it: when that is
collected, its number joins the actor's drops, which go with the driver's next call to that actor
(every call carries them; calls to one actor run in the order the driver made them,
so a shard is never dropped before a call made earlier that reads it). An actor that
dies loses its shards: a handle to one then fails naming the rank (restore from a
checkpoint, as after any lost rank).
"""
from __future__ import annotations

import collections
import itertools
import pickle
import threading

import numpy as np

from ...errors import CollectiveError


class Shard:
    """The driver's handle to device `device`'s shard number `sid` in its actor."""
    __slots__ = ("device", "sid", "value", "_dropped", "__weakref__")

    def __init__(self, device, sid, dropped):
        self.device, self.sid, self._dropped = device, sid, dropped
        self.value = None        # a small result's value, come with its run's reply (read-only)

    def __del__(self):
        # deque.append is atomic: collection may happen on any thread, at any time
        self._dropped.append((self.device, self.sid))

    def __reduce__(self):
        raise TypeError("an spmd shard handle of the ray runtime stays in the driver "
                        "(calls to the actors pass Held(sid))")

    def __repr__(self):
        return f"Shard(rank {self.device}, #{self.sid})"


class Held:
    """A shard named in an actor call's arguments; the actor reads it from its table."""
    __slots__ = ("sid",)

    def __init__(self, sid):
        self.sid = sid

    def __reduce__(self):
        return (Held, (self.sid,))


class Drops:
    """The driver's side: new shard numbers; small shards put but not yet sent, and the
    numbers of collected handles, by device, for the next call to each actor."""

    def __init__(self):
        self.numbers = itertools.count(1)
        self.collected = collections.deque()      # (device, sid), appended by Shard.__del__
        self.by_device = {}
        self.pending = {}                         # device -> [(sid, array)] put, not yet sent
        self.lock = threading.Lock()

    def new(self, device):
        return Shard(device, next(self.numbers), self.collected)

    def later(self, device, array):
        """A shard of `device` whose value goes with the next call to its actor (a small
        put costs no call of its own: every read of it is such a call), as (sid, *wire)."""
        shard = self.new(device)
        with self.lock:
            self.pending.setdefault(device, []).append((shard.sid, *wire(array)))
        return shard

    def take(self, device):
        """(shards to keep, numbers to drop) of `device`, sent with a call to it: the
        pending puts, and the shards collected so far."""
        with self.lock:
            while True:
                try:
                    d, sid = self.collected.popleft()
                except IndexError:
                    break
                self.by_device.setdefault(d, []).append(sid)
            return self.pending.pop(device, []), self.by_device.pop(device, [])

    def forget(self, device):
        """`device`'s actor was replaced: its shards went with the old one."""
        self.take(device)


class ShardTable:
    """The actor's side: its shards by number. Each is kept read-only (a handle may be
    read by several programs, as an object in the store was)."""

    def __init__(self, rank):
        self.rank = rank
        self.arrays = {}

    def keep(self, sid, array):
        a = np.asarray(array)
        if a.flags.writeable:
            a = a.view()
            a.flags.writeable = False
        self.arrays[sid] = a

    def read(self, sid):
        a = self.arrays.get(sid)
        if a is None:
            raise CollectiveError(f"rank {self.rank} does not hold shard #{sid}: the actor that held it died "
                                  f"and was replaced, and the arrays on it were lost with it (restore them "
                                  f"from a checkpoint)")
        return a

    def resolve(self, args):
        return [self.read(a.sid) if isinstance(a, Held) else a for a in args]

    def update(self, news):
        """news: Drops.take's (shards to keep, numbers to drop); a shard put and collected
        before this call is kept, then dropped."""
        kept, dropped = news
        for sid, *sent in kept:
            self.keep(sid, unwire(sent))
        for sid in dropped:
            self.arrays.pop(sid, None)

    def inputs(self, ins):
        """A run's inputs: a shard's number read from here; an array sent with the run
        (`wire`) made from its bytes; an array itself (rank 0 in the driver) as it is."""
        return [self.read(i) if type(i) is int else unwire(i) if type(i) is tuple else i for i in ins]


def wire(array):
    """An array as a message carries it: (dtype, shape, its bytes out of band), which
    pickle takes at a third of an array's cost (~10 us an array, most of a small step's
    message)."""
    a = np.asarray(array)
    if not a.flags.c_contiguous:        # (np.ascontiguousarray makes a 0-d array 1-d)
        a = a.copy(order="C")
    return (a.dtype.str if a.dtype.isbuiltin == 1 else a.dtype, a.shape,
            pickle.PickleBuffer(a.reshape(-1).view(np.uint8)))      # (bytes: any dtype exports them)


def unwire(sent):
    """wire's (dtype, shape, bytes) received: the array on those bytes."""
    dtype, shape, data = sent
    return np.frombuffer(data, dtype).reshape(shape)


def small_value(a):
    """A small result as its reply carries it: (dtype, shape, its bytes), which pickle
    writes in the message itself at a fraction of an array's cost (numpy's own reduce,
    and a buffer of its own to send and receive), or the array itself when its dtype
    holds Python objects."""
    a = np.asarray(a)
    if a.dtype.hasobject:
        return a
    return (a.dtype.str if a.dtype.isbuiltin == 1 else a.dtype, a.shape, a.tobytes())


def read_small_value(v):
    """small_value's result as a read-only array."""
    if isinstance(v, tuple):
        dtype, shape, data = v
        return np.frombuffer(data, dtype).reshape(shape)      # (read-only: bytes)
    v = np.asarray(v)
    v.flags.writeable = False
    return v

