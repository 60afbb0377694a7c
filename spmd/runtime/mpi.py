"""MPIRuntime: this process is one rank; its device id is its MPI world rank.

Every process traces and compiles the same program itself: tracing is deterministic
(same script, same shapes -> the same IR, the same per-device program), and it costs
about as much as receiving a broadcast program would, without a serialisation format
for compiled code. Each process holds the shard of its own device; `all_shards`
(what Array.numpy() uses) is an Allgather of the padded shards.

Failure: `init` installs an excepthook that prints the rank's traceback and aborts the
world (MPI_Abort), so an exception on one rank ends every rank promptly. A rank that
dies makes its peers' collectives time out (collectives/mpi.py) and abort in turn.
Output from ranks other than 0 is prefixed with "[rank N] ".
"""
from __future__ import annotations

import sys
import time
import traceback

import numpy as np

from ..errors import ShardingError
from ..collectives.mpi import _buf, contiguous
from .backend import Runtime


class _Prefixed:
    def __init__(self, stream, prefix):
        self.stream, self.prefix, self.bol = stream, prefix, True

    def write(self, s):
        out = []
        for part in s.splitlines(keepends=True):
            if self.bol:
                out.append(self.prefix)
            out.append(part)
            self.bol = part.endswith("\n")
        return self.stream.write("".join(out))

    def flush(self):
        self.stream.flush()

    def __getattr__(self, name):
        return getattr(self.stream, name)


class MPIRuntime(Runtime):
    name = "mpi"

    def __init__(self, num_devices=None):
        from mpi4py import MPI
        self.world = MPI.COMM_WORLD
        self.rank = self.world.Get_rank()
        self.size = self.world.Get_size()
        if num_devices is not None and num_devices != self.size:
            raise ShardingError(f"spmd.init(num_devices={num_devices}) but MPI started {self.size} ranks; "
                                f"launch with mpiexec -n {num_devices}")
        if self.rank != 0:
            sys.stdout = _Prefixed(sys.stdout, f"[rank {self.rank}] ")
            sys.stderr = _Prefixed(sys.stderr, f"[rank {self.rank}] ")
        self._install_excepthook()
        self._merge_timeline_at_exit()

    def _merge_timeline_at_exit(self):
        """SPMD_TRACE: at exit every rank sends its spans to rank 0, which writes one file
        with a track per rank."""
        from ..tools import timeline
        world, rank = self.world, self.rank

        def hook():
            events = world.gather(timeline.take_events(), root=0)
            if rank == 0:
                timeline.write(events=timeline.merge_events(events))
        timeline.exit_hook = hook
        if timeline.enabled():
            timeline._ensure_atexit()

    def _install_excepthook(self):
        world, rank = self.world, self.rank

        def hook(tp, value, tb):
            sys.stderr.write(f"spmd: rank {rank} failed:\n" + "".join(traceback.format_exception(tp, value, tb)))
            sys.stderr.flush()
            time.sleep(0.5)      # let mpiexec forward the traceback before it tears the job down
            world.Abort(1)
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
            raise ShardingError(f"the mesh {mesh!r} has {mesh.size} devices but MPI started {self.size} "
                                f"ranks; launch with mpiexec -n {mesh.size}")

    def local_devices(self, mesh=None):
        self._check(mesh)
        return [self.rank]

    def put(self, device, array):
        return contiguous(array)

    def get(self, handles):
        return dict(handles)

    def run(self, program, mesh, args):
        from ..collectives.mpi import MPICommunicator
        self._check(mesh)
        comm = MPICommunicator(mesh, self.rank, self.world)
        return {self.rank: program(args[self.rank], comm=comm)}

    def all_shards(self, handles, mesh):
        self._check(mesh)
        mine = contiguous(handles[self.rank])
        out = np.empty((self.size,) + mine.shape, mine.dtype)
        self.world.Allgather(_buf(mine), _buf(out))
        return {d: out[d] for d in range(self.size)}

    def barrier(self):
        self.world.Barrier()
