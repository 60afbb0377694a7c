"""MPICH's files for a run, removed as soon as nothing needs them by name.

MPICH (ch4, 4.x and 5.x) keeps its intra-node segment as /dev/shm/mpich_shm_<world>_<node>
(2-4 MB) from MPI_Init until MPI_Finalize, which unlinks it. Hydra's proxy on each host
writes the host's topology to /tmp/hydra_hwloc_xmlfile_* for its ranks' MPI_Init and
deletes it when it exits cleanly. A run that ends any other way (a rank that raises and
calls MPI_Abort, os._exit, Ctrl-C, mpiexec killed) left both behind, and on a shared node
they pile up until /dev/shm is full.

Nothing opens either file by name once every rank on the host is past MPI_Init: the
ranks have the segment mapped and the topology read. So each rank unlinks them then
(the memory stays until the last rank unmaps it, as with any unlinked file), and
however the run ends afterwards, even by SIGKILL of everything, nothing is left. The
names are read from the system, not guessed: the segments this process maps
(/proc/self/maps), the topology file its launcher's proxy holds open (/proc/PID/fd
of this process's ancestors). MPI_Finalize's own unlink then finds nothing, which MPICH
ignores. A rank killed inside MPI_Init, before this runs, can still leave the segment.
"""
from __future__ import annotations

import os

SEGMENT_PREFIXES = ("mpich_shm_", "mpich_vci_")
TOPOLOGY_PREFIX = "hydra_hwloc_xmlfile_"
# rank -> (spmd/launcher/rank.py) -> hydra_pmi_proxy: the proxy is at most this far up
ANCESTORS = 3


def mapped_segments(maps="/proc/self/maps") -> list:
    """MPICH's shared-memory files this process maps that still have a name."""
    found = []
    try:
        with open(maps) as f:
            for line in f:
                parts = line.split()
                if len(parts) == 6 and parts[5].startswith("/dev/shm/") \
                        and os.path.basename(parts[5]).startswith(SEGMENT_PREFIXES):
                    found.append(parts[5])
    except OSError:
        pass
    return sorted(set(found))


def parent_of(pid) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def launcher_files(pid=None, depth=ANCESTORS) -> list:
    """Hydra's topology files held open by this process's nearest ancestors."""
    found = []
    pid = os.getppid() if pid is None else pid
    for _ in range(depth):
        if not pid or pid <= 1:
            break
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            fds = []
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if os.path.basename(target).startswith(TOPOLOGY_PREFIX) and os.path.isfile(target):
                found.append(target)
        pid = parent_of(pid)
    return sorted(set(found))


def ranks_on_this_host(environ=None) -> int:
    env = os.environ if environ is None else environ
    for var in ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE"):
        try:
            return int(env[var])
        except (KeyError, ValueError):
            pass
    return 0


def unlink_run_files(everyone_started=False) -> list:
    """Unlink this run's MPICH files that nothing will open again; the paths removed.
    The segment once this rank maps it: MPICH's MPI_Init returns only after every rank
    on the host has attached. The topology file once every rank on the host is past
    MPI_Init: known when the segment was there (or this rank is alone on its host),
    or when the caller knows it (everyone_started, after an exchange among all ranks)."""
    segments = mapped_segments()
    files = list(segments)
    if everyone_started or segments or ranks_on_this_host() == 1:
        files += launcher_files()
    removed = []
    for path in files:
        try:
            os.unlink(path)
            removed.append(path)
        except OSError:                 # another rank of the host was first
            pass
    return removed
