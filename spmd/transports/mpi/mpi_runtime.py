"""MPIRuntime: this process is one rank; its device id is its MPI world rank.

Every process traces and compiles the same program itself: tracing is deterministic
(same script, same shapes -> the same IR, the same per-device program), and it costs
about as much as receiving a broadcast program would, without a serialisation format
for compiled code. Each process holds the shard of its own device; `all_shards`
(what Array.numpy() uses) is an Allgather of the padded shards.

Why not compile on rank 0 and broadcast: compiled code (LLVM object code, ctypes
function pointers) has no portable wire format, and the program every rank needs is
the same one, so a broadcast would only add a round of communication.

Failure: `init` installs an excepthook that prints the rank's traceback (the user's
frames: tracebacks.py) and aborts the world (MPI_Abort), so an exception on one rank
ends every rank promptly. A KeyboardInterrupt (Ctrl-C reaches every rank) is told once,
by rank 0, and every rank exits 130 (transports/mpi/mpi_interrupt.py). MPICH's
files in /dev/shm and /tmp are unlinked once every rank is up (transports/mpi/mpi_files.py).
It gathers every rank's (host, pid, heartbeat address) once, starts the heartbeats, and
a watchdog thread (transports/mpi/mpi_watchdog.py) aborts the world, naming the lost rank, the collective and
the user line, when a peer of a blocked collective is gone, silent, finished, or
mpiexec reports a dead rank (hydra's SIGUSR1 under `spmd run`); a busy peer is waited
for (SPMD_COLLECTIVE_TIMEOUT adds a stopwatch only when set).
Consistency: before each run the processes compare the program's fingerprint and, on
its first run, the hashes of host-value inputs (runtime/consistency.py).
Output: whole lines only (ranks' lines never interleave mid-line); lines of ranks
other than 0 are prefixed with "[rank N] ".
"""
from __future__ import annotations

import os
import socket
import sys
import time
import traceback

import numpy as np

from ...errors import ShardingError, SpmdError, is_internal, on_every_rank
from ...tracebacks import full as full_traceback, user_traceback
from ..communicator import collective_timeout, heartbeat_timeout
from . import mpi_library
from .mpi_communicator import MPICommunicator
from .mpi_files import unlink_run_files
from .mpi_heartbeat import HEARTBEAT
from .mpi_interrupt import keyboard_interrupt
from .mpi_library import contiguous, mpi_buffer, mpi_module
from .mpi_peers import PEERS
from .mpi_watchdog import WATCHDOG, abort_world, guarded
from ...compiler.passes import combine
from ...runtime import blas
from ...runtime.program import runner
from ...runtime.backend import Runtime


class _Prefixed:
    """A text stream that writes whole lines, each starting with `prefix`, in one write
    each: mpiexec merges every rank's output, and a line written in pieces (as
    `print` does when Python is unbuffered) would interleave with other ranks' lines."""

    def __init__(self, stream, prefix):
        self.stream, self.prefix, self.pending = stream, prefix, ""

    def write(self, s):
        text = self.pending + s
        cut = text.rfind("\n") + 1
        self.pending = text[cut:]
        if cut:
            lines = text[:cut].splitlines(keepends=True)
            self.stream.write("".join(self.prefix + ln for ln in lines))
            self.stream.flush()
        return len(s)

    def flush(self):
        if self.pending:
            self.stream.write(self.prefix + self.pending)
            self.pending = ""
        self.stream.flush()

    def __getattr__(self, name):
        return getattr(self.stream, name)


# how long a rank waits for rank 0 to report an error every rank raised (on_every_rank)
EVERY_RANK_WAIT = 10.0


def failure_report(tp, value, tb, rank) -> str:
    """What a failing rank prints. An SpmdError says what is wrong and what to do in its
    message: that comes first, then the user's lines that led to it. Any other exception
    prints its traceback without spmd's own frames (tracebacks.py; SPMD_TRACEBACK=full
    keeps them)."""
    from ...errors import SpmdError
    if not isinstance(value, SpmdError) or full_traceback():
        return f"spmd: rank {rank} failed:\n" + user_traceback(tp, value, tb)
    who = "every rank (said once, by rank 0)" if getattr(value, "on_every_rank", False) else f"rank {rank}"
    lines = [f"spmd: {who} failed:", "".join(traceback.format_exception_only(tp, value)).rstrip()]
    frames = [f for f in traceback.extract_tb(tb) if not is_internal(f.filename)]
    if frames:
        lines.append("raised from:")
        lines += [ln.rstrip() for ln in traceback.format_list(frames)]
    return "\n".join(lines) + "\n"


class MPIRuntime(Runtime):
    name = "mpi"

    def __init__(self, num_devices=None):
        MPI = mpi_module()          # MPI_Init, with MPICH's settings for an oversubscribed host
        self.world = MPI.COMM_WORLD
        self.rank = self.world.Get_rank()
        self.size = self.world.Get_size()
        self._comms = {}            # mesh -> its MPICommunicator (groups cached inside)
        self._check_launcher(MPI)
        if num_devices is not None and num_devices != self.size:
            raise on_every_rank(ShardingError(
                f"spmd.init(num_devices={num_devices}) but MPI started {self.size} ranks: launch with "
                f"mpiexec -n {num_devices} (one rank per device), or leave num_devices out"))
        # rank 0's lines plain, every other rank's prefixed with its rank; whole lines only
        prefix = f"[rank {self.rank}] " if self.rank != 0 else ""
        if not isinstance(sys.stdout, _Prefixed):
            sys.stdout = _Prefixed(sys.stdout, prefix)
            sys.stderr = _Prefixed(sys.stderr, prefix)
        self._install_excepthook()
        self._merge_timeline_at_exit()
        # once, at start: who runs where, so a timeout can name a rank that is gone
        # and where its heartbeats go (liveness: transports/mpi/mpi_heartbeat.py)
        try:                            # SPMD_HEARTBEAT_TIMEOUT=0: no heartbeats
            addr = HEARTBEAT.open() if heartbeat_timeout() > 0 else None
        except OSError:
            addr = None                 # no UDP: judged by the process table and mpiexec only
        got = self.world.allgather((socket.gethostname(), os.getpid(), addr))
        peers = [(h, p) for h, p, _ in got]
        unlink_run_files(everyone_started=True)     # every rank is past MPI_Init
        PEERS.update(enumerate(peers))
        combine.use_hosts_default(len({h for h, _ in peers}) > 1)     # gradient buckets for the link
        if addr is not None:
            HEARTBEAT.start(self.rank, {r: a for r, (_, _, a) in enumerate(got)})
        WATCHDOG.watch_peer_deaths(self.rank)
        self.ranks_here = sum(host == peers[self.rank][0] for host, _ in peers)
        blas.limit_threads(self.ranks_here)

    def _check_launcher(self, MPI):
        """MPI's world must be the one the launcher started: a launcher that cannot reach
        this MPI (srun without PMI, another MPI's mpiexec) starts N worlds of one
        process each, every one running the whole job alone."""
        from ...runtime.detect import launcher_world
        lw = launcher_world()
        if lw is None or (lw.size, lw.rank) == (self.size, self.rank):
            return
        if lw.launcher == "srun":
            fix = ("srun did not connect the tasks' MPI: run srun --mpi=pmi2 (the mpich wheel's MPI speaks "
                   "PMI-2; `srun --mpi=list` shows what this SLURM offers), or set MpiDefault=pmi2 in slurm.conf")
        else:
            lib = MPI.Get_library_version().strip().splitlines()[0]
            fix = (f"that launcher belongs to another MPI than the one mpi4py uses ({lib}); use its mpiexec "
                   f"(`spmd run -n N --backend mpi` finds it)")
        raise SpmdError(f"{lw.launcher} started this process as rank {lw.rank} of {lw.size}, but MPI's world has "
                        f"{self.size} process(es) and calls it rank {self.rank}: {fix}")

    def _merge_timeline_at_exit(self):
        """SPMD_TRACE: at exit every rank sends its spans to rank 0, which writes one file
        with a track per rank."""
        from ...tools import timeline
        world, rank = self.world, self.rank

        def hook():
            events = world.gather(timeline.take_events(), root=0)
            if rank == 0:
                timeline.write(events=timeline.merge_events(events))
        timeline.set_exit_hook(hook)

    def _install_excepthook(self):
        rank = self.rank

        def hook(tp, value, tb):
            if issubclass(tp, KeyboardInterrupt):
                keyboard_interrupt(tp, value, tb, rank)     # quietly, status 130
            if getattr(value, "on_every_rank", False) and rank != 0:
                # rank 0 raised it too and reports it once, for every rank, then aborts the
                # world (ending this process); were it not to, this rank says it itself
                time.sleep(EVERY_RANK_WAIT)
            sys.stderr.write(failure_report(tp, value, tb, rank))
            sys.stderr.flush()
            sys.stdout.flush()
            time.sleep(1.0)      # let mpiexec forward the report before it tears the job down
            abort_world(1)
        sys.excepthook = hook

    @property
    def num_devices(self):
        return self.size

    def process_index(self):
        return self.rank

    def process_count(self):
        return self.size

    def _check(self, mesh):
        if mesh is not None and mesh.size != self.size:
            raise on_every_rank(ShardingError(
                f"the mesh {mesh!r} has {mesh.size} devices but MPI started {self.size} ranks: launch "
                f"with mpiexec -n {mesh.size} (one rank per device), or build the mesh from "
                f"spmd.device_count()"))

    def local_devices(self, mesh=None):
        self._check(mesh)
        return [self.rank]

    def put(self, device, array):
        return contiguous(array)

    def get(self, handles):
        return dict(handles)

    def run(self, program, mesh, args):
        self._check(mesh)
        comm = self._comms.get(mesh)
        if comm is None or comm.timeout != collective_timeout():
            comm = self._comms[mesh] = MPICommunicator(mesh, self.rank, self.world)
        blas.start_run(self.ranks_here)
        # (a program of one native segment runs directly: backends/llvm/direct_run.py)
        run = runner(program, comm)
        return {self.rank: run(args[self.rank], comm)}

    def allgather_object(self, obj, what="exchanging values"):
        import pickle
        return [pickle.loads(b) for b in self.allgather_bytes(pickle.dumps(obj), what)]

    # the fixed block every exchange starts with: length (4 bytes), 4 spare, a hash of
    # what the sender is doing (8), and the first INLINE bytes of the message
    INLINE = 48

    def allgather_bytes(self, data, what="exchanging values"):
        """Every process's bytes. All of spmd's exchanges among the processes go through
        here, each headed by a hash of what its sender is doing: processes that meet
        here doing different things (one reading an Array, one saving a checkpoint, one
        running a program) pair up at the MPI level, see it, and all raise an SpmdError
        naming them and their lines. One fixed-size Allgather carries the header and a
        short message (a program's fingerprint: the per-call cost); longer messages
        follow in one Allgatherv (their lengths are known from the header by then)."""
        import hashlib
        from ...errors import user_loc
        MPI = mpi_module()
        data = bytes(data)
        loc = user_loc()
        group = list(range(self.size))
        label = f"{what} (all ranks must)"
        W = 16 + self.INLINE
        block = np.zeros(W, np.uint8)
        block[0:4] = np.frombuffer(len(data).to_bytes(4, "little"), np.uint8)
        block[8:16] = np.frombuffer(hashlib.blake2b(what.encode(), digest_size=8).digest(), np.uint8)
        head = data[:self.INLINE]
        block[16:16 + len(head)] = np.frombuffer(head, np.uint8)
        blocks = np.empty((self.size, W), np.uint8)
        guarded(lambda: self.world.Allgather(block, blocks), label, group, self.rank, loc=loc)
        if any((blocks[r, 8:16] != blocks[0, 8:16]).any() for r in range(self.size)):
            self._not_the_same(what, loc)
        lens = [int.from_bytes(blocks[r, 0:4].tobytes(), "little") for r in range(self.size)]
        out = [blocks[r, 16:16 + min(n, self.INLINE)].tobytes() for r, n in enumerate(lens)]
        if max(lens) <= self.INLINE:
            return out
        rest = [max(0, n - self.INLINE) for n in lens]
        displs = np.concatenate([[0], np.cumsum(rest)[:-1]]).astype(np.int64).tolist()
        buf = np.empty(sum(rest), np.uint8)
        mine = np.frombuffer(data[self.INLINE:], np.uint8)
        guarded(lambda: self.world.Allgatherv(mine, [buf, rest, displs, MPI.BYTE]), label, group, self.rank,
                loc=loc)
        return [o + buf[d:d + n].tobytes() for o, d, n in zip(out, displs, rest)]

    def _not_the_same(self, what, loc):
        """The ranks met doing different things (every rank sees it, so all come here):
        exchange what and where, raise naming them."""
        import json
        from ...errors import SpmdError
        mine = np.frombuffer(json.dumps([what, loc]).encode(), np.uint8)
        counts = np.empty(self.size, np.int64)
        group = list(range(self.size))
        guarded(lambda: self.world.Allgather(np.array([mine.size], np.int64), counts), "naming what the ranks do",
                group, self.rank)
        displs = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64).tolist()
        buf = np.empty(int(counts.sum()), np.uint8)
        guarded(lambda: self.world.Allgatherv(mine, [buf, counts.tolist(), displs, mpi_module().BYTE]),
                "naming what the ranks do", group, self.rank)
        groups = {}
        for r, (d, n) in enumerate(zip(displs, counts.tolist())):
            groups.setdefault(tuple(json.loads(buf[d:d + n].tobytes())), []).append(r)
        raise on_every_rank(SpmdError(f"rank {self.rank}: the ranks are not doing the same thing: " + "; ".join(
            f"rank(s) {rs}: {w}" + (f" at {l}" if l else "") for (w, l), rs in groups.items())))

    def all_shards(self, handles, mesh):
        self._check(mesh)
        mine = contiguous(handles[self.rank])
        from ...runtime.consistency import agree
        agree(self, "reading an spmd.Array", (mine.dtype.str, mine.shape))
        if mine.size > mpi_library.MAX_COUNT:          # the communicator chunks what MPI cannot count
            from ...ir.mesh import Mesh
            world = Mesh((self.size,), ("world",))
            out = MPICommunicator(world, self.rank, self.world).all_gather(mine[None], "world", 0)
            return {d: out[d] for d in range(self.size)}
        out = np.empty((self.size,) + mine.shape, mine.dtype)
        # a collective: a rank that reads an Array alone times out, naming who is missing
        from ...errors import user_loc
        guarded(lambda: self.world.Allgather(mpi_buffer(mine), mpi_buffer(out)), "reading an spmd.Array (all ranks must)",
                list(range(self.size)), self.rank, loc=user_loc())
        return {d: out[d] for d in range(self.size)}

    def barrier(self):
        self.allgather_bytes(b"", "barrier")       # an exchange like any other: mismatches are named
