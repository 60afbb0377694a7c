"""How a private Ray's raylet starts its agents: run as a script (not imported) by the
raylet, in front of the agent's own command (transports/ray/ray_private.py says so),

    python -S ray_agent_later.py GO_FILE NICENESS AGENT_COMMAND...

It waits until GO_FILE exists (the driver writes it once its rank actors are up), or
WAIT_SECONDS have passed, then becomes the agent (exec: the raylet's pid for it stays
right), at CPU priority NICENESS. Each agent imports ray and its own modules, ~1 s of CPU
each on a 2-core machine, while the rank actor's worker imports ray too, and the driver's
ray.init waits for that worker: started after, they cost the start nothing. Nothing
spmd runs needs them meanwhile (their ports are written before the raylet starts).

NICENESS "never": the agent is not started at all; this process stands in its place,
asleep, until the raylet goes (the raylet watches its agents' processes, and ends with
them).

It exits instead if the raylet that started it is gone. Only the standard library.
"""
import os
import sys
import time

WAIT_SECONDS = 30.0
POLL_SECONDS = 0.05
NEVER = "never"


def stand_in(parent):
    """Sleep until the raylet (parent) is gone (it kills its agents when it stops; the
    reaper of a private Ray kills what is left), looking once a second."""
    while os.getppid() == parent:
        time.sleep(1.0)


def main(args):
    go, niceness, command = args[0], args[1], args[2:]
    parent = os.getppid()
    if niceness == NEVER:
        return stand_in(parent)
    deadline = time.monotonic() + WAIT_SECONDS
    while not os.path.exists(go) and time.monotonic() < deadline:
        if os.getppid() != parent:
            return
        time.sleep(POLL_SECONDS)
    try:
        os.setpriority(os.PRIO_PROCESS, 0, int(niceness))
    except OSError:
        pass
    os.execv(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])
