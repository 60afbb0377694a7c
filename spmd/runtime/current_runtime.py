"""spmd.init and the current runtime: choose the runtime this process takes part in, once.

    spmd.init(backend=None, num_devices=None) -> Runtime
    spmd.process_index(), spmd.process_count(), spmd.device_count()

`backend=None` detects the environment (`detect_backend`); everything that needs a
runtime calls `get_runtime()`, which runs `init()` with the defaults on first use, so
`python script.py` needs no init call at all.

Adding a backend is two small edits here: an entry in BACKENDS (name -> factory taking
num_devices) and, if it can be recognised from the environment, a line in
`detect_backend`.
"""
from __future__ import annotations

import os
import threading

from ..errors import SpmdError
from .allocator import keep_freed_memory


def _local(num_devices):
    from ..transports.local.local_runtime import LocalRuntime
    return LocalRuntime(num_devices)


def _mpi(num_devices):
    need_extra("mpi4py", "mpi", "the MPI backend")
    from ..transports.mpi.mpi_runtime import MPIRuntime
    return MPIRuntime(num_devices)


def _ray(num_devices):
    need_extra("ray", "ray", "the Ray backend")
    from ..transports.ray.ray_runtime import RayRuntime
    return RayRuntime(num_devices)


def need_extra(module, extra, what):
    """Raise an error naming the pip extra that brings `module`, if it is not installed."""
    import importlib.util
    if importlib.util.find_spec(module) is None:
        raise SpmdError(f"{what} needs the Python package {module!r}, which is not installed: "
                        f"pip install 'spmd[{extra}]' (or 'spmd[all]' for MPI and Ray)")


# name -> factory(num_devices) -> Runtime.
BACKENDS = {"local": _local, "mpi": _mpi, "ray": _ray}

_runtime = None
_lock = threading.Lock()


def detect_backend() -> str:
    """The backend the environment asks for: SPMD_BACKEND, else mpi under mpiexec /
    mpirun / srun, else local (runtime/detect.py)."""
    from .detect import detect_backend as detect
    return detect()


def init(backend=None, num_devices=None):
    """Choose (or re-choose) the runtime. Calling it again with the same arguments, or
    with none, keeps the current one."""
    global _runtime
    with _lock:
        # backend=None keeps a runtime already chosen (e.g. spmd.init(backend="ray", ...)
        # by the caller) when it has the devices asked for; otherwise detect
        keep = _runtime is not None and (num_devices is None or _runtime.num_devices == num_devices)
        name = backend or (_runtime.name if keep else None) or detect_backend()
        if name not in BACKENDS:
            raise SpmdError(f"spmd.init: unknown backend {name!r} (takes {', '.join(sorted(BACKENDS))})")
        if num_devices is not None and (not isinstance(num_devices, int) or num_devices < 1):
            raise SpmdError(f"spmd.init: num_devices must be a positive int, got {num_devices!r}")
        if num_devices is None and os.environ.get("SPMD_NUM_DEVICES"):
            num_devices = int(os.environ["SPMD_NUM_DEVICES"])     # set by `spmd run -n N`
        rt = _runtime
        if rt is not None and rt.name == name and (num_devices is None or rt.num_devices == num_devices):
            return rt
        if rt is not None:
            getattr(rt, "shutdown", lambda: None)()
        # (a call's buffers reuse the pages of the call before: allocator.py)
        keep_freed_memory()
        _runtime = BACKENDS[name](num_devices)
        return _runtime


def get_runtime():
    """The current runtime (the default one if init was never called)."""
    rt = _runtime
    return rt if rt is not None else init()


def started():
    """The current runtime, or None where init has not run (what asks only about it
    starts none)."""
    return _runtime


def process_index() -> int:
    """This process's index among the processes running the program (0 on local)."""
    return get_runtime().process_index()


def process_count() -> int:
    return get_runtime().process_count()


def device_count() -> int:
    """Devices (ranks) in the world."""
    return get_runtime().num_devices
