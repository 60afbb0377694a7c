"""RayRuntime: this process is the driver; each rank (device) is a Ray actor, but rank 0
when this process started its own private Ray (one host): rank 0 then runs in the driver.

Rank 0 in the driver (transports/ray/ray_driver_rank.py; SPMD_RAY_DRIVER_RANK=1 or 0
chooses it on any cluster): as MPI's rank 0 is the launching process, its shards live
here and its program runs on the driver's thread, after the messages to the other ranks
are sent, with a Transport like an actor's (Unix sockets and shared memory to the actors
of this host). It saves a process, a message each way and the driver's core, which the
woken rank-0 actor took on a 2-core machine. Its "line" (LocalChannel) answers each
message at once; what follows of actors holds for it, except that a run returns only
once rank 0 has ended it (the actors' part is not waited for), so a failure of any rank
seen by then (rank 0 is aborted with it) raises from that call, and rank 0's small
results (a loss) are read then without waiting for the actors, as MPI's rank 0 reads its
own: the next call that needs the actors waits for their part and raises its failure.
On a cluster this process joined, where its host may have no rank, every rank is an actor.

The driver traces and compiles a program once (jit does, as on the local backend).
Every call to an actor after the set-up goes on the driver's own TCP line to it
(transports/ray/ray_control.py), not through Ray: in order, one at a time, each answered
on the same line. Arguments and results stay in the actors' memory
(transports/ray/ray_shards.py): a handle is a `Shard`, the driver's name for one
device's shard in its actor. A run is one message per rank, carrying the program's
pickle the first time that actor runs it, its inputs (the numbers of shards it holds;
the bytes of a jitted call's numpy argument, which no handle is made for), the numbers
its outputs are to be kept under (chosen by the driver), and small puts; the reply carries
the results of up to SMALL_RESULT_BYTES (a loss: reading it needs nothing more) and what
the program printed. Reading a bigger result is one `fetch` per actor.

Actors are placed by a placement group, one bundle per rank (transports/ray/ray_placement.py).
Each answers the driver's line on a thread of its own, and Ray's calls on a few message
threads (`abort`, `where`, which answer while a program runs). The collectives do not
go through Ray either: each actor has a Transport (transports/ray/ray_communicator.py:
TCP links to every other actor, shared memory with those of its host), set up once when
the actors start (`open_links` on every actor, then `connect_links` with every address)
and again whenever an actor is replaced; its threads fill the actor's Mailbox.

A run of a compiled program that does not print is not waited for: `run` returns its
handles once it is sent, and the driver goes on (as JAX's dispatch does) while the ranks
run; the next call to the runtime (a read, call_on) first waits for it. The next run is
sent to the actors first, and then the one before is waited for (an actor starts it once
it ended the one before there; rank 0 in the driver, once every rank ended it): the
driver's reading of the replies is off the actors' path, and the ranks are never more
than one run apart (what a rank put in shared memory in a run is kept through the next:
transports/ray/ray_shm.py). A program that prints (spmd.debug.print) is waited for at
once: its lines come before what the script prints next.

Failure: the driver waits for every rank's reply. The first rank to fail (its program
raised, or its actor died: its line closed) makes the driver abort the others' run,
which wakes them out of any collective; the wait then raises that rank's exception with
its rank and its remote traceback (a died actor: CollectiveError naming the rank), after
printing what every rank printed: at the next read or call when the run was not waited
for (a next run, already sent to the actors, is then aborted there and never run on
rank 0). A rank still busy 2 s after the abort is killed. Dead
actors are replaced, in their bundle, at the next call; the shards a dead actor held
are lost with it (a handle to one fails naming its rank; a checkpoint restores them).
process_index() is 0 and process_count() 1: only the driver runs the user's script.
"""
from __future__ import annotations

import atexit
import itertools
import select
import sys
import threading
import time
import weakref
from collections import OrderedDict

import numpy as np
import ray
from ray import cloudpickle

from ..communicator import collective_timeout
from . import ray_driver_rank, ray_private, ray_shm
from .ray_control import Channel, pack
from .ray_driver_rank import DriverRank, LocalChannel
from .ray_rank import Rank
from .ray_shards import Drops, Held, Shard, read_small_value, wire
from .ray_transport import host_id
from ...errors import CollectiveError, ShardingError, SpmdError
from ...ir.graph import any_op
from ...tools import timeline
from ...runtime.backend import Runtime

# after the first failure, how long the driver waits for the other ranks to stop
GRACE_SECONDS = 2.0
# message threads per actor: `abort` and the driver's questions, while a program runs
MAIL_THREADS = 4
# the driver first waits this long for every rank at once, then for each as it ends (a
# failed rank wakes its peers itself, so the others' errors come soon after)
FIRST_WAIT_SECONDS = 0.2
# a put of up to this size goes inside the next call to its actor (Drops.later), not
# through the object store and a call of its own
INLINE_BYTES = 256 << 10
# the (mesh, stopwatch)s the ranks keep a communicator for, at most (then they drop them all)
COMMUNICATORS = 64
# a run's results of up to this size come back with its reply (a loss, a norm), so
# reading them costs nothing more; they stay in the actor too, for the next run
SMALL_RESULT_BYTES = 8 << 10


@ray.remote(concurrency_groups={"mail": MAIL_THREADS})
class RankActor(Rank):
    """One rank in an actor of its own (ray_rank.Rank). The driver's messages
    (transports/ray/ray_control.py) run on the control thread, one at a time, in the
    order sent. Ray's calls are for the set-up (default group) and for what must answer
    while a program runs ("mail": `abort`, `where`, `take_trace`)."""

    def __repr__(self):                      # Ray prefixes the actor's output with this
        return f"rank {self.rank}"

    @ray.method(concurrency_group="mail")
    def where(self):
        import os
        ctx = ray.get_runtime_context()
        return {"rank": self.rank, "node": ctx.get_node_id(), "pid": os.getpid()}

    @ray.method(concurrency_group="mail")
    def abort(self, run_id, reason):
        self.mailbox.abort(run_id, reason)

    @ray.method(concurrency_group="mail")
    def take_trace(self):
        """The timeline spans this rank recorded so far (SPMD_TRACE), for the driver."""
        from ...tools import timeline
        return timeline.take_events()


def _silent(program) -> bool:
    """A compiled program (it has a graph) with no op run for its effect (spmd.debug.print
    prints: the only such op), loop bodies too."""
    graph = getattr(program, "graph", None)
    return graph is not None and not any_op(graph, lambda op: op.opdef.effect)


class _holding:
    """`with _holding(chans)`: the lines of chans ({device: channel}) held, taken in rank
    order: no two callers wait on each other. (A class, not a generator: taken three
    times a step.)"""
    __slots__ = ("locks",)

    def __init__(self, chans):
        self.locks = [chans[d].lock for d in sorted(chans)]

    def __enter__(self):
        for lock in self.locks:
            lock.acquire()

    def __exit__(self, *exc):
        for lock in self.locks:
            lock.release()


class RankFailed(Exception):
    """A rank's reply that its call raised: `cause` (None if it did not pickle), its
    text, and its traceback's text."""

    def __init__(self, cause, text, tb):
        super().__init__(text)
        self.cause, self.text, self.tb = cause, text, tb


class RankLost(Exception):
    """A rank's actor died: its control line closed (or it was killed, busy, after an abort)."""


class RayRuntime(Runtime):
    name = "ray"

    def __init__(self, num_devices=None):
        from .ray_placement import connect, default_num_devices, place_ranks
        self._owns_ray = connect(num_devices)
        self._n = int(num_devices) if num_devices else default_num_devices()
        # rank 0 in this process (ray_driver_rank.py), the others in actors; or every rank
        # in an actor (a cluster this process joined)
        self._here = DriverRank(0) if ray_driver_rank.wanted(self._owns_ray) else None
        self._first = 0 if self._here is None else 1
        self._dead = set()
        self._revive_lock = threading.Lock()
        # the run sent and not yet waited for, and the order of runs and requests: each
        # waits for it first (its replies are the next ones on the ranks' lines)
        self._inflight = None
        self._order = threading.RLock()
        self._channels = {}
        self._sent = {}                                  # device -> program keys its actor has
        try:
            self._pg, actors = place_ranks(RankActor, self._n, first=self._first)
            self._actors = [None] * self._first + actors      # device -> its actor (None: the driver)
            self._setup()
        finally:
            # a private Ray's agents, held back while the actors start
            # (transports/ray/ray_private.py), start now, also when the actors failed to
            ray_private.ranks_up()
        self._run_ids = itertools.count(1)
        # how many times the ranks dropped their communicators (an aborted run: _abort; a
        # sweep of many meshes), and the (mesh, stopwatch)s run since: the ranks' communicators
        self._generation = 0
        self._communicators = set()
        self._keys = itertools.count(1)
        self._programs = weakref.WeakKeyDictionary()    # executable -> {mesh: (key, its pickle, silent)}
        self._drops = Drops()
        self._copies = weakref.WeakKeyDictionary()     # Shard -> {device: its copy there}
        self._closed = False
        atexit.register(self.shutdown)
        self._merge_timeline_at_exit()

    def _setup(self):
        try:
            remote = [d for d, a in enumerate(self._actors) if a is not None]
            infos = dict(zip(remote, ray.get([self._actors[d].open_links.remote() for d in remote], timeout=120)))
            if self._here is not None:
                infos[0] = self._here.open_links()
            infos = dict(sorted(infos.items()))
            # each rank's host name: a rank lost with its host is named with it
            self._hosts = {d: i["host"][0] for d, i in infos.items()}
            links = [self._actors[d].connect_links.remote(infos) for d in remote]
            if self._here is not None:
                self._here.connect_links(infos)       # rank 0 connects to the others: no wait
            ray.get(links, timeout=120)
            here = host_id()
            for d, info in infos.items():
                if d not in self._channels:      # a new actor (the others keep their line)
                    if self._actors[d] is None:
                        self._channels[d] = LocalChannel(self._here)
                    else:
                        # an actor of this host: a Unix socket (its messages cost less)
                        self._channels[d] = Channel(info["control"], near=tuple(info["host"]) == here)
                    self._sent[d] = OrderedDict()
        except Exception as e:
            self.shutdown()
            raise SpmdError(f"spmd.init(backend='ray'): the rank actors did not start: {e}") from e

    # -- the contract --------------------------------------------------------------------
    @property
    def num_devices(self):
        return self._n

    def local_devices(self, mesh=None):
        """The driver holds the handles of every device."""
        if mesh is None:
            return list(range(self._n))
        self._check(mesh)
        return list(range(mesh.size))          # (a mesh holds each of the ranks 0..size-1 once)

    def _check(self, mesh):
        if mesh.size > self._n:
            raise ShardingError(f"the mesh {mesh.text()} has {mesh.size} devices but the ray runtime has "
                                f"{self._n} ranks; use spmd.init(backend='ray', num_devices={mesh.size})")

    def put(self, device, array):
        if self._actors[device] is None:
            # rank 0 in the driver keeps the caller's buffer, which is its own (the
            # runtime contract): nothing to send, and no copy
            shard = self._drops.new(device)
            self._here.shards.keep(shard.sid, array)
            return shard
        self._revive()
        if np.asarray(array).nbytes <= INLINE_BYTES:
            # (read when the call goes: the caller gives the runtime a buffer of its own,
            # as the local runtime keeps it)
            return self._drops.later(device, array)
        shard = self._drops.new(device)
        # no reply: messages to one actor run in order, so the next one that reads the
        # shard finds it; the send is done when this returns (the caller may change array)
        self._tell(device, ("store", (shard.sid, np.ascontiguousarray(array), self._drops.take(device))))
        return shard

    def native_scope(self, mesh):
        """"host" where the mesh's ranks share one host (their communicators'
        RayNativeExchange, when they map each other's memory)."""
        if mesh is None or mesh.size < 2 or not ray_shm.supported():
            return None
        return "host" if len({self._hosts[d] for d in mesh.devices.reshape(-1).tolist()}) == 1 else None

    def put_sends(self, device):
        return self._actors[device] is not None

    def get(self, handles):
        if all(h.value is not None for h in handles.values()):
            # small results come with their run's reply; rank 0's in the driver are there
            # when its part ends: read without waiting for the actors (as MPI's rank 0
            # reads its own loss), whose failure the next call raises
            return {d: np.asarray(h.value) for d, h in handles.items()}
        self._finish()
        self._revive()
        got, need = {}, {}
        for d, h in handles.items():
            if h.value is not None:              # a small result, come with its run's reply
                got[d] = h.value
            else:
                need.setdefault(h.device, []).append((d, h))
        if need:
            replies = self._requests({a: ("fetch", ([h.sid for _, h in hs], self._drops.take(a)))
                                      for a, hs in need.items()})
            for a, hs in need.items():
                for (d, _), v in zip(hs, replies[a]):
                    got[d] = v
        return {d: np.asarray(got[d]) for d in handles}

    def all_shards(self, handles, mesh):
        return self.get(handles)

    # the driver's I/O threads only wait for the actors: as many as there are ranks
    remote_io = True

    def call_on(self, device, fn, *args, keep=False):
        self._finish()
        self._revive()
        args = [self._held(device, a) for a in args]
        shard = self._drops.new(device) if keep else None
        sid = None if shard is None else shard.sid
        out = self._requests({device: ("call", (fn, args, sid, self._drops.take(device)))})[device]
        return shard if keep else out

    def _held(self, device, a):
        """A top-level argument of call_on as the actor of `device` reads it."""
        if not isinstance(a, Shard):
            return a
        if a.device == device:
            return Held(a.sid)
        return self.get({a.device: a})[a.device]

    def _tell(self, device, message):
        """Send a message that has no reply."""
        ch = self._channels[device]
        with ch.lock:
            try:
                ch.send(message)
            except OSError as e:
                self._lose(device)
                raise CollectiveError(f"rank {device} died: its Ray actor was lost ({e})") from None

    def _requests(self, messages):
        """{device: message} -> {device: reply value}: every message sent, then every
        reply read; a failed one raised as spmd's error, naming its rank."""
        devices = sorted(messages)
        with self._order:
            # no run's replies before this request's on its lines: the run in flight is
            # waited for first, and no run is sent while this holds the lines
            self._finish()
            chans = [self._channels[d] for d in devices]
            for ch in chans:                     # in rank order: no two callers wait on each other
                ch.lock.acquire()
        try:
            sent, errors, values = [], [], {}
            for d, ch in zip(devices, chans):
                try:
                    ch.send(messages[d], by_value=messages[d][0] == "call")
                    sent.append((d, ch))
                except OSError as e:
                    errors.append((d, RankLost(str(e))))
            for d, ch in sent:
                try:
                    reply = ch.receive()
                except (OSError, EOFError) as e:
                    errors.append((d, RankLost(str(e))))
                    continue
                if reply[0] == "ok":
                    values[d] = reply[1]
                else:
                    errors.append((d, RankFailed(*reply[1:4])))
        finally:
            for ch in chans:
                ch.lock.release()
        for d, e in errors:
            if isinstance(e, RankLost):
                self._lose(d)
        if errors:
            raise _first_error(errors, getattr(self, "_hosts", {}))
        return values

    def _lose(self, device):
        """device's actor is dead (or killed): it is replaced at the next call."""
        self._dead.add(device)
        ch = self._channels.get(device)
        if ch is not None:
            ch.close()

    def where(self):
        """[{rank, node, pid}] of every rank (which node each rank runs on; the driver's
        pid for a rank that runs here)."""
        refs = [None if a is None else a.where.remote() for a in self._actors]
        return [self._here.where() if r is None else ray.get(r) for r in refs]

    def held(self):
        """{rank: [shard numbers its actor holds]} (after the drops sent so far)."""
        return self._requests({d: ("held", ()) for d in range(self._n)})

    # -- running -------------------------------------------------------------------------
    def run(self, program, mesh, args):
        devices = self.local_devices(mesh)          # (checks the mesh)
        missing = [d for d in devices if d not in args]
        if missing:
            raise SpmdError(f"ray runtime: no inputs for device(s) {missing} of {mesh.text()}")
        with self._order:
            self._revive()
            key, blob, silent = self._program(program, mesh)
            n_out = program.num_outputs      # each rank's results are asked for before it runs
            run_id = next(self._run_ids)
            timeout = collective_timeout()
            trace = timeline.enabled()
            if (mesh, timeout) not in self._communicators:
                # many meshes (a sweep): every rank drops its communicators, at the same
                # run of each mesh (Rank.run's generation), rather than grow
                if len(self._communicators) >= COMMUNICATORS:
                    self._generation += 1
                    self._communicators.clear()
                self._communicators.add((mesh, timeout))
            # a shard of another device, read here and put: before any rank starts (that read
            # waits for its actor, which would wait in this run's first collective)
            ins_of = {d: [self._input(d, h) for h in args[d]] for d in devices}
            outs = {}
            chans = {d: self._channels[d] for d in devices}
            pending, errors, printed = {}, [], {}

            def message(d):
                outs[d] = [self._drops.new(d) for _ in range(n_out)]
                return ("run", (run_id, key, *self._ship(d, key, blob), timeout, trace, self._generation,
                                ins_of[d], [h.sid for h in outs[d]], self._drops.take(d), SMALL_RESULT_BYTES))

            # every actor's message made before any is sent: the ranks start close together
            # (the first waits in its first collective for the last); rank 0's in the
            # driver after they are sent, off the actors' path
            packed = {d: pack(message(d)) for d in devices if self._actors[d] is not None}
            with _holding(chans):
                for d in packed:
                    try:
                        chans[d].send_packed(packed[d])
                        pending[d] = chans[d]
                    except OSError as e:
                        errors.append((d, RankLost(str(e))))
            # the actors have this run before the driver reads their replies to the one
            # before (each starts it once it ended that one there): the driver's reading
            # and rank 0's start are off the actors' path. The run before raises its
            # failure here, from this call, and this one is stopped on the actors. Ranks
            # are then at most one run apart (their shared memory: ray_shm.Slab.new_run)
            try:
                self._finish()
            except BaseException:
                self._abort(pending, run_id, "the run before it failed")
                for ch in pending.values():
                    ch.stale += 1               # its reply, when it comes, is nobody's
                raise
            with _holding(chans):
                # rank 0 of the driver last: its run is this thread's until it ends
                for d in devices:
                    if d not in packed:
                        try:
                            reply = chans[d].run(message(d))
                        except KeyboardInterrupt:
                            # Ctrl-C in rank 0's part: the others stop too, and their
                            # replies, when they come, are nobody's
                            self._abort(pending, run_id, "the driver was interrupted")
                            for ch in pending.values():
                                ch.stale += 1
                            raise
                        # its small results are there now, read without waiting for the
                        # actors (`get`)
                        if reply[0] == "ok":
                            _keep_values(outs[d], reply[1])
                            printed[d] = reply[2]
                        else:
                            errors.append((d, RankFailed(*reply[1:4])))
                            printed[d] = reply[4]
            # not waited for here: the driver goes on (tracing, placing the next step's
            # arguments) while the ranks run; reading a result, or the next call, waits.
            # Waited for at once: a program that prints (its lines come before what the
            # script prints next), and one that is not a compiled program (a runtime test's)
            self._inflight = (run_id, chans, outs, pending, errors, printed)
            # rank 0 failed here: raised now, from the user's call, the others stopped
            if errors or not silent:
                self._finish()
        return outs

    def wait(self):
        """Wait until the run sent last has ended on every rank; raise its failure."""
        self._finish()

    def _finish(self):
        """Wait for the run in flight (if any): its small results into its output handles,
        what its ranks printed to stdout, its failure raised (once)."""
        with self._order:
            inflight, self._inflight = self._inflight, None
            if inflight is None:
                return
            run_id, chans, outs, pending, errors, printed = inflight
            values = {}
            with _holding(chans):
                self._wait(pending, run_id, printed, values, errors)
        if any(printed.values()):           # the program's prints, here, in rank order
            for d in sorted(printed):
                sys.stdout.write("".join(printed[d]))
            sys.stdout.flush()
        if errors:
            raise _first_error(errors, getattr(self, "_hosts", {}))
        for d, got in values.items():
            _keep_values(outs[d], got)

    def _input(self, device, h):
        """An argument of a run on `device` as its message carries it (Rank.run's ins): a
        shard's number (a shard of another device copied here first); an array given for
        the run (Runtime.run) as its bytes (ray_shards.wire), to rank 0 in the driver as
        it is."""
        if isinstance(h, Shard):
            return (h if h.device == device else self._copy(device, h)).sid
        return np.asarray(h) if self._actors[device] is None else wire(h)

    def _ship(self, device, key, blob):
        """(the program's pickle if device's actor has not got it, else None; the keys it
        may forget): at most 32 programs kept per actor, the least recently run dropped."""
        sent = self._sent[device]
        if key in sent:
            sent.move_to_end(key)
            return None, []
        sent[key] = True
        forget = []
        while len(sent) > 32:
            forget.append(sent.popitem(last=False)[0])
        return blob, forget

    def _copy(self, device, h):
        """A shard of another device (a replica loaded once from a checkpoint, kept by one
        actor), put on device once: the copy lives as long as the handle it copies, and
        later runs read it."""
        copies = self._copies.get(h)
        if copies is None:
            copies = self._copies[h] = {}
        if device not in copies:
            copies[device] = self.put(device, self.get({h.device: h})[h.device])
        return copies[device]

    def _program(self, program, mesh):
        """(the key of program on mesh, the pickle of both, whether a run of it may go
        unwaited for: _silent)."""
        on = self._programs.get(program)
        if on is None:
            on = self._programs[program] = {}
        hit = on.get(mesh)
        if hit is None:
            hit = on[mesh] = (next(self._keys), cloudpickle.dumps((program, mesh), protocol=5), _silent(program))
        return hit

    def _wait(self, pending, run_id, printed, values, errors):
        """Read every rank's reply to run `run_id` ({device: channel}): its small results
        into values[device], what it printed into printed[device], a failure into errors
        [(device, exception)]. After the first failure the others are aborted and given
        GRACE_SECONDS; one still busy then is killed (and replaced at the next call)."""
        first = time.monotonic() if errors else None
        if errors:
            self._abort(pending, run_id, _reason(*errors[0]))
        by_fd = {ch.fileno(): d for d, ch in pending.items()}
        poller = None               # made when a reply has not come (a step's mostly has)
        try:
            while pending:
                left = 1.0 if first is None else GRACE_SECONDS - (time.monotonic() - first)
                if left <= 0:
                    break
                # the replies that have come are taken without a poll (mostly all of them:
                # a step's reply comes while the driver runs rank 0's part); a poll waits
                # for the others
                here = [fd for fd, d in by_fd.items() if d in pending and _came(pending[d])]
                if not here:
                    if poller is None:
                        # poll, not select: a driver with many files open has descriptors
                        # past select's 1024
                        poller = select.poll()
                        for fd, d in by_fd.items():
                            if d in pending:
                                poller.register(fd, select.POLLIN)
                    here = [fd for fd, _ in poller.poll(left * 1000)]
                for fd in here:
                    d = by_fd[fd]
                    if d not in pending:
                        continue
                    if poller is not None:
                        poller.unregister(fd)      # (pending when the poller was made: registered)
                    if self._take_reply(d, pending.pop(d), printed, values, errors) and first is None:
                        first = time.monotonic()
                        self._abort(pending, run_id, _reason(*errors[-1]))
        except BaseException:                   # Ctrl-C in the driver: stop the ranks too
            self._abort(pending, run_id, "the driver was interrupted")
            for ch in pending.values():
                ch.stale += 1                   # its reply, when it comes, is nobody's
            raise
        for d in pending:                        # still busy after the abort: replace it
            if self._actors[d] is None:
                continue                        # (the driver's rank answered before the wait)
            ray.kill(self._actors[d])
            self._lose(d)
            errors.append((d, RankLost(f"it did not answer within {GRACE_SECONDS:g} s of the abort, and was "
                                       f"killed")))

    def _take_reply(self, d, ch, printed, values, errors) -> bool:
        """Rank d's reply to a run, read from ch: its small results into values[d], what
        it printed into printed[d], a failure into errors; whether it failed."""
        try:
            reply = ch.receive()
        except (OSError, EOFError) as e:
            errors.append((d, RankLost(str(e))))
            self._lose(d)
            return True
        if reply[0] == "ok":
            values[d] = reply[1]
            printed[d] = reply[2]
            return False
        errors.append((d, RankFailed(*reply[1:4])))
        printed[d] = reply[4]
        return True

    def _abort(self, devices, run_id, reason):
        # the ranks start the next run over (Rank.run's generation): this one may have
        # stopped some of them inside a native all-reduce, others past it
        self._generation += 1
        self._communicators.clear()
        for d in devices:
            if self._actors[d] is None:
                self._here.mailbox.abort(run_id, reason)
            else:
                self._actors[d].abort.remote(run_id, reason)

    def _revive(self):
        """Replace the actors of ranks that died, in their bundles (the checkpoint's I/O
        threads call too: one at a time)."""
        if not self._dead:
            return
        from .ray_placement import restart_rank
        with self._revive_lock:
            if not self._dead:           # another thread replaced them while this one waited
                return
            for d in sorted(self._dead):
                self._actors[d] = restart_rank(RankActor, self._pg, d, first=self._first)
                self._drops.forget(d)
                for copies in list(self._copies.values()):     # copied again when next run
                    copies.pop(d, None)
                ch = self._channels.pop(d, None)
                if ch is not None:
                    ch.close()
            self._setup()
            self._dead = set()           # last: a caller that saw none dead finds every line up

    # -- SPMD_TRACE -----------------------------------------------------------------------
    def _merge_timeline_at_exit(self):
        """One trace file, written by the driver, with every rank's track: the actors'
        spans are collected when the driver exits (or the runtime shuts down first)."""
        def hook():
            self._collect_trace()
            if timeline.has_events():
                timeline.write()
        timeline.set_exit_hook(hook)

    def _collect_trace(self):
        if self._closed or not timeline.enabled() or not ray.is_initialized():
            return
        self._settle()                   # the run in flight has recorded its spans
        got = []
        for ref in [a.take_trace.remote() for a in self._actors if a is not None]:
            try:
                got.append(ray.get(ref, timeout=30))
            except Exception:     # noqa: BLE001 - a dead actor's spans are lost, the others' are kept
                pass
        timeline.add_events(timeline.merge_events(got))

    def _settle(self):
        """Wait for the run in flight; a failure nothing read is told on stderr."""
        try:
            self._finish()
        except Exception as e:     # noqa: BLE001 - the script ended without reading it
            sys.stderr.write(f"spmd: the last run on the ray runtime failed, and nothing read its results: "
                             f"{type(e).__name__}: {e}\n")

    def shutdown(self):
        if getattr(self, "_closed", True):
            return
        self._settle()
        self._collect_trace()
        self._closed = True
        for ch in self._channels.values():
            ch.close()
        if self._here is not None:
            self._here.close()
        try:
            if ray.is_initialized():
                for a in self._actors:
                    if a is not None:
                        ray.kill(a)
                from ray.util.placement_group import remove_placement_group
                if self._pg is not None:
                    remove_placement_group(self._pg)
                if self._owns_ray:
                    ray.shutdown()
                    ray_private.stop()
        except Exception:      # noqa: BLE001 - shutting down a cluster that is already gone
            pass


def _came(ch) -> bool:
    """Has the reply ch waits for come (read without waiting)? A closed line too: its
    receive says so at once."""
    try:
        return ch.pull()
    except (OSError, EOFError):
        return True


def _keep_values(outs, got):
    """A rank's small results ({position: value}, from its reply) into its output handles."""
    for i, v in got.items():
        outs[i].value = read_small_value(v)      # read-only: read as often as asked, nobody may change it


def _reason(device, exc):
    if isinstance(exc, RankLost):
        return f"rank {device} died (its Ray actor was lost)"
    return f"rank {device} failed: {_first_line(exc.text)}"


def _first_line(exc):
    s = str(exc).strip()
    return s.splitlines()[0] if s else ""


def _first_error(errors, hosts=None):
    """The exception that caused the failure, labelled with its rank (and its host, when
    the ranks run on several: `hosts`, rank -> host name); ranks that only failed because
    another one did (CollectiveError) come last, as on the local runtime, after those whose
    actor died (its peers then fail for want of it). errors: [(device, RankFailed or
    RankLost)]."""
    def root(e):
        return isinstance(e, RankFailed) and not isinstance(e.cause, CollectiveError)
    roots = [(d, e) for d, e in errors if root(e)]
    lost = [(d, e) for d, e in errors if isinstance(e, RankLost)]
    d, e = (roots or lost or errors)[0]
    label = f"rank {d}"
    if hosts and len(set(hosts.values())) > 1 and d in hosts:
        label += f" on host {hosts[d]}"
    if isinstance(e, RankLost):
        err = CollectiveError(f"{label} died: its Ray actor was lost ({_first_line(e)})")
        err.add_note(f"spmd: {len(errors)} rank(s) of the ray runtime failed")
        return err
    cause = e.cause
    if not isinstance(cause, BaseException):
        return SpmdError(f"{label} failed on the ray runtime: {e.text}\n{e.tb}")
    if isinstance(cause, SpmdError) and cause.args and isinstance(cause.args[0], str) \
            and label not in cause.args[0]:
        cause.args = (f"{label}: {cause.args[0]}",) + cause.args[1:]
    cause.add_note(f"spmd: raised on {label} of the ray runtime ({len(errors)} rank(s) failed); "
                   f"its traceback:\n{e.tb.rstrip()}")
    return cause
