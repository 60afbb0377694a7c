"""The `spmd` command.

    spmd run -n N [--backend local|mpi|ray] script.py args...

The script is the same in every case; `spmd run` sets SPMD_BACKEND and SPMD_NUM_DEVICES
and spmd.init() (or the first jit call) picks them up.

local: runs the script in this Python with N devices (threads).
mpi:   runs it under `mpiexec -n N` (launcher/mpi.py); each process is a rank; output
       of ranks other than 0 is prefixed with "[rank N] ".
ray:   runs the script here as the Ray driver with N rank actors. It joins the cluster
       named by RAY_ADDRESS (e.g. RAY_ADDRESS=auto on a node of a `ray start` cluster),
       or starts a private single-node Ray; the actors' output is prefixed "(rank N ...)".
"""
from __future__ import annotations

import argparse
import os
import sys

from .mpi import find_mpiexec, mpiexec_command  # noqa: F401 - find_mpiexec is used by tests and benchmarks

BACKENDS = ("local", "mpi", "ray")


def command(args) -> tuple[list, dict]:
    """The command line and environment that run the script."""
    env = dict(os.environ, SPMD_BACKEND=args.backend, SPMD_NUM_DEVICES=str(args.n))
    py = [sys.executable, args.script, *args.args]
    if args.backend == "mpi":
        return mpiexec_command(args.n, py), env
    return py, env


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
        run.error("-n must be at least 1")
    cmd, env = command(args)
    sys.stdout.flush()
    os.execvpe(cmd[0], cmd, env)


if __name__ == "__main__":
    main()
