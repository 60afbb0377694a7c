"""RayRuntime: this process is the driver; each rank (device) is a Ray actor.

The driver traces and compiles a program once (jit does, as on the local backend) and
ships the per-device executable to the actors through the object store: `ray.put` once
per program, each actor fetches it on first use and keeps it (by key) for later runs.
Arguments and results stay in the actors' memory (transports/ray/ray_shards.py): a
handle is a `Shard`, the driver's name for one device's shard in its actor. A run is
one actor call per rank, carrying the numbers of its input shards and those its outputs
are to be kept under (chosen by the driver), and returning only its success; reading
an Array (`all_shards`) is one `fetch` call per actor.

Actors are placed by a placement group, one bundle per rank (transports/ray/ray_placement.py). Each has
a run thread (one program at a time) and a few message threads (`abort`, `where`). The
collectives do not go through Ray: each actor has a Transport (transports/ray/ray_communicator.py: TCP
links to every other actor, shared memory with those of its host), set up once when the
actors start (`open_links` on every actor, then `connect_links` with every address) and
again whenever an actor is replaced; its threads fill the actor's Mailbox.

Failure: the driver waits for every rank's run. The first rank to fail (its program
raised, or its actor died) makes the driver abort the others' run, which wakes them out
of any collective; `run` then raises that rank's exception with its rank and its remote
traceback (a died actor: CollectiveError naming the rank). A rank still busy 2 s after
the abort is killed. Dead actors are replaced, in their bundle, at the next run; the
shards a dead actor held are lost with it (a handle to one fails naming its rank; a
checkpoint restores them).
process_index() is 0 and process_count() 1: only the driver runs the user's script.
"""
from __future__ import annotations

import atexit
import itertools
import pickle
import re
import sys
import threading
import time
import weakref
from collections import OrderedDict

import numpy as np
import ray

from ..communicator import collective_timeout
from .ray_communicator import RayCommunicator
from .ray_mailbox import Mailbox
from .ray_shards import Drops, Held, Shard, ShardTable
from .ray_transport import Transport
from ...errors import CollectiveError, ShardingError, SpmdError
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


@ray.remote(concurrency_groups={"mail": MAIL_THREADS})
class RankActor:
    """One rank. `run` runs on the default group (one at a time); the rest on "mail"."""

    def __init__(self, rank):
        self.rank = rank
        self.mailbox = Mailbox()
        self.transport = None
        self.programs = OrderedDict()       # key -> executable, most recent last
        self.shards = ShardTable(rank)

    def __repr__(self):                      # Ray prefixes the actor's output with this
        return f"rank {self.rank}"

    def open_links(self):
        """A new Transport (the old one closed): its address for the peers."""
        if self.transport is not None:
            self.transport.close()
        self.transport = Transport(self.rank, ray.util.get_node_ip_address(), self.mailbox)
        return self.transport.info()

    def connect_links(self, infos):
        self.transport.connect(infos)
        return self.rank

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

    @ray.method(concurrency_group="mail")
    def held(self):
        """The numbers of the shards this actor holds (what the driver's handles name)."""
        return sorted(self.shards.arrays)

    def store(self, sid, array, news):
        """Keep array as shard sid (a put from the driver)."""
        self.shards.update(news)
        self.shards.keep(sid, array)

    def fetch(self, sids, news):
        self.shards.update(news)
        return [self.shards.read(s) for s in sids]

    def drop(self, news):
        self.shards.update(news)

    def call(self, fn, args, keep_sid, news):
        """fn(*args), Held shards among args read from here; keep_sid: its result stays
        here as that shard (only success goes back)."""
        self.shards.update(news)
        out = fn(*self.shards.resolve(args))
        if keep_sid is None:
            return out
        self.shards.keep(keep_sid, out)
        return True

    def run(self, call, boxed_program):
        """One run: call is the pickled (run id, mesh, program key, timeout, trace, input
        shard numbers, output shard numbers, Drops.take's news); boxed_program [its ObjectRef]."""
        run_id, mesh, key, timeout, trace, in_sids, out_sids, news = pickle.loads(call)
        self.shards.update(news)
        self.mailbox.start(run_id)
        self.transport.new_run()
        _trace_in_actor(trace)
        program = self.programs.get(key)
        if program is None:
            program = self.programs[key] = ray.get(boxed_program[0])
            while len(self.programs) > 32:
                self.programs.popitem(last=False)
        else:
            self.programs.move_to_end(key)
        comm = RayCommunicator(mesh, self.rank, self.transport, run_id, timeout)
        from ...runtime import blas
        blas.start_run(mesh.size)        # every run starts from the same BLAS thread count
        try:
            inputs = [self.shards.read(s) for s in in_sids]
            outs = list(program(inputs, comm))
            del inputs
            if len(outs) != len(out_sids):
                raise SpmdError(f"rank {self.rank}: the program made {len(outs)} outputs, "
                                f"{len(out_sids)} were expected")
        except BaseException as e:
            # wake the peers now rather than when the driver notices
            reason = f"rank {self.rank} failed: {type(e).__name__}: {e}"
            self.transport.abort_peers(run_id, reason, mesh.devices.reshape(-1).tolist())
            raise
        for sid, a in zip(out_sids, outs):
            self.shards.keep(sid, a)
        # says it ran, with what it printed for the driver to print
        return tuple(comm.output) or True


def _trace_in_actor(on):
    """Record timeline spans in this actor when the driver does; the driver writes them
    (take_trace), never the actor."""
    import os

    from ...tools import timeline
    timeline.set_exit_hook(lambda: None)
    if on:
        os.environ["SPMD_TRACE"] = "1"
    else:
        os.environ.pop("SPMD_TRACE", None)


class RayRuntime(Runtime):
    name = "ray"

    def __init__(self, num_devices=None):
        from .ray_placement import connect, default_num_devices, place_ranks
        self._owns_ray = connect(num_devices)
        self._n = int(num_devices) if num_devices else default_num_devices()
        self._pg, self._actors = place_ranks(RankActor, self._n)
        self._dead = set()
        self._revive_lock = threading.Lock()
        self._setup()
        self._run_ids = itertools.count(1)
        self._keys = itertools.count(1)
        self._programs = weakref.WeakKeyDictionary()    # executable -> (key, ObjectRef)
        self._drops = Drops()
        self._recent_puts = {}                           # id(array) -> (weakref, ObjectRef)
        self._closed = False
        atexit.register(self.shutdown)
        self._merge_timeline_at_exit()

    def _setup(self):
        try:
            infos = ray.get([a.open_links.remote() for a in self._actors], timeout=120)
            # each rank's host name: a rank lost with its host is named with it
            self._hosts = {d: i["host"][0] for d, i in enumerate(infos)}
            ray.get([a.connect_links.remote(dict(enumerate(infos))) for a in self._actors], timeout=120)
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
        return sorted(mesh.devices.reshape(-1).tolist())

    def _check(self, mesh):
        if mesh.size > self._n:
            raise ShardingError(f"the mesh {mesh.text()} has {mesh.size} devices but the ray runtime has "
                                f"{self._n} ranks; use spmd.init(backend='ray', num_devices={mesh.size})")

    def put(self, device, array):
        self._revive()
        if np.asarray(array).nbytes <= INLINE_BYTES:
            # a copy: the value is read when the call goes, the caller's array may change by then
            return self._drops.later(device, np.array(array, copy=True))
        # replicas of one shard share a buffer (device_put): serialize it once for all
        hit = self._recent_puts.get(id(array))
        if hit is not None and hit[0]() is array:
            ref = hit[1]
        else:
            ref = ray.put(array)
            self._recent_puts = {k: v for k, v in self._recent_puts.items() if v[0]() is not None}
            try:
                self._recent_puts[id(array)] = (weakref.ref(array), ref)
            except TypeError:
                pass
        shard = self._drops.new(device)
        # not waited for: calls to one actor run in order, so the next one that reads the
        # shard finds it (or fails with this call's error)
        self._actors[device].store.remote(shard.sid, ref, self._drops.take(device))
        return shard

    def get(self, handles):
        self._revive()
        devs = list(handles)
        by = {}
        for d in devs:
            h = handles[d]
            by.setdefault(h.device, []).append(h)
        refs = {a: self._actors[a].fetch.remote([h.sid for h in hs], self._drops.take(a)) for a, hs in by.items()}
        got = {}
        for a, hs in by.items():
            vals = self._ask(a, lambda: ray.get(refs[a]))
            for h, v in zip(hs, vals):
                got[id(h)] = v
        return {d: np.asarray(got[id(handles[d])]) for d in devs}

    def all_shards(self, handles, mesh):
        return self.get(handles)

    # the driver's I/O threads only wait for the actors: as many as there are ranks
    remote_io = True

    def call_on(self, device, fn, *args, keep=False):
        self._revive()
        actor = self._actors[device]
        args = [self._held(device, a) for a in args]
        shard = self._drops.new(device) if keep else None
        sid = None if shard is None else shard.sid
        out = self._ask(device, lambda: ray.get(actor.call.remote(fn, args, sid, self._drops.take(device))))
        return shard if keep else out

    def _held(self, device, a):
        """A top-level argument of call_on as the actor of `device` reads it."""
        if not isinstance(a, Shard):
            return a
        if a.device == device:
            return Held(a.sid)
        return self.get({a.device: a})[a.device]

    def _ask(self, device, call):
        """call() (a ray.get of one call to device's actor), its errors made spmd's."""
        try:
            return call()
        except ray.exceptions.RayTaskError as e:
            cause = getattr(e, "cause", None)
            if isinstance(cause, Exception):
                cause.add_note(f"spmd: raised on rank {device} of the ray runtime")
                raise cause from None
            raise SpmdError(f"rank {device} failed on the ray runtime: {e}") from None
        except ray.exceptions.RayActorError as e:
            self._dead.add(device)
            raise CollectiveError(f"rank {device} died: its Ray actor was lost ({_first_line(e)})") from None

    def where(self):
        """[{rank, node, pid}] of every rank actor (which node each rank runs on)."""
        return ray.get([a.where.remote() for a in self._actors])

    def held(self):
        """{rank: [shard numbers its actor holds]} (after the drops sent so far)."""
        return dict(enumerate(ray.get([a.held.remote() for a in self._actors])))

    # -- running -------------------------------------------------------------------------
    def run(self, program, mesh, args):
        self._check(mesh)
        devices = self.local_devices(mesh)
        missing = [d for d in devices if d not in args]
        if missing:
            raise SpmdError(f"ray runtime: no inputs for device(s) {missing} of {mesh.text()}")
        self._revive()
        key, ref = self._program(program)
        n_out = program.num_outputs      # each rank's results are asked for before it runs
        run_id = next(self._run_ids)
        timeout = collective_timeout()
        outs, done = {}, {}
        trace = timeline.enabled()
        # every input in place before any rank starts: a shard read from another rank's
        # actor (a replica loaded once) waits behind that actor's run, which waits in its
        # first collective for this rank
        ins_of = {d: [h if isinstance(h, Shard) and h.device == d else self.put(d, self._value(h)) for h in args[d]]
                  for d in devices}
        for d in devices:
            ins = ins_of[d]
            outs[d] = [self._drops.new(d) for _ in range(n_out)]
            # one argument: Ray serializes each argument of a call on its own
            call = pickle.dumps((run_id, mesh, key, timeout, trace, [h.sid for h in ins],
                                 [h.sid for h in outs[d]], self._drops.take(d)), protocol=pickle.HIGHEST_PROTOCOL)
            r = self._actors[d].run.remote(call, [ref])
            done[r] = d
        printed = {}
        errors = self._wait(done, run_id, printed)
        for d in sorted(printed):           # the program's prints, here, in rank order
            sys.stdout.write("".join(printed[d]))
        sys.stdout.flush()
        if errors:
            raise _first_error(errors, getattr(self, "_hosts", {}))
        return outs

    def _value(self, h):
        """An argument that is not this device's shard: its value (put on the device)."""
        return self.get({h.device: h})[h.device] if isinstance(h, Shard) else h

    def _program(self, program):
        hit = self._programs.get(program)
        if hit is None:
            hit = self._programs[program] = (next(self._keys), ray.put(program))
        return hit

    def _wait(self, pending, run_id, printed):
        """Wait for every rank's run; [(device, exception)] of those that failed. What a
        rank's program printed goes into printed[device]."""
        errors, first = [], None
        try:
            # the common case, every rank done soon and well: one wait, one get
            ready, _ = ray.wait(list(pending), num_returns=len(pending), timeout=FIRST_WAIT_SECONDS)
            if len(ready) == len(pending):
                try:
                    for r, done in zip(ready, ray.get(ready)):
                        d = pending.pop(r)
                        if isinstance(done, tuple):
                            printed[d] = done
                except Exception:                # noqa: BLE001 - one failed: each is looked at below
                    pass
            while pending:
                left = 1.0 if first is None else GRACE_SECONDS - (time.monotonic() - first)
                if left <= 0:
                    break
                ready, _ = ray.wait(list(pending), num_returns=1, timeout=left)
                for r in ready:
                    d = pending.pop(r)
                    try:
                        done = ray.get(r)
                        if isinstance(done, tuple):
                            printed[d] = done
                    except Exception as e:       # noqa: BLE001 - reported by run()
                        errors.append((d, e))
                        if first is None:
                            first = time.monotonic()
                            self._abort(pending.values(), run_id, _reason(d, e))
        except BaseException:                   # Ctrl-C in the driver: stop the ranks too
            self._abort(pending.values(), run_id, "the driver was interrupted")
            raise
        for d in pending.values():               # still busy after the abort: replace it
            ray.kill(self._actors[d])
            self._dead.add(d)
        for d, e in errors:
            if isinstance(e, ray.exceptions.RayActorError):
                self._dead.add(d)
        return errors

    def _abort(self, devices, run_id, reason):
        for d in devices:
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
                self._actors[d] = restart_rank(RankActor, self._pg, d)
                self._drops.forget(d)
            self._dead = set()
            self._setup()

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
        got = []
        for ref in [a.take_trace.remote() for a in self._actors]:
            try:
                got.append(ray.get(ref, timeout=30))
            except Exception:     # noqa: BLE001 - a dead actor's spans are lost, the others' are kept
                pass
        timeline.add_events(timeline.merge_events(got))

    def shutdown(self):
        if getattr(self, "_closed", True):
            return
        self._collect_trace()
        self._closed = True
        try:
            if ray.is_initialized():
                for a in self._actors:
                    ray.kill(a)
                from ray.util.placement_group import remove_placement_group
                remove_placement_group(self._pg)
                if self._owns_ray:
                    ray.shutdown()
                    from . import ray_private
                    ray_private.stop()
        except Exception:      # noqa: BLE001 - shutting down a cluster that is already gone
            pass


def _reason(device, exc):
    if isinstance(exc, ray.exceptions.RayActorError):
        return f"rank {device} died (its Ray actor was lost)"
    cause = getattr(exc, "cause", None) or exc
    return f"rank {device} failed: {type(cause).__name__}: {_first_line(cause)}"


def _first_line(exc):
    s = str(exc).strip()
    return s.splitlines()[0] if s else ""


def _first_error(errors, hosts=None):
    """The exception that caused the failure, labelled with its rank (and its host, when
    the ranks run on several: `hosts`, rank -> host name); ranks that only failed because
    another one did (CollectiveError) come last, as on the local runtime."""
    def root(e):
        cause = getattr(e, "cause", None)
        return not isinstance(cause if cause is not None else e, CollectiveError)
    roots = [(d, e) for d, e in errors if root(e)]
    d, e = (roots or errors)[0]
    label = f"rank {d}"
    if hosts and len(set(hosts.values())) > 1 and d in hosts:
        label += f" on host {hosts[d]}"
    if isinstance(e, ray.exceptions.RayActorError):
        err = CollectiveError(f"{label} died: its Ray actor was lost ({_first_line(e)})")
        err.add_note(f"spmd: {len(errors)} rank(s) of the ray runtime failed")
        return err
    cause = getattr(e, "cause", None)
    if not isinstance(cause, BaseException):
        err = SpmdError(f"{label} failed on the ray runtime: {e}")
        return err
    if isinstance(cause, SpmdError) and cause.args and isinstance(cause.args[0], str) \
            and label not in cause.args[0]:
        cause.args = (f"{label}: {cause.args[0]}",) + cause.args[1:]
    tb = re.sub(r"\x1b\[[0-9;]*m", "", str(e)).rstrip()      # Ray's text of the remote error
    cause.add_note(f"spmd: raised on {label} of the ray runtime ({len(errors)} rank(s) failed); "
                   f"its traceback:\n{tb}")
    return cause
