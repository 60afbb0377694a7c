"""The cores this process may run on: the local runtime's devices share them (its
threads), and the calibration prices a device's element-op by how many share a core."""
import os


def local_cores() -> int:
    """The cores the local runtime's ranks share: SPMD_LOCAL_CORES, else the cores this
    process may run on."""
    v = os.environ.get("SPMD_LOCAL_CORES", "").strip()
    if v:
        return max(1, int(v))
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1
