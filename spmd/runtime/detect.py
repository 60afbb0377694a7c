"""Which backend the environment asks for (spmd.init(backend=None)).

    SPMD_BACKEND set (by `spmd run --backend ...`, or by hand)  -> that backend
    started by mpiexec / mpirun / srun (their variables below),
      or mpi4py already initialised with a world of 2+ ranks     -> "mpi"
    otherwise                                                    -> "local"

Ray is never guessed: a script asks for it with spmd.init(backend="ray") (as under
`ray job submit`) or is run by `spmd run --backend ray`, which sets SPMD_BACKEND.
"""
from __future__ import annotations

import os
import sys

# set for every rank by MPICH's hydra (PMI_*), Open MPI (OMPI_*), PMIx launchers, and
# SLURM's srun for the tasks of a step
MPI_ENV = ("PMI_RANK", "PMI_SIZE", "PMIX_RANK", "OMPI_COMM_WORLD_SIZE", "MPI_LOCALNRANKS")


def detect_backend(environ=None) -> str:
    env = os.environ if environ is None else environ
    if env.get("SPMD_BACKEND"):
        return env["SPMD_BACKEND"]
    if any(env.get(v) is not None for v in MPI_ENV):
        return "mpi"
    # only srun sets SLURM_STEP_NUM_TASKS (a batch script's SLURM_NTASKS is not a launch)
    if _int(env.get("SLURM_STEP_NUM_TASKS")) > 1:
        return "mpi"
    if _mpi_world_size() > 1:
        return "mpi"
    return "local"


def _int(v):
    try:
        return int(v)
    except (TypeError, ValueError):
        return 0


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
