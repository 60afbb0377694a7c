"""RayCommunicator: the ranks are Ray actors; collectives move data through Ray's
object store.

Every rank actor (runtime/ray.py) has a `Mailbox`. A rank sends by calling the peer
actor's `deposit` method, fire and forget, with the payload as a *top-level* argument:
Ray resolves it before `deposit` runs, so the receiving actor gets a numpy array —
read straight out of the node's shared-memory object store (zero-copy, read-only) when
sender and receiver share a node, pulled by Ray's object manager when they do not.
A payload bigger than Ray's inline limit is `ray.put` once by the sender, however many
peers receive it (all_reduce, all_gather, broadcast send the same array to every
peer); small payloads travel inside the call itself, which is the faster path for them.
No torch, no pickling of arrays beyond Ray's zero-copy numpy serialisation.

Messages are keyed by (run id, sequence number, sender). All ranks run the same
program, so the k-th collective a rank calls in a run is the k-th on every rank; each
message also carries the call's tag (name, shape, dtype, attributes), and a group that
does not agree on the call fails naming the ranks that differ, as on the local backend.

Semantics are those of collectives/base.py, bit for bit those of the LocalCommunicator:
reductions run over the group's inputs in group order, so every rank gets the same
bits and Ray and local runs agree exactly. Results come from recycled buffers
(collectives/pool.py).

Started all-reduces (`all_reduce_start` / `wait`): the start sends this rank's input to
its peers (fire and forget, as above) and returns; the wait collects the peers' inputs
from the mailbox (keyed by the start's sequence number, so any collectives may run in
between) and reduces them in group order. The block-wise all_reduce (big inputs on big
groups) runs in two rounds and is done at the start (synchronous).

Failure, never a hang:
- a rank whose program raises tells its peers (`abort` on each), and the driver does
  the same when it sees an actor die; a waiting rank then raises CollectiveError
  naming the failed rank;
- a busy peer is waited for (the driver watches for dead actors); only when
  SPMD_COLLECTIVE_TIMEOUT is set does a waiting rank raise CollectiveError after that
  many seconds, naming exactly the ranks whose messages never came.
"""
from __future__ import annotations

import threading
import time

import numpy as np
import ray

from ..errors import CollectiveError
from .base import Communicator, into, reduce_arrays
from .local import _axes, _block, _check_dim, _check_op, _describe, _input
from .pool import BufferPool

# payloads up to this many bytes travel inline in the actor call (Ray's own limit for
# inlining arguments is 100 KiB); bigger ones go through the object store
INLINE_BYTES = 100 * 1024
# all_reduce of at least this many bytes on groups of at least this many ranks runs
# block-wise (reduce-scatter, then all-gather): each rank reduces 1/G of the data and
# each node receives about 2(G-1)/G of it instead of (G-1) times it, for a second round
# of messages. On one 2-core machine the direct exchange is as fast up to ~32 MB.
BLOCKWISE_BYTES = 32 << 20
BLOCKWISE_MIN_GROUP = 3

# results come from recycled buffers: fresh pages cost a page fault each (collectives/pool.py)
POOL = BufferPool()


def _reduce(op, xs):
    """op over xs in list (group) order into a recycled buffer (base.reduce_arrays)."""
    return reduce_arrays(op, xs, out=POOL.empty(xs[0].shape, xs[0].dtype))


def _concat(xs, dim):
    shape = list(xs[0].shape)
    shape[dim] = sum(a.shape[dim] for a in xs)
    return np.concatenate(xs, axis=dim, out=POOL.empty(tuple(shape), xs[0].dtype))


def _copy(x):
    out = POOL.empty(x.shape, x.dtype)
    np.copyto(out, x)
    return out


class Mailbox:
    """The messages that arrived at one rank, and the abort flag of the current run.
    `deposit` and `abort` run on the actor's message threads, `take` on its run thread."""

    def __init__(self):
        self.cond = threading.Condition()
        self.run_id = -1
        self.box = {}            # (run_id, seq, src) -> (tag, payload)
        self.failed = {}         # run_id -> reason (str)

    def start(self, run_id):
        """A new run: forget what is left of older ones (an aborted run's messages)."""
        with self.cond:
            self.run_id = run_id
            self.box = {k: v for k, v in self.box.items() if k[0] >= run_id}
            self.failed = {r: v for r, v in self.failed.items() if r >= run_id}

    def deposit(self, run_id, seq, src, tag, payload):
        with self.cond:
            if run_id < self.run_id:
                return           # from a run that has ended (aborted): nobody waits for it
            self.box[(run_id, seq, src)] = (tag, payload)
            self.cond.notify_all()

    def abort(self, run_id, reason):
        with self.cond:
            if run_id >= self.run_id:
                self.failed.setdefault(run_id, reason)
                self.cond.notify_all()

    def take(self, run_id, seq, srcs, timeout, what, group):
        """{src: (tag, payload)} for every src in srcs, or CollectiveError when the run is
        aborted or the deadline passes first."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                reason = self.failed.get(run_id)
                if reason is not None:
                    raise CollectiveError(f"{what}: aborted because {reason}")
                missing = [s for s in srcs if (run_id, seq, s) not in self.box]
                if not missing:
                    return {s: self.box.pop((run_id, seq, s)) for s in srcs}
                left = deadline - time.monotonic()
                if left <= 0:
                    raise CollectiveError(
                        f"{what}: timed out after {timeout:g} s waiting for rank(s) {missing} of group "
                        f"{list(group)} (SPMD_COLLECTIVE_TIMEOUT): they died or stopped calling collectives")
                self.cond.wait(min(left, 1.0))   # left may be infinite (no stopwatch)


class RayCommunicator(Communicator):
    """One rank's communicator for one run of a program, inside its actor.

    peers: {device: actor handle} of every rank of the mesh (its own included, unused);
    mailbox: this actor's Mailbox; run_id: the run, fixed by the driver."""

    def __init__(self, mesh, rank, peers, mailbox, run_id, timeout):
        super().__init__(mesh, rank)
        self.peers, self.mailbox, self.run_id, self.timeout = peers, mailbox, run_id, float(timeout)
        self.seq = 0
        self._cache = {}

    # -- messages --------------------------------------------------------------------------
    def _group(self, axes):
        axes = _axes(axes)
        hit = self._cache.get(axes)
        if hit is None:
            devices = tuple(self.group(axes))
            hit = self._cache[axes] = (axes, devices, devices.index(self.rank))
        return hit

    def _send(self, seq, tag, dsts, payload):
        """Send one array to every rank in dsts: one object in the store for all of them."""
        if not dsts:
            return
        if payload.nbytes > INLINE_BYTES:
            payload = ray.put(payload)
        for d in dsts:
            self.peers[d].deposit.remote(self.run_id, seq, self.rank, tag, payload)

    def _recv(self, seq, tag, srcs, what, devices):
        got = self.mailbox.take(self.run_id, seq, srcs, self.timeout, what, devices)
        differ = [s for s in srcs if got[s][0] != tag]
        if differ:
            raise CollectiveError(
                f"{what}: the group does not agree on the call: rank {self.rank} called {_describe(tag)}, "
                f"rank(s) {differ} called {'; '.join(sorted({_describe(got[s][0]) for s in differ}))}")
        return {s: got[s][1] for s in srcs}

    def _begin(self, name, x, axes, attrs):
        axes, devices, i = self._group(axes)
        self.seq += 1
        tag = (name, x.shape, x.dtype.str, attrs)
        what = f"{name} over {axes}" + (f" at {self.loc}" if self.loc else "") + f" on rank {self.rank}"
        return axes, devices, i, self.seq, tag, what

    def _exchange(self, name, x, axes, attrs, payload_for):
        """Send payload_for(j) to group member j (one object when it is the same for all),
        receive every member's payload for this rank; [payload of member 0..G-1]."""
        axes, devices, i, seq, tag, what = self._begin(name, x, axes, attrs)
        G = len(devices)
        others = [d for d in devices if d != self.rank]
        if G > 1:
            same = payload_for(None)
            if same is not None:
                self._send(seq, tag, others, same)
            else:
                for j, d in enumerate(devices):
                    if d != self.rank:
                        self._send(seq, tag, [d], np.ascontiguousarray(payload_for(j)))
        got = self._recv(seq, tag, others, what, devices) if G > 1 else {}
        mine = payload_for(None)
        mine = payload_for(i) if mine is None else mine
        return [mine if d == self.rank else got[d] for d in devices], i, G

    # -- the collectives ---------------------------------------------------------------------
    def all_reduce(self, x, axes, op="sum", out=None):
        r = self._all_reduce(x, axes, op)
        if out is None:
            return r
        np.copyto(out, r)
        return out

    def _all_reduce(self, x, axes, op):
        x = _input(x)
        _check_op(op)
        G = self.mesh.axes_size(_axes(axes))
        if G >= BLOCKWISE_MIN_GROUP and x.nbytes >= BLOCKWISE_BYTES and x.size >= G:
            return self._all_reduce_blockwise(x, axes, op)
        xs, _, _ = self._exchange("all_reduce", x, axes, (op,), lambda j: x)
        return _reduce(op, xs)

    def all_reduce_start(self, x, axes, op="sum"):
        x = _input(x)
        _check_op(op)
        G = self.mesh.axes_size(_axes(axes))
        if G >= BLOCKWISE_MIN_GROUP and x.nbytes >= BLOCKWISE_BYTES and x.size >= G:
            return self.put_handle((None, self._all_reduce_blockwise(x, axes, op)))
        axes, devices, i, seq, tag, what = self._begin("all_reduce", x, axes, (op,))
        others = [d for d in devices if d != self.rank]
        self._send(seq, tag, others, x)         # serialised (inline) or put in the store now
        return self.put_handle(((seq, tag, others, what, devices, op), x))

    def wait(self, handle):
        call, x = self.take_handle(handle)
        if call is None:
            return x
        seq, tag, others, what, devices, op = call
        got = self._recv(seq, tag, others, what, devices) if others else {}
        return _reduce(op, [x if d == self.rank else got[d] for d in devices])

    def _all_reduce_blockwise(self, x, axes, op):
        """A reduce-scatter of the flat x (member j gets block j of everyone's x and
        reduces it, in group order: the bits of a whole-array reduction), then an
        all-gather of the reduced blocks. Each rank stores about |x| in the object store
        and reduces |x|/G, instead of reducing all of it."""
        G = self.mesh.axes_size(_axes(axes))
        flat = x.reshape(-1)
        bounds = [flat.size * k // G for k in range(G + 1)]
        parts, _, _ = self._exchange("all_reduce", x, axes, (op,),
                                     lambda j: None if j is None else flat[bounds[j]:bounds[j + 1]])
        block = _reduce(op, parts)
        del parts                # release the peers' blocks before the second round
        blocks, _, _ = self._exchange("all_reduce/gather", x, axes, (op,), lambda j: block)
        return _concat(blocks, 0).reshape(x.shape)

    def all_gather(self, x, axes, dim=0, out=None):
        x = _input(x)
        _check_dim("all_gather", x, dim)
        xs, _, _ = self._exchange("all_gather", x, axes, (dim,), lambda j: x)
        return into(out, _concat(xs, dim))

    def reduce_scatter(self, x, axes, dim=0, op="sum", out=None):
        x = _input(x)
        _check_op(op)
        G = self.mesh.axes_size(_axes(axes))
        _check_dim("reduce_scatter", x, dim, G)
        blocks, _, _ = self._exchange("reduce_scatter", x, axes, (dim, op),
                                      lambda j: None if j is None else _block(x, dim, j, G))
        return into(out, _reduce(op, blocks))

    def all_to_all(self, x, axes, split_dim, concat_dim, out=None):
        x = _input(x)
        G = self.mesh.axes_size(_axes(axes))
        _check_dim("all_to_all", x, split_dim, G)
        _check_dim("all_to_all", x, concat_dim)
        blocks, _, _ = self._exchange("all_to_all", x, axes, (split_dim, concat_dim),
                                      lambda j: None if j is None else _block(x, split_dim, j, G))
        return into(out, _concat(blocks, concat_dim))

    def permute(self, x, axes, pairs):
        x = _input(x)
        G = self.mesh.axes_size(_axes(axes))
        pairs = tuple(sorted((int(s), int(d)) for s, d in pairs))
        dsts = [d for _, d in pairs]
        if any(not (0 <= k < G) for p in pairs for k in p) or len(set(dsts)) != len(dsts):
            raise CollectiveError(f"permute over {_axes(axes)}: pairs {pairs} must be (src, dst) group indices "
                                  f"in [0, {G}) naming each dst at most once")
        axes, devices, i, seq, tag, what = self._begin("permute", x, axes, (pairs,))
        to = [devices[d] for s, d in pairs if s == i and d != i]
        self._send(seq, tag, to, x)
        src = {d: s for s, d in pairs}.get(i)
        if src is None:
            return np.zeros_like(x)
        if src == i:
            return _copy(x)
        got = self._recv(seq, tag, [devices[src]], what, devices)
        return _copy(got[devices[src]])

    def broadcast(self, x, axes, root=0):
        x = _input(x)
        G = self.mesh.axes_size(_axes(axes))
        if not 0 <= root < G:
            raise CollectiveError(f"broadcast over {_axes(axes)}: root {root} is not a group index in [0, {G})")
        axes, devices, i, seq, tag, what = self._begin("broadcast", x, axes, (root,))
        if i == root:
            self._send(seq, tag, [d for d in devices if d != self.rank], x)
            return _copy(x)
        got = self._recv(seq, tag, [devices[root]], what, devices)
        return _copy(got[devices[root]])

    def barrier(self, axes=None):
        axes = self.mesh.axis_names if axes is None else _axes(axes)
        self._exchange("barrier", np.zeros(0), axes, (), lambda j: np.zeros(0))
