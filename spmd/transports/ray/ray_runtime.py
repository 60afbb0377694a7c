"""RayRuntime: this process is the driver; each rank (device) is a Ray actor.

The driver traces and compiles a program once (jit does, as on the local backend) and
ships the per-device executable to the actors through the object store: `ray.put` once
per program, each actor fetches it on first use and keeps it (by key) for later runs.
Arguments and results stay in the cluster: a handle is an ObjectRef, owned by the
driver, of one device's shard. `run` passes each device's handles to its actor as
top-level arguments (Ray resolves them zero-copy on the actor's node) and gets one
ObjectRef per output back, stored on the actor's node; spmd.Array on the driver holds
those refs, and reading an Array (`all_shards`) is a `ray.get` of them.

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
the abort is killed. Dead actors are replaced, in their bundle, at the next run; shards
live in the object store, owned by the driver, so an actor's death loses none of them.
process_index() is 0 and process_count() 1: only the driver runs the user's script.
"""
from __future__ import annotations

import atexit
import itertools
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
from .ray_transport import Transport
from ...errors import CollectiveError, ShardingError, SpmdError
from ...tools import timeline
from ...runtime.backend import Runtime

# after the first failure, how long the driver waits for the other ranks to stop
GRACE_SECONDS = 2.0
# message threads per actor: `abort` and the driver's questions, while a program runs
MAIL_THREADS = 4


@ray.remote(concurrency_groups={"mail": MAIL_THREADS})
class RankActor:
    """One rank. `run` runs on the default group (one at a time); the rest on "mail"."""

    def __init__(self, rank):
        self.rank = rank
        self.mailbox = Mailbox()
        self.transport = None
        self.programs = OrderedDict()       # key -> executable, most recent last

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

    def call(self, fn, *args):
        return fn(*args)

    def call_kept(self, fn, *args):
        """fn's result stays here (first return, a shard); the second tells success."""
        return fn(*args), True

    def run(self, run_id, mesh, key, boxed_program, timeout, trace, *inputs):
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
            outs = list(program(list(inputs), comm))
        except BaseException as e:
            # wake the peers now rather than when the driver notices
            reason = f"rank {self.rank} failed: {type(e).__name__}: {e}"
            self.transport.abort_peers(run_id, reason, mesh.devices.reshape(-1).tolist())
            raise
        # the last return says it ran, with what it printed for the driver to print
        done = tuple(comm.output) or True
        return tuple(outs) + (done,) if outs else done


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
        # replicas of one shard share a buffer (device_put): store it once
        hit = self._recent_puts.get(id(array))
        if hit is not None and hit[0]() is array:
            return hit[1]
        ref = ray.put(array)
        self._recent_puts = {k: v for k, v in self._recent_puts.items() if v[0]() is not None}
        try:
            self._recent_puts[id(array)] = (weakref.ref(array), ref)
        except TypeError:
            pass
        return ref

    def get(self, handles):
        devs = list(handles)
        vals = ray.get([handles[d] for d in devs])
        return {d: np.asarray(v) for d, v in zip(devs, vals)}

    def all_shards(self, handles, mesh):
        return self.get(handles)

    # the driver's I/O threads only wait for the actors: as many as there are ranks
    remote_io = True

    def call_on(self, device, fn, *args, keep=False):
        with self._revive_lock:         # called from the checkpoint's I/O threads
            self._revive()
        actor = self._actors[device]
        try:
            if not keep:
                return ray.get(actor.call.remote(fn, *args))
            ref, ok = actor.call_kept.options(num_returns=2).remote(fn, *args)
            ray.get(ok)
            return ref
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
        outs = {}
        for d in devices:
            r = self._actors[d].run.options(num_returns=n_out + 1).remote(
                run_id, mesh, key, [ref], timeout, timeline.enabled(), *args[d])
            outs[d] = [r] if n_out == 0 else list(r)
        printed = {}
        errors = self._wait({outs[d][-1]: d for d in devices}, run_id, printed)
        for d in sorted(printed):           # the program's prints, here, in rank order
            sys.stdout.write("".join(printed[d]))
        sys.stdout.flush()
        if errors:
            raise _first_error(errors, getattr(self, "_hosts", {}))
        return {d: outs[d][:-1] for d in devices}

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
        """Replace the actors of ranks that died, in their bundles."""
        if not self._dead:
            return
        from .ray_placement import restart_rank
        for d in sorted(self._dead):
            self._actors[d] = restart_rank(RankActor, self._pg, d)
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
