"""The Runtime contract: how this process takes part in running per-device programs.

Three implementations: local (all N ranks are threads of this process), mpi (this process
is one rank), ray (this process is the driver; ranks are actors). spmd.Array and jit talk
to the runtime only through this interface, so one user script runs on all three.

A *handle* is whatever the runtime uses to hold one device's shard: a numpy array for
local and mpi, for ray a Shard naming one shard kept in a rank actor's memory
(transports/ray/ray_shards.py). A shard always has the padded local shape
(Sharding.local_shape); the padding's content is unspecified (device_put writes zeros).
Shards are immutable once placed: `put` may keep the array it is given without copying,
and `run` may hand a handle to several programs.

The current runtime is chosen by spmd.init (runtime/current_runtime.py); spmd.Array (array.py) and
jit's run step (execute.py) are written against this class only.
"""
from __future__ import annotations

from abc import ABC, abstractmethod


class Runtime(ABC):
    name: str = "?"
    # a program that exchanges nothing and makes at most this many bytes a rank runs its
    # ranks one after another on the calling thread (the local runtime); 0: never
    solo_bytes: int = 0

    @property
    @abstractmethod
    def num_devices(self) -> int:
        """Ranks in the world (a mesh must have exactly this many devices; the local
        runtime runs a mesh of any size, one thread per device)."""

    @abstractmethod
    def local_devices(self, mesh=None) -> list:
        """Device ids whose shards this process holds handles for (of `mesh` if given:
        local holds every device of any mesh, an MPI process its own rank)."""

    def process_index(self) -> int:
        return 0

    def process_count(self) -> int:
        return 1

    @abstractmethod
    def put(self, device: int, array):
        """Place a numpy array as `device`'s shard; returns its handle. The caller hands
        the array over (device_put gives a buffer of its own): a runtime may keep it."""

    def native_scope(self, mesh):
        """What a run on `mesh` runs of its collectives as native instructions (the scope
        of its communicators' NativeExchange, backends/native_exchange.py): None, or
        "process" (ranks that are threads of this process), "host" (processes of one
        host that share memory: the all-reduces). What the memory plan assumes."""
        return None

    def put_sends(self, device: int) -> bool:
        """Whether put(device, a) sends a's bytes to another process, at the latest with
        the runtime's next message to it (a run of a jitted call is one): a jitted call's
        numpy argument is then put as the caller's own memory, not copied first."""
        return False

    @abstractmethod
    def get(self, handles: dict) -> dict:
        """{device: handle} of local devices -> {device: numpy array} in this process."""

    @abstractmethod
    def run(self, program, mesh, args: dict) -> dict:
        """Run `program` (a picklable per-device executable: program(inputs, comm) -> outputs,
        declaring how many it returns as `program.num_outputs`, as the backends'
        Executables do) on every device of `mesh` at once. args: {device: [handle, ...]} for the local
        devices; returns {device: [handle, ...]} of the outputs. An argument may also be
        a numpy array of the shard's padded local shape (a jitted call's numpy argument),
        handed over as to `put`, with no handle made for it: ray sends its bytes with the
        run's message, and where put_sends(device) it may be a view of the caller's
        memory."""

    @abstractmethod
    def all_shards(self, handles: dict, mesh) -> dict:
        """{device: numpy array} for *every* device of the mesh, in this process (mpi:
        an allgather across processes) — how Array.numpy() assembles a global value."""

    def allgather_object(self, obj, what="exchanging values") -> list:
        """[obj of process 0, obj of process 1, ...]: a small picklable value from every
        process (a collective: every process must call it). One process: [obj].
        `what` says what the caller is doing: processes that meet in this exchange while
        doing different things fail with an SpmdError naming them (mpi)."""
        return [obj]

    def allgather_bytes(self, data: bytes, what="exchanging values") -> list:
        """allgather_object for raw bytes (of any length per process), without pickle."""
        return [bytes(data)]

    def call_on(self, device, fn, *args, keep=False):
        """fn(*args) in the process that holds `device`'s shard, with handles among args
        (top level) seen there as numpy arrays: local and mpi run it here and now; ray on
        the device's actor, so that checkpoint I/O happens on the node that holds the data
        and sees its file system. keep=False: fn's result here; keep=True: a handle to
        it as `device`'s shard, left where it was made."""
        out = fn(*args)
        return self.put(device, out) if keep else out

    def shutdown(self):
        """Release workers / actors (spmd.init replacing this runtime calls it)."""
