"""RayCommunicator: the ranks are Ray actors; collectives move data directly between
them, over shared memory within a host and TCP between hosts. Ray only starts the
actors, tells them each other's addresses, and runs programs; no payload goes through
Ray's object store or actor calls.

Every rank actor (ray_runtime.py) has a `Transport` (ray_transport.py), set up once per set
of rank actors and kept for every program they run (rebuilt when an actor is replaced):

- `Links` (transports/ray/ray_links.py): a TCP connection to every other rank, on the
  address Ray uses for the actor's node; a thread per connection receives messages;
- `Slab` / `PeerMemory` (transports/ray/ray_shm.py): peers of the same host (same host name and
  boot, and able to map each other's memory) exchange arrays through shared memory: the
  sender copies an array once into its slab, however many peers of its host read it,
  sends each a small note over the link, and each reads it in place (reductions read
  straight from the peers' slabs) and says it is done with it on its next message to
  the sender. Small arrays (<= INLINE_BYTES) travel inside the note itself.

Messages land in the actor's `Mailbox` (ray_mailbox.py), keyed by (run id, call key, sender). All ranks
run the same program, so the k-th collective a rank calls in a run is the k-th on every
rank (the call key is (k, step) for the steps of one collective); each message carries
the call's tag (name, shape, dtype, attributes), and a group that does not agree on the
call fails naming the ranks that differ, as on the local backend.

The algorithms (G ranks in the group, N bytes each):
- all_reduce: small: every rank sends x to every other and reduces the G inputs in group
  order. At least BLOCKWISE_BYTES: a reduce-scatter (member j gets block j of every x
  and reduces it in group order) then an all-gather of the reduced blocks; each rank
  sends and receives about 2N(G-1)/G. Both give the bits of the local backend.
  When the group spans hosts (H hosts with L members each, L > 1) the all_reduce of a
  sum or product, or of integers, is hierarchical: a reduce-scatter within each host
  (shared memory), the block-wise all_reduce of each rank's part with the ranks of the
  same place on the other hosts (the only traffic between hosts: 2N(H-1)/H per host
  instead of about 2N(G-1)/G per rank), and an all-gather within each host. Floats
  are then summed host by host (every rank still gets the same bits, on every run; as
  with MPI, not the bits of a single-host run); max and min of floats, and 2-byte
  floats, keep group order.
- all_gather: when the group spans hosts (L > 1 members on each), a rank exchanges x
  with the ranks of its place on the other hosts, then forwards what it got to the
  peers of its host (each array crosses between two hosts once, not L times).
- all_gather, all_to_all, reduce_scatter and all_reduce of at least PUSH_BYTES per
  rank, the whole group on this host (x86): every rank names a buffer
  (shm.Buffers) on its board (shm.Board), and each writes its part straight into every
  member's buffer, then marks that member's board; a rank goes on when every member
  marked its board. The buffer is the result (all_gather, all_to_all, the block-wise
  all_reduce's second step) or holds the blocks a rank reduces in group order
  (reduce_scatter, the block-wise all_reduce's first step, a small all_reduce's G
  inputs). One copy of each byte and no messages: a message between
  processes costs a thread wake-up on each side, a board is a word of memory (the
  waiting rank yields its core meanwhile).
- otherwise reduce_scatter, all_to_all, permute, broadcast (and all_gather on one host):
  every rank sends each peer what that peer needs (one slab region for all peers of its
  host when it is the same array), and reduce_scatter reduces the G blocks it receives
  in group order.
- all_reduce_start / wait: the start sends (block-wise: the blocks; on TCP from a sender
  thread, so the transfer overlaps what runs until the wait); the wait receives and
  reduces. Hierarchical all_reduces are done at the start.

Results are new arrays from recycled buffers (transports/buffer_pool.py). The semantics are
those of transports/communicator.py.

Failure, never a hang:
- a rank whose program raises tells its peers (`abort` on each, through Ray), and the
  driver does the same when it sees an actor die; a waiting rank then raises
  CollectiveError naming the failed rank;
- a peer's process that dies closes its connections (the kernel does so at once): the
  ranks waiting for it fail at once, naming it;
- a busy peer is waited for; only when SPMD_COLLECTIVE_TIMEOUT is set does a waiting
  rank raise CollectiveError after that many seconds, naming the ranks whose messages
  never came.
"""
from __future__ import annotations

import math
import os
import platform
import time
import zlib

import numpy as np

from ...errors import CollectiveError
from ..collective_args import axes_of
from ..communicator import Communicator, block_of, describe, into, reduce_arrays
from . import ray_shm as shm
from .ray_transport import POOL

# arrays up to this many bytes travel inside the message, also between peers of a host
INLINE_BYTES = 64 * 1024
# collectives of at least this many bytes per rank within one host are written by their
# senders into the receivers' buffers, coordinated through boards (at 64 KB, 4 ranks on
# 2 cores, 1.8-2.4x faster than through the slab and messages; smaller arrays travel
# inside the messages)
PUSH_BYTES = 64 * 1024
# ... where the stores of one core are seen by the others in the order they were made
BOARDS_HOLD = platform.machine().lower() in ("x86_64", "amd64", "i386", "i686")
# a rank waiting on a board yields its core this long, then sleeps in growing steps
SPIN_SECONDS = 0.005
# all_reduce of at least this many bytes (and at least as many elements as ranks) runs
# block-wise: each rank reduces 1/G of the data instead of all of it, for a second round
BLOCKWISE_BYTES = 256 * 1024


def _bounds(n, G):
    return [n * k // G for k in range(G + 1)]


class RayCommunicator(Communicator):
    """One rank's communicator over a mesh, inside its actor (or the driver, rank 0),
    kept for the runs on that mesh (its groups are worked out once): `new_run` starts
    each.

    transport: this rank's Transport; run_id: the run, fixed by the driver."""

    def __init__(self, mesh, rank, transport, run_id, timeout):
        super().__init__(mesh, rank)
        self.t, self.mailbox = transport, transport.mailbox
        self._cache = {}
        # all-reduces as native instructions where the mesh's ranks share this host's
        # memory (imported here: it brings the backends' interface, which a rank that has
        # run nothing yet does not load; a program's first run brings the backends anyway)
        from .ray_native_exchange import RayNativeExchange
        self.native_exchange = RayNativeExchange.of(self, transport)
        self.new_run(run_id, timeout)

    def new_run(self, run_id, timeout):
        self.run_id, self.timeout = run_id, float(timeout)
        self.seq = 0
        if self.native_exchange is not None:
            self.native_exchange.status[:] = 0
        self.output = []           # what the program printed (spmd.debug.print), for the driver
        self.__dict__.pop("_inflight", None)      # no collective started by an earlier run

    def write(self, text):
        self.output.append(text)

    # -- messages --------------------------------------------------------------------------
    def _group(self, axes):
        axes = axes_of(axes)
        hit = self._cache.get(axes)
        if hit is None:
            devices = tuple(self.group(axes))
            hit = self._cache[axes] = (axes, devices, devices.index(self.rank))
        return hit

    def _begin(self, name, x, axes, attrs):
        axes, devices, i = self._group(axes)
        self.seq += 1
        tag = (name, x.shape, x.dtype.str, attrs)
        what = f"{name} over {axes}" + (f" at {self.loc}" if self.loc else "") + f" on rank {self.rank}"
        return axes, devices, i, tag, what

    def _post(self, key, tag, what, dsts, payload_for, later=False):
        """Send payload_for(d) to each rank d in dsts; payload_for(None), if not None, is
        the same array for all (one slab region for every peer of this host). later: TCP
        sends run on the sender threads (the arrays must stay unmodified until received)."""
        same = payload_for(None)
        shared = {}                      # id(array) -> (region, readers): one region per array
        if same is not None:
            near = [d for d in dsts if d in self.t.shm_peers]
            if len(near) and same.nbytes > INLINE_BYTES:
                shared[id(same)] = self.t.slab.put(same, len(near))
        for d in dsts:
            a = same if same is not None else np.ascontiguousarray(payload_for(d))
            head = {"run": self.run_id, "key": key, "tag": tag}
            if d in self.t.shm_peers and a.nbytes > INLINE_BYTES:
                region = shared.get(id(a)) or self.t.slab.put(a, 1)
                head.update(kind="shm", region=region)
                a = None
            else:
                head.update(kind="data", dtype=a.dtype, shape=a.shape)
            if later and a is not None and a.nbytes > INLINE_BYTES:
                self.t.send(d, head, a, later=True, failed=lambda why, d=d: self.mailbox.lost(d, why))
                continue
            try:
                self.t.send(d, head, a)
            except CollectiveError as e:
                self.mailbox.lost(d, str(e))
                raise CollectiveError(f"{what}: rank {d} is lost: {e}") from None

    def _collect(self, key, tag, srcs, what, devices):
        """{src: array} of every src; the shared-memory ones are views into the peers'
        slabs, valid until `_release(regions)`; regions: {src: its region id}."""
        if not srcs:
            return {}, {}
        got = self.mailbox.take(self.run_id, key, srcs, self.timeout, what, devices)
        differ = [s for s in srcs if got[s][0] != tag]
        if differ:
            raise CollectiveError(
                f"{what}: the group does not agree on the call: rank {self.rank} called {describe(tag)}, "
                f"rank(s) {differ} called {'; '.join(sorted({describe(got[s][0]) for s in differ}))}")
        regions = {s: got[s][2]["region"][0] for s in srcs if got[s][2].get("kind") == "shm"}
        return {s: got[s][1] for s in srcs}, regions

    def _release(self, regions):
        """The senders' slab regions are read (after the last use of the views): they hear
        it with this rank's next message to them (Transport.read)."""
        for s, rid in regions.items():
            try:
                self.t.read(s, rid)
            except CollectiveError:
                pass             # the sender is gone: nothing to free; its loss is reported by the mailbox

    def _exchange(self, name, x, axes, attrs, payload_for, combine):
        """Send payload_for(j) to group member j (one region when it is the same for all),
        receive every member's payload for this rank; combine([payload of member 0..G-1])
        -> the result (the peers' payloads are released after it)."""
        axes, devices, i, tag, what = self._begin(name, x, axes, attrs)
        key = (self.seq, 0)
        others = [d for d in devices if d != self.rank]
        same = payload_for(None)
        self._post(key, tag, what, others, lambda d: same if same is not None else
                   (None if d is None else payload_for(devices.index(d))))
        got, regions = self._collect(key, tag, others, what, devices)
        mine = same if same is not None else payload_for(i)
        try:
            return combine([mine if d == self.rank else got[d] for d in devices])
        finally:
            del got
            self._release(regions)

    # -- results written by their senders ------------------------------------------------------
    def _pushes(self, x, axes):
        """Whether a collective of x over axes writes straight into the members' results:
        x is large, every member maps this rank's memory, and stores are seen in order
        (shm.Board). Every member decides alike (the same shape, the same hosts); a
        member that did not is found out while it is waited for (`_await`)."""
        if x.nbytes < PUSH_BYTES or self.t.board is None or not BOARDS_HOLD:
            return False
        _, devices, _ = self._group(axes)
        return len(devices) <= shm.Board.SLOTS and all(d == self.rank or d in self.t.shm_peers for d in devices)

    def _push(self, name, x, axes, attrs, shape_of, part_for, slot, own=True):
        """Member j's buffer (of shape_of(j)) gets part_for(j) of this rank's x at
        slot(buffer, i), i this rank's place in the group; returns this rank's buffer
        (own=False: this rank's own part is not written into it). Through the boards
        (shm.Board): each member names its buffer on its own board under the call's
        stamp; each writes its part into every member's buffer once that member named
        it, and then marks the member's board; a member returns its buffer once every
        other member marked its board."""
        axes, devices, i, tag, what = self._begin(name, x, axes, attrs + ("into results",))
        stamp = (self.run_id << 32) | self.seq
        sign = zlib.crc32(repr(tag).encode())
        out, (fd, serial, kept) = self.t.buffers.empty(shape_of(i), x.dtype)
        mine = self.t.board.words
        mine[1], mine[2], mine[3], mine[4] = fd, serial, kept, sign
        mine[0] = stamp                  # last: a peer that sees the stamp sees the words before it
        G = len(devices)
        for k in range(1, G + 1):        # from the next member on: the members write into different buffers
            j = (i + k) % G
            d = devices[j]
            if d == self.rank:
                if own:
                    np.copyto(slot(out, i), part_for(j))
                continue
            board = self.t.board_of(d)
            self._await(lambda: board[0] == stamp, [d], what, devices)
            if board[4] != sign:
                raise CollectiveError(f"{what}: the group does not agree on the call: rank {self.rank} called "
                                      f"{describe(tag)}, rank {d} called another collective")
            shape = shape_of(j)
            nbytes = math.prod(shape) * out.dtype.itemsize
            dst = self.t.peer_memory.writable(self.t.pids[d], int(board[1]), int(board[2]), bool(board[3]))
            np.copyto(slot(dst[:nbytes].view(out.dtype).reshape(shape), i), part_for(j))
            del dst
            board[5 + i] = stamp
        others = [j for j in range(G) if j != i]
        self._await(lambda: all(mine[5 + j] == stamp for j in others), [d for d in devices if d != self.rank],
                    what, devices)
        self.t.buffers.written(out)
        return out

    def _pushed_reduce_scatter(self, name, x, axes, attrs, op, blocks):
        """The reduce-scatter of x's blocks (blocks(j): member j's block of an array),
        through the boards: member i's buffer takes every other member's block i; i
        reduces them with its own in group order (the bits of every path)."""
        _, devices, i = self._group(axes)
        G = len(devices)
        staged = self._push(name, x, axes, attrs, lambda j: (G,) + blocks(x, j).shape,
                            lambda j: blocks(x, j), lambda r, j: r[j, ...], own=False)
        try:
            return _reduce(op, [blocks(x, i) if j == i else staged[j, ...] for j in range(G)])
        finally:
            del staged

    def _await(self, ready, peers, what, devices):
        """Wait until ready() (a peer's write to a board), giving the core to the other
        ranks meanwhile (they may share it), and sleeping in growing steps after
        SPIN_SECONDS; CollectiveError, not a hang, when the run is aborted, one of the
        peers is lost or called another collective (its message for this call came), or
        the timeout passes."""
        start = time.monotonic()
        key = (self.seq, 0)
        while not ready():
            for d in peers:
                got = self.mailbox.box.get((self.run_id, key, d))
                if got is not None:
                    raise CollectiveError(f"{what}: the group does not agree on the call: rank {self.rank} "
                                          f"called a collective written into the results, rank {d} called "
                                          f"{describe(got[0])}")
            self.mailbox.check(self.run_id, peers, start + self.timeout, self.timeout, what, devices)
            waited = time.monotonic() - start
            if waited < SPIN_SECONDS:
                os.sched_yield()
            else:
                time.sleep(min(1e-3, waited / 100))

    # -- all_reduce ---------------------------------------------------------------------------
    def _all_reduce(self, x, axes, op, out):
        r = self._all_reduce_planned(x, axes, op)
        if out is None:
            return r
        np.copyto(out, r)
        return out

    def _plan(self, x, axes, op):
        """'direct', 'blockwise' or 'hierarchical' for an all_reduce of x over axes (op
        None: for an all_gather, which any dtype may do host by host)."""
        G = self.mesh.axes_size(axes_of(axes))
        if G < 2 or x.nbytes < BLOCKWISE_BYTES or x.size < G:
            return "direct"
        _, devices, _ = self._group(axes)
        hosts = self._hosts(devices)
        # host by host changes only the order of float sums and products (as MPI's does);
        # max/min of floats keep group order (NaN and signed zeros), and 2-byte floats are
        # summed in float32 and rounded once (communicator.reduce_arrays), not once per host
        regroup = op is None or x.dtype.kind in "biu" or (op in ("sum", "prod") and x.dtype.itemsize > 2)
        if len(hosts) > 1 and regroup and len({len(h) for h in hosts}) == 1 and len(hosts[0]) > 1 \
                and x.size >= G:
            return "hierarchical"
        return "blockwise"

    def _hosts(self, devices):
        """The group's members by host: [[devices of the first host, in group order], ...]."""
        by = {}
        for d in devices:
            by.setdefault(self.t.hosts.get(d, d), []).append(d)
        return list(by.values())

    def _all_reduce_planned(self, x, axes, op):
        plan = self._plan(x, axes, op)
        if plan == "direct" and self._pushes(x, axes):
            return self._pushed_reduce_scatter("all_reduce", x, axes, (op,), op, lambda a, j: a)
        if plan == "direct":
            return self._exchange("all_reduce", x, axes, (op,), lambda j: x, lambda xs: _reduce(op, xs))
        if plan == "blockwise" and self._pushes(x, axes):
            return self._pushed_all_reduce(x, axes, op)
        axes, devices, i, tag, what = self._begin("all_reduce", x, axes, (op,))
        flat = x.reshape(-1)
        out = POOL.empty(x.shape, x.dtype)
        if plan == "blockwise":
            self._scatter_flat((self.seq, 0), tag, what, devices, flat)
            self._blockwise_rest((self.seq, 0), tag, what, devices, flat, op, out.reshape(-1))
        else:
            self._hierarchical(tag, what, devices, flat, op, out.reshape(-1))
        return out

    def _pushed_all_reduce(self, x, axes, op):
        """Block-wise through the boards: the reduce-scatter of the flat x (member j
        reduces block j in group order), then every member writes its reduced block into
        every member's result."""
        _, devices, _ = self._group(axes)
        flat = x.reshape(-1)
        b = _bounds(flat.size, len(devices))
        block = self._pushed_reduce_scatter("all_reduce", flat, axes, (op,), op, lambda a, j: a[b[j]:b[j + 1]])
        out = self._push("all_reduce gather", flat, axes, (op,), lambda j: (flat.size,), lambda j: block,
                         lambda r, j: r[b[j]:b[j + 1]])
        return out.reshape(x.shape)

    def _scatter_flat(self, key, tag, what, devices, flat, later=False):
        """Send block j of the flat array to member j (the first half of a reduce-scatter)."""
        b = _bounds(flat.size, len(devices))
        others = [d for d in devices if d != self.rank]
        self._post(key, tag, what, others,
                   lambda d: None if d is None else flat[b[devices.index(d)]:b[devices.index(d) + 1]], later=later)

    def _reduce_block(self, key, tag, what, devices, flat, op):
        """The second half of the reduce-scatter: this member's block of every member's
        flat array, reduced in group order."""
        G, i = len(devices), devices.index(self.rank)
        b = _bounds(flat.size, G)
        got, regions = self._collect(key, tag, [d for d in devices if d != self.rank], what, devices)
        try:
            return _reduce(op, [flat[b[i]:b[i + 1]] if d == self.rank else got[d] for d in devices])
        finally:
            del got
            self._release(regions)

    def _gather_flat(self, key, tag, what, devices, block, out):
        """Every member's block, concatenated in group order into the flat `out`."""
        G = len(devices)
        b = _bounds(out.size, G)
        others = [d for d in devices if d != self.rank]
        self._post(key, tag, what, others, lambda d: block)
        got, regions = self._collect(key, tag, others, what, devices)
        try:
            for j, d in enumerate(devices):
                out[b[j]:b[j + 1]] = block if d == self.rank else got[d]
        finally:
            del got
            self._release(regions)
        return out

    def _blockwise_rest(self, key, tag, what, devices, flat, op, out):
        """The reduce-scatter's blocks were sent under step `key`: reduce this member's,
        then all-gather the reduced blocks under the next step."""
        block = self._reduce_block(key, tag, what, devices, flat, op)
        return self._gather_flat((key[0], key[1] + 1), tag, what, devices, block, out)

    def _hierarchical(self, tag, what, devices, flat, op, out):
        """Reduce-scatter within the host, the block-wise all_reduce of this rank's part
        across the hosts, all-gather within the host."""
        hosts = self._hosts(devices)
        local = next(h for h in hosts if self.rank in h)
        k = local.index(self.rank)
        across = [h[k] for h in hosts]
        self._scatter_flat((self.seq, 0), tag, what, local, flat)
        part = self._reduce_block((self.seq, 0), tag, what, local, flat, op)
        whole = POOL.empty(part.shape, part.dtype)
        self._scatter_flat((self.seq, 1), tag, what, across, part)
        self._blockwise_rest((self.seq, 1), tag, what, across, part, op, whole)    # steps 1 and 2
        del part
        return self._gather_flat((self.seq, 3), tag, what, local, whole, out)

    def _all_reduce_start(self, x, axes, op):
        plan = self._plan(x, axes, op)
        if plan == "hierarchical":
            return self.put_handle((None, self._all_reduce_planned(x, axes, op)))
        axes, devices, i, tag, what = self._begin("all_reduce", x, axes, (op,))
        key = (self.seq, 0)
        others = [d for d in devices if d != self.rank]
        if plan == "blockwise":
            # the wait returns only after every peer has reduced this rank's block (its
            # reduced block comes back), so x stays untouched while the sends are in flight
            self._scatter_flat(key, tag, what, devices, x.reshape(-1), later=True)
        else:
            self._post(key, tag, what, others, lambda d: x)     # small: sent now
        return self.put_handle(((plan, key, tag, what, devices, op), x))

    def wait(self, handle):
        call, x = self.take_handle(handle)
        if call is None:
            return x
        plan, key, tag, what, devices, op = call
        if plan == "blockwise":
            out = POOL.empty(x.shape, x.dtype)
            self._blockwise_rest(key, tag, what, devices, x.reshape(-1), op, out.reshape(-1))
            return out
        others = [d for d in devices if d != self.rank]
        got, regions = self._collect(key, tag, others, what, devices)
        try:
            return _reduce(op, [x if d == self.rank else got[d] for d in devices])
        finally:
            del got
            self._release(regions)

    # -- the other collectives ---------------------------------------------------------------
    def _all_gather(self, x, axes, dim, out):
        if self._pushes(x, axes):
            G = self.mesh.axes_size(axes)
            shape = tuple(s * G if k == dim else s for k, s in enumerate(x.shape))
            return into(out, self._push("all_gather", x, axes, (dim,), lambda j: shape,
                                        lambda j: x, lambda r, i: block_of(r, dim, i, G)))
        if self._plan(x, axes, None) != "hierarchical":
            return into(out, self._exchange("all_gather", x, axes, (dim,), lambda j: x, lambda xs: _concat(xs, dim)))
        return into(out, self._all_gather_hierarchical(x, axes, dim))

    def _all_gather_hierarchical(self, x, axes, dim):
        """Across hosts each array crosses once: a rank exchanges x with the ranks of its
        place on the other hosts, then hands what it got to the peers of its host, by
        shared memory (flat, every array would cross to every rank of another host)."""
        axes, devices, i, tag, what = self._begin("all_gather", x, axes, (dim,))
        hosts = self._hosts(devices)
        local = next(h for h in hosts if self.rank in h)
        k = local.index(self.rank)
        across = [h[k] for h in hosts]
        far = [d for d in across if d != self.rank]
        near = [d for d in local if d != self.rank]
        self._post((self.seq, 0), tag, what, far, lambda d: x)
        got, regions = self._collect((self.seq, 0), tag, far, what, devices)
        for j, d in enumerate(across):
            a = x if d == self.rank else got[d]
            self._post((self.seq, 1 + j), tag, what, near, lambda _, a=a: a)
        parts, held = {}, [regions]
        for j, h in enumerate(hosts):
            g, r = self._collect((self.seq, 1 + j), tag, near, what, devices)
            for p in near:
                parts[h[local.index(p)]] = g[p]       # p forwarded the array of its place on host j
            held.append(r)
        try:
            return _concat([x if d == self.rank else got[d] if d in got else parts[d] for d in devices], dim)
        finally:
            del got, parts
            for r in held:
                self._release(r)

    def _reduce_scatter(self, x, axes, dim, op, out):
        G = self.mesh.axes_size(axes)
        if self._pushes(x, axes):
            return into(out, self._pushed_reduce_scatter("reduce_scatter", x, axes, (dim, op), op,
                                                         lambda a, j: block_of(a, dim, j, G)))
        return into(out, self._exchange("reduce_scatter", x, axes, (dim, op),
                                        lambda j: None if j is None else block_of(x, dim, j, G),
                                        lambda xs: _reduce(op, xs)))

    def _all_to_all(self, x, axes, split_dim, concat_dim, out):
        G = self.mesh.axes_size(axes)
        if self._pushes(x, axes):
            shape = tuple(s // G if k == split_dim else s for k, s in enumerate(x.shape))
            shape = tuple(s * G if k == concat_dim else s for k, s in enumerate(shape))
            return into(out, self._push("all_to_all", x, axes, (split_dim, concat_dim), lambda j: shape,
                                        lambda j: block_of(x, split_dim, j, G),
                                        lambda r, i: block_of(r, concat_dim, i, G)))
        return into(out, self._exchange("all_to_all", x, axes, (split_dim, concat_dim),
                                        lambda j: None if j is None else block_of(x, split_dim, j, G),
                                        lambda xs: _concat(xs, concat_dim)))

    def _permute(self, x, axes, pairs):
        axes, devices, i, tag, what = self._begin("permute", x, axes, (pairs,))
        key = (self.seq, 0)
        self._post(key, tag, what, [devices[d] for s, d in pairs if s == i and d != i], lambda d: x)
        src = {d: s for s, d in pairs}.get(i)
        if src is None:
            return np.zeros_like(x)
        if src == i:
            return _copy(x)
        return self._receive_copy(key, tag, devices[src], what, devices)

    def _broadcast(self, x, axes, root):
        axes, devices, i, tag, what = self._begin("broadcast", x, axes, (root,))
        key = (self.seq, 0)
        if i == root:
            self._post(key, tag, what, [d for d in devices if d != self.rank], lambda d: x)
            return _copy(x)
        return self._receive_copy(key, tag, devices[root], what, devices)

    def _receive_copy(self, key, tag, src, what, devices):
        got, regions = self._collect(key, tag, [src], what, devices)
        try:
            return _copy(got[src])
        finally:
            del got
            self._release(regions)

    def _barrier(self, axes):
        axes = self.mesh.axis_names if axes is None else axes
        self._exchange("barrier", np.zeros(0), axes, (), lambda j: np.zeros(0), lambda xs: None)


def _reduce(op, xs):
    """op over xs in list (group) order into a recycled buffer (communicator.reduce_arrays)."""
    return reduce_arrays(op, xs, out=POOL.empty(xs[0].shape, xs[0].dtype))


def _concat(xs, dim):
    shape = list(xs[0].shape)
    shape[dim] = sum(a.shape[dim] for a in xs)
    return np.concatenate(xs, axis=dim, out=POOL.empty(tuple(shape), xs[0].dtype))


def _copy(x):
    out = POOL.empty(x.shape, x.dtype)
    np.copyto(out, x)
    return out
