"""The Runtime contract: how this process takes part in running per-device programs.

Three implementations: local (all N ranks are threads of this process), mpi (this process
is one rank), ray (this process is the driver; ranks are actors). spmd.Array and jit talk
to the runtime only through this interface, so one user script runs on all three.

A *handle* is whatever the runtime uses to hold one device's shard: a numpy array for
local and mpi, a Ray ObjectRef for ray.
"""
from __future__ import annotations

from abc import ABC, abstractmethod


class Runtime(ABC):
    name: str = "?"

    @property
    @abstractmethod
    def num_devices(self) -> int:
        """Ranks in the world (a mesh must have exactly this many devices)."""

    @abstractmethod
    def local_devices(self) -> list:
        """Device ids whose shards this process holds handles for."""

    def process_index(self) -> int:
        return 0

    def process_count(self) -> int:
        return 1

    @abstractmethod
    def put(self, device: int, array):
        """Place a numpy array as `device`'s shard; returns its handle."""

    @abstractmethod
    def get(self, handles: dict) -> dict:
        """{device: handle} of local devices -> {device: numpy array} in this process."""

    @abstractmethod
    def run(self, program, mesh, args: dict) -> dict:
        """Run `program` (a picklable per-device executable: program(inputs, comm) -> outputs)
        on every device of `mesh` at once. args: {device: [handle, ...]} for the local
        devices; returns {device: [handle, ...]} of the outputs."""

    @abstractmethod
    def all_shards(self, handles: dict, mesh) -> dict:
        """{device: numpy array} for *every* device of the mesh, in this process (mpi:
        an allgather across processes) — how Array.numpy() assembles a global value."""
