"""One rank of the Ray runtime, as a plain object: its shards, the programs it was sent,
its Transport to the other ranks, and the answers to the driver's messages
(transports/ray/ray_control.py): `store`, `fetch`, `drop`, `call`, `run`, `held`.

It lives either in a Ray actor (ray_runtime.RankActor: the driver's messages come on its
control line) or in the driver itself (ray_driver_rank.py: rank 0 on the driver's host,
whose messages are calls on the driver's thread). Both answer alike, so a rank's
results and errors do not depend on where it runs.
"""
from __future__ import annotations

import os
import pickle

import numpy as np
import ray
from ray import cloudpickle

from .ray_communicator import RayCommunicator
from .ray_control import SPIN_SECONDS, Listener
from .ray_mailbox import Mailbox
from .ray_shards import ShardTable, small_value
from .ray_transport import Transport
from ...errors import SpmdError
from ...runtime.allocator import keep_freed_memory


class Rank:
    in_driver = False

    def __init__(self, rank):
        # a rank's process makes and frees its buffers as MPI's ranks do (runtime/allocator.py)
        keep_freed_memory()
        self.rank = rank
        self.mailbox = Mailbox()
        self.transport = None
        self.comms = {}
        self.listener = None
        self.programs = {}                  # key -> (executable, mesh) (the driver says which to forget)
        self.shards = ShardTable(rank)
        self.printed = ()
        self.tracing = None                 # SPMD_TRACE as the last run set it here (None: no run yet)
        self.generation = 0                 # the driver's count of failed runs, as the last run said it

    def open_links(self, control=True):
        """A new Transport (the old one closed): its address for the peers, and (control)
        the address of this rank's control line for the driver."""
        if self.transport is not None:
            self.transport.close()
        ip = ray.util.get_node_ip_address()
        self.transport = Transport(self.rank, ip, self.mailbox)
        self.comms = {}                     # (mesh, stopwatch) -> its RayCommunicator on this Transport
        if control and self.listener is None:
            self.listener = Listener(ip)
            self.listener.serve(self.answer)
        return dict(self.transport.info(), control=None if self.listener is None else self.listener.address)

    def connect_links(self, infos):
        self.transport.connect(infos)
        if self.listener is not None:
            # poll for the driver's next message only where no rank of this host (the
            # driver's among them) waits for a core meanwhile
            here = sum(1 for h in self.transport.hosts.values() if h == self.transport.host)
            self.listener.spin = SPIN_SECONDS if here <= (os.cpu_count() or 1) else 0.0
        return self.rank

    def answer(self, message):
        """One message of the driver: (operation, arguments) -> its reply; None for the
        ones answered by no reply (`store`, `drop`: a later read fails if they did)."""
        op, args = message
        self.printed = ()
        try:
            out = getattr(self, op)(*args)
        except KeyboardInterrupt as e:
            if self.in_driver:
                raise                      # the user's Ctrl-C, not a failure of this rank
            return error_reply(e, self.printed)
        except BaseException as e:         # noqa: BLE001 - sent to the driver, which raises it
            return error_reply(e, self.printed)
        if op in ("store", "drop"):
            return None
        return ("ok", out, self.printed)

    def held(self):
        """The numbers of the shards this rank holds (what the driver's handles name)."""
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

    def set_tracing(self, on):
        """Record timeline spans here when the driver does (an actor: the driver collects
        them, take_trace)."""
        trace_in_actor(on)

    def run(self, run_id, key, blob, forget, timeout, trace, generation, ins, out_sids, news, small):
        """One run of program `key` (blob: the pickle of it and its mesh, sent with its
        first run here: not unpickled again each run; forget: programs the driver will
        not run here again; ins: its inputs, ShardTable.inputs). Its outputs stay here as
        shards out_sids; returns those of at most `small` bytes, by position, with what
        the program printed. A new `generation` (a run failed since the last one here, or
        the driver ran many meshes): every rank starts over with new communicators, whose
        native all-reduces share new memory (an aborted one's counts are not read again:
        ray_native_exchange.py)."""
        mesh = comm = None
        try:
            if generation != self.generation:
                self.comms = {}
                self.generation = generation
            self.shards.update(news)
            for k in forget:
                self.programs.pop(k, None)
            if blob is not None:
                self.programs[key] = pickle.loads(blob)
            program, mesh = self.programs.get(key, (None, None))
            if program is None:
                raise SpmdError(f"rank {self.rank}: this program did not load here when it was sent with its "
                                f"first run (that run's error said why)")
            self.mailbox.start(run_id)
            self.transport.new_run(run_id)
            if trace != self.tracing:        # (setting the environment each run cost ~15 us)
                self.set_tracing(trace)
                self.tracing = trace
            # one communicator per mesh and stopwatch (its native waits read the stopwatch
            # once), dropped only at a new generation: every rank of a mesh then makes its
            # own anew at the same run, and agrees on new shared memory with the others
            comm = self.comms.get((mesh, timeout))
            if comm is None:
                comm = self.comms[(mesh, timeout)] = RayCommunicator(mesh, self.rank, self.transport, run_id,
                                                                     timeout)
            else:
                comm.new_run(run_id, timeout)
            from ...runtime import blas
            blas.start_run(mesh.size)        # every run starts from the same BLAS thread count
            inputs = self.shards.inputs(ins)
            outs = list(program(inputs, comm))
            del inputs
            if len(outs) != len(out_sids):
                raise SpmdError(f"rank {self.rank}: the program made {len(outs)} outputs, "
                                f"{len(out_sids)} were expected")
        except BaseException as e:
            # wake the peers now rather than when the driver notices (rank 0 in the driver
            # waits in its collective, and the driver reads no reply until it returns);
            # one that failed before its program loaded does not know the mesh: all of them
            reason = f"rank {self.rank} failed: {type(e).__name__}: {e}"
            ranks = list(self.transport.hosts) if mesh is None else mesh.devices.reshape(-1).tolist()
            self.transport.abort_peers(run_id, reason, ranks)
            raise
        finally:
            self.printed = () if comm is None else tuple(comm.output)   # for the driver to print, even on failure
        values = {}
        for i, (sid, a) in enumerate(zip(out_sids, outs)):
            self.shards.keep(sid, a)
            if np.asarray(a).nbytes <= small:
                # rank 0 in the driver hands its arrays over as they are (LocalChannel.run)
                values[i] = self.shards.read(sid) if self.in_driver else small_value(a)
        return values

    def close(self):
        if self.transport is not None:
            self.transport.close()
            self.transport = None


def error_reply(exc, printed):
    """("err", the exception if it pickles else None, its type and message, its
    traceback's text, what the program printed)."""
    import traceback
    tb = traceback.format_exc()
    text = f"{type(exc).__name__}: {exc}"
    try:
        cloudpickle.dumps(exc)
    except Exception:          # noqa: BLE001 - sent as text instead
        exc = None
    return ("err", exc, text, tb, printed)


def trace_in_actor(on):
    """Record timeline spans in this actor when the driver does; the driver writes them
    (take_trace), never the actor."""
    import os

    from ...tools import timeline
    timeline.set_exit_hook(lambda: None)
    if on:
        os.environ["SPMD_TRACE"] = "1"
    else:
        os.environ.pop("SPMD_TRACE", None)
