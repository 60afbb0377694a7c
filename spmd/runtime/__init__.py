"""Runtimes (where per-device programs run) and spmd.Array (runtime/array.py)."""
from .array import Array, Shard, device_put  # noqa: F401
from .current_runtime import device_count, get_runtime, init, process_count, process_index  # noqa: F401
from .multihost import make_array_from_process_local_data, process_allgather  # noqa: F401
