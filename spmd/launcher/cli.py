"""The `spmd` command.

    spmd run -n N [--backend local|mpi] script.py args...

local: runs the script in this process's Python with N devices (threads).
mpi:   runs it under `mpiexec -n N` (the mpich wheel ships mpiexec); each process is a
       rank and spmd.init() detects MPI from the launcher's environment.
The script is the same in every case.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys

BACKENDS = ("local", "mpi")


def find_mpiexec():
    exe = shutil.which("mpiexec") or shutil.which("mpirun")
    if exe is None:
        cand = os.path.join(os.path.dirname(sys.executable), "mpiexec")
        exe = cand if os.path.exists(cand) else None
    return exe


def command(args) -> tuple[list, dict]:
    """The command line and environment that run the script."""
    env = dict(os.environ, SPMD_BACKEND=args.backend, SPMD_NUM_DEVICES=str(args.n))
    py = [sys.executable, args.script, *args.args]
    if args.backend == "local":
        return py, env
    mpiexec = find_mpiexec()
    if mpiexec is None:
        raise SystemExit("spmd run: mpiexec not found (pip install mpich)")
    return [mpiexec, "-n", str(args.n), *py], env


def main(argv=None):
    ap = argparse.ArgumentParser(prog="spmd", description="Run an spmd program on N devices.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    run = sub.add_parser("run", help="run a script on N devices")
    run.add_argument("-n", type=int, required=True, help="number of devices (ranks)")
    run.add_argument("--backend", default="local", choices=BACKENDS)
    run.add_argument("script")
    run.add_argument("args", nargs=argparse.REMAINDER)
    args = ap.parse_args(argv)
    if args.n < 1:
        ap.error("-n must be at least 1")
    cmd, env = command(args)
    sys.stdout.flush()
    os.execvpe(cmd[0], cmd, env)


if __name__ == "__main__":
    main()
