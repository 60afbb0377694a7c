"""jit's placing stage: where a program's run goes before it starts. Does what one run
allocates in this process fit the memory this machine has free (`check_fits_machine`,
before the first run)? And, for jit's eager fallback, each argument placed on the mesh
as jit would place it (`place`)."""
from __future__ import annotations

import os

import numpy as np

from ..errors import MemoryLimitError, SpmdError
from ..frontend import functionalize as fz
from ..frontend.trace import ShapeDtype
from ..ir.mesh import Sharding
from ..runtime.array import Array, device_put
from ..runtime.current_runtime import get_runtime


def check_fits_machine(lowered):
    """Before the first run: does what the run will allocate in this process (the
    peak per device beyond the arguments, which exist already, times the devices this
    process runs) fit the memory the machine has free (its share of it, with other
    ranks on this host)? If not, say so now rather than be killed halfway.
    SPMD_MEMORY_CHECK=0 skips the check."""
    if os.environ.get("SPMD_MEMORY_CHECK", "1") == "0":
        return
    free = free_memory_bytes()
    if free is None:
        return
    n = 1
    if lowered.mesh is not None:
        rt = get_runtime()
        if rt.name not in ("local", "mpi"):      # (Ray: the actors run elsewhere)
            return
        n = len(rt.local_devices(lowered.mesh))
    prof = lowered.memory_profile()
    per = prof.peak_bytes - sum(b.nbytes for b in prof.buffers if b.start < 0)
    share = free // max(ranks_on_this_host(), 1)
    if per * n <= share:
        return
    from ..backends.memory_budget import SINGULAR, mb
    k = prof.peak_step
    at = prof.ops[k] if k >= 0 else None
    where = f" at {at.name} ({at.loc})" if at is not None and at.loc else ""
    live = ", ".join(f"{mb(b.nbytes)} {SINGULAR[prof.kind(b, k)]} made by "
                     f"{getattr(prof.value_at(b, k).producer, 'name', 'argument')}"
                     + (f" at {prof.value_at(b, k).producer.loc}" if prof.value_at(b, k).producer is not None
                        and prof.value_at(b, k).producer.loc else "")
                     for b in prof.live_at(k)[:4] if b.start >= 0)
    raise MemoryLimitError(
        f"{lowered.stages['traced'].name}: a run needs {mb(per * n)} more memory in this process ({n} "
        f"device{'s' if n > 1 else ''} x {mb(per)} beyond the arguments, at the peak{where}), but this "
        f"machine has {mb(share)} available{' for each of its ranks' if ranks_on_this_host() > 1 else ''}: it "
        f"would be killed. Largest at the peak: {live}. To fit: spmd.jit(..., memory_limit=bytes) recomputes "
        f"what it can, spmd.checkpoint recomputes layers, splitting parameters, optimizer state and the "
        f"batch over more devices (FSDP) divides them (SPMD_MEMORY_CHECK=0 skips this check).")


def free_memory_bytes():
    """The memory the machine has available (Linux: MemAvailable), or None if unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def ranks_on_this_host() -> int:
    """MPI processes sharing this machine (mpich's hydra and Open MPI say), else 1."""
    for var in ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE"):
        v = os.environ.get(var)
        if v and v.isdigit():
            return int(v)
    return 1


def place(x, sharding, mesh):
    """A value as an spmd.Array on mesh: placed by its sharding (or replicated), an
    spmd.Array resharded if it must be (else kept)."""
    if isinstance(x, ShapeDtype):
        raise SpmdError("spmd.jit: a ShapeDtype argument has no values to run the function eagerly with")
    if sharding is None:
        x = x if isinstance(x, Array) else np.asarray(x)
        if isinstance(x, Array):
            return x
        sharding = Sharding(mesh, (None,) * x.ndim)
    placed = device_put(x, sharding)
    layout = fz.leaf_layout(x)          # numpy's strides of x decide whether a reshape of it is a view
    if layout is not None and placed is not x:
        placed.numpy_layout = layout
    return placed
