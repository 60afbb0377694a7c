"""The `spmd` command.

    spmd run -n N [--backend local|mpi|ray] [--hosts h1,h2[:slots] | --hostfile FILE] [--check]
             script.py args...
    spmd doctor [--hosts h1,h2 | --hostfile FILE]

The script is the same in every case; `spmd run` sets SPMD_BACKEND and SPMD_NUM_DEVICES
and spmd.init() (or the first jit call) picks them up.

local: runs the script in this Python with N devices (threads).
mpi:   runs it under `mpiexec -n N` (transports/mpi/mpi_launch.py); each process is a rank; output
       of ranks other than 0 is prefixed with "[rank N] ". With --hosts / --hostfile
       the ranks go to the hosts in blocks (launcher/hosts.py), started over ssh.
ray:   runs the script here as the Ray driver with N rank actors. It joins the cluster
       named by RAY_ADDRESS (e.g. RAY_ADDRESS=auto on a node of a `ray start` cluster),
       or starts a private single-node Ray; the actors' output is prefixed "(rank N ...)".
       With --hosts / --hostfile it starts a Ray cluster on those hosts over ssh for the
       job, and stops it afterwards (transports/ray/ray_placement.py).

--hosts defaults the backend to mpi. Before starting ranks on other hosts, `spmd run`
checks that every host answers over ssh; a host that does not is named with the ranks
it was to run. --check runs all of `spmd doctor`'s checks first (launcher/doctor.py).
"""
from __future__ import annotations

import argparse
import os
import sys

from .hosts import HostsError, describe, parse_hosts, place, ranks_text, read_hostfile
from ..transports.mpi.mpi_launch import mpiexec_command

BACKENDS = ("local", "mpi", "ray")
RANK_PARENT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "rank.py")


def command(args, placement=None) -> tuple[list, dict]:
    """The command line and environment that run the script (local and mpi)."""
    env = dict(os.environ, SPMD_BACKEND=args.backend, SPMD_NUM_DEVICES=str(args.n))
    py = [sys.executable, args.script, *args.args]
    if args.backend == "mpi":
        # run as a file in isolated mode: the parent imports neither spmd nor numpy
        wrapped = [sys.executable, "-I", RANK_PARENT, args.script, *args.args]
        return mpiexec_command(args.n, wrapped, placement, env), env
    return py, env


def host_list(args):
    """[(host, slots)] from --hosts or --hostfile, or None."""
    if args.hosts and args.hostfile:
        raise HostsError("give --hosts or --hostfile, not both")
    if args.hosts:
        return parse_hosts(args.hosts)
    if args.hostfile:
        return read_hostfile(args.hostfile)
    return None


def _add_hosts(p):
    p.add_argument("--hosts", help="hosts to run on: h1,h2 or h1:2,h2:2 (host:slots)")
    p.add_argument("--hostfile", help="a file of hosts, one a line: host, host:slots or host slots=N")


def main(argv=None):
    ap = argparse.ArgumentParser(prog="spmd", description="Run an spmd program on N devices.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    run = sub.add_parser("run", help="run a script on N devices")
    run.add_argument("-n", type=int, required=True, help="number of devices (ranks)")
    run.add_argument("--backend", default=None, choices=BACKENDS,
                     help="local (default), or mpi (the default with --hosts), or ray")
    _add_hosts(run)
    run.add_argument("--check", action="store_true", help="check every host first (spmd doctor)")
    run.add_argument("script")
    run.add_argument("args", nargs=argparse.REMAINDER)
    doc = sub.add_parser("doctor", help="check this machine's install; with --hosts, the hosts before a job: "
                                        "reachable, same versions, bandwidth")
    _add_hosts(doc)
    doc.add_argument("--calibrate", action="store_true",
                     help="measure this machine's compute, memory and collective rates for the cost model "
                          "(spmd.AUTO, lowered.cost()) and store them")
    doc.add_argument("--devices", type=int, default=4, help="with --calibrate: local devices to measure over")
    args = ap.parse_args(argv)
    parser = run if args.cmd == "run" else doc
    try:
        hosts = host_list(args)
    except HostsError as e:
        parser.error(str(e))
    if args.cmd == "doctor":
        if args.calibrate:
            # in a process of its own: calibration starts local devices
            import subprocess
            sys.exit(subprocess.call([sys.executable, "-m", "spmd.jit.calibrate", "--devices", str(args.devices)]))
        if hosts is None:
            from .doctor import local_doctor
            sys.exit(local_doctor())
        from .doctor import doctor
        sys.exit(doctor([h for h, _ in hosts]))
    if args.n < 1:
        run.error("-n must be at least 1")
    args.backend = args.backend or ("mpi" if hosts else "local")
    placement = None
    if hosts is not None:
        if args.backend == "local":
            run.error("--hosts / --hostfile need --backend mpi or ray (local runs threads in this process)")
        try:
            placement = place(hosts, args.n)
        except HostsError as e:
            run.error(str(e))
        _check_hosts(placement, full=args.check)
    elif args.check:
        run.error("--check needs --hosts or --hostfile")
    sys.stdout.flush()
    if args.backend == "ray" and placement is not None:
        from ..transports.ray.ray_hosts import run_on_hosts
        sys.exit(run_on_hosts(placement, args))
    cmd, env = command(args, placement)
    if placement is not None:
        from ..transports.mpi.mpi_launch import run_on_hosts
        sys.exit(run_on_hosts(cmd, env, placement))
    os.execvpe(cmd[0], cmd, env)


def _check_hosts(placement, full):
    """Stop before starting anything if a host cannot run its ranks."""
    from .doctor import doctor
    from .ssh import unreachable
    names = [h for h, rs in placement if rs]
    if full:
        if doctor(names):
            raise SystemExit("spmd run: the checks above failed; nothing was started")
        return
    bad = unreachable(names)
    if bad:
        ranks = dict(placement)
        lines = [f"spmd run: host {h} ({ranks_text(ranks[h])}) cannot be reached: {why}"
                 for h, why in bad]
        raise SystemExit("\n".join(lines) + f"\nspmd run: nothing was started (placement: {describe(placement)}); "
                         "check that the host is up and that `ssh HOST true` works without a password")


if __name__ == "__main__":
    main()
