"""Which backend the environment asks for (spmd.init(backend=None)).

    SPMD_BACKEND set (by `spmd run --backend ...`, or by hand)  -> that backend
    started by mpiexec / mpirun / srun (their variables below),
      or mpi4py already initialised with a world of 2+ ranks     -> "mpi"
    otherwise                                                    -> "local"

Ray is never guessed: a script asks for it with spmd.init(backend="ray") (as under
`ray job submit`) or is run by `spmd run --backend ray`, which sets SPMD_BACKEND.

What the launcher says about this process (`launcher_world`): its rank, the number of
processes and, under SLURM, the hosts. Under srun these come from SLURM's variables, as
jax.distributed.initialize reads them: SLURM_PROCID, SLURM_STEP_NUM_TASKS,
SLURM_STEP_NODELIST (expanded: h[1-2] -> h1, h2; the first host, rank 0's, is the
coordinator) and SLURM_LOCALID. Only srun sets SLURM_STEP_NUM_TASKS (a batch script
has SLURM_PROCID=0 and SLURM_NTASKS but is no launch); a step with some of these
variables missing is an error naming the first missing one. The MPI runtime checks that
MPI's world is the one the launcher started (transports/mpi/mpi_runtime.py).
"""
from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass

from ..errors import SpmdError

# set for every rank by MPICH's hydra (PMI_*), Open MPI (OMPI_*), PMIx launchers, and
# SLURM's srun for the tasks of a step
MPI_ENV = ("PMI_RANK", "PMI_SIZE", "PMIX_RANK", "OMPI_COMM_WORLD_SIZE", "MPI_LOCALNRANKS")


def detect_backend(environ=None) -> str:
    env = os.environ if environ is None else environ
    if env.get("SPMD_BACKEND"):
        return env["SPMD_BACKEND"]
    task = slurm_task(env)          # a partial SLURM environment is an error here
    if any(env.get(v) is not None for v in MPI_ENV):
        return "mpi"
    if task is not None and task.size > 1:
        return "mpi"
    if _mpi_world_size() > 1:
        return "mpi"
    return "local"


def _int(v, default=0):
    try:
        return int(v)
    except (TypeError, ValueError):
        return default


def _mpi_world_size() -> int:
    """The MPI world's size if this process already initialised MPI (importing mpi4py
    just to ask would initialise it, which a plain `python script.py` should not do)."""
    mod = sys.modules.get("mpi4py.MPI")
    if mod is None:
        return 0
    try:
        return mod.COMM_WORLD.Get_size() if mod.Is_initialized() and not mod.Is_finalized() else 0
    except Exception:      # noqa: BLE001 - a broken MPI is not a reason to fail detection
        return 0


# what srun sets for every task of a step
SLURM_TASK_ENV = ("SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_STEP_NODELIST", "SLURM_LOCALID")


@dataclass(frozen=True)
class LauncherWorld:
    """This process as its launcher started it."""
    launcher: str           # "srun", "mpiexec (hydra)", "mpirun (Open MPI)"
    rank: int
    size: int
    hosts: tuple = ()       # every host of the job (SLURM), rank 0's first
    local_rank: int | None = None

    @property
    def coordinator(self):
        """Rank 0's host (jax.distributed.initialize's coordinator), if known."""
        return self.hosts[0] if self.hosts else None


def slurm_task(environ=None):
    """This srun task's LauncherWorld; None outside an srun step; SpmdError naming the
    missing variable when the step's variables are there in part."""
    env = os.environ if environ is None else environ
    if env.get("SLURM_STEP_NUM_TASKS") is None:
        return None
    missing = [v for v in SLURM_TASK_ENV if not env.get(v)]
    if missing:
        have = [v for v in SLURM_TASK_ENV if env.get(v)]
        raise SpmdError(f"the SLURM environment is partial: {', '.join(have)} set but {missing[0]} is not "
                        f"(srun sets {', '.join(SLURM_TASK_ENV)} for every task). Start the program with "
                        f"srun, or unset the SLURM_* variables to run it without SLURM")
    nums = {}
    for v in ("SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID"):
        try:
            nums[v] = int(env[v])
        except ValueError:
            raise SpmdError(f"the SLURM environment is broken: {v}={env[v]!r} is not a number") from None
    return LauncherWorld("srun", nums["SLURM_PROCID"], nums["SLURM_STEP_NUM_TASKS"],
                         tuple(expand_nodelist(env["SLURM_STEP_NODELIST"])), nums["SLURM_LOCALID"])


def launcher_world(environ=None):
    """What the launcher that started this process says (srun, hydra's mpiexec, Open
    MPI's mpirun), or None when none did."""
    env = os.environ if environ is None else environ
    task = slurm_task(env)
    if task is not None:
        return task
    for launcher, rank, size in (("mpiexec (hydra)", "PMI_RANK", "PMI_SIZE"),
                                 ("mpirun (Open MPI)", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE")):
        r, n = _int(env.get(rank), None), _int(env.get(size), None)
        if r is not None and n is not None:
            return LauncherWorld(launcher, r, n)
    return None


def expand_nodelist(text: str) -> list:
    """SLURM's host list notation: 'h[1-3,7],gpu-[01-02]x' -> h1 h2 h3 h7 gpu-01x gpu-02x."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(text + ","):
        depth += (ch == "[") - (ch == "]")
        if ch == "," and depth == 0:
            if text[start:i].strip():
                out += _expand_one(text[start:i].strip())
            start = i + 1
    return out


def _expand_one(name):
    m = re.search(r"\[([^\]]*)\]", name)
    if m is None:
        return [name]
    head, tail, items = name[:m.start()], name[m.end():], []
    for part in m.group(1).split(","):
        lo, _, hi = part.partition("-")
        if not hi:
            items.append(lo)
            continue
        if not (lo.isdigit() and hi.isdigit()):
            raise SpmdError(f"SLURM host list {name!r}: {part!r} is not a range of numbers")
        items += [str(k).zfill(len(lo)) for k in range(int(lo), int(hi) + 1)]
    return [head + it + rest for it in items for rest in _expand_one(tail)]
