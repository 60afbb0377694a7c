"""A private Ray for this process (what `spmd run --backend ray` and
spmd.init(backend="ray") start when no cluster is given): started lean, and reaped
when this process dies, however it dies.

    start(ranks, num_cpus, **kw)      ray.init(address="local", num_cpus=num_cpus, ...) lean
                                      (below), with a reaper; the workers of `ranks` rank actors
                                      (the ranks but the driver's own) start with it, no more
    stop()                            after ray.shutdown(): the reaper kills what is left, and exits

Start-up: a private single-node Ray serves neither a dashboard, jobs, metrics nor
autoscaling, and on a small machine every process Ray starts competes for the cores
the ranks are starting on. So:
- no autoscaler monitor and no dashboard API server (RayParams.no_monitor,
  Node.start_api_server): the API server alone held ray.init ~1.2 s;
- the dashboard agent minimal (what Ray runs when its dashboard's packages are not
  installed: no metrics or HTTP servers), and its ports written as a minimal agent
  writes them (-1, none) before the raylet starts: the raylet waits for those ports
  before it registers its node, and the agent, importing its modules, takes 1-3 s to
  write them on a loaded 2-core machine. The runtime-env agent's port is chosen here
  (a free one) and given to the raylet and the agent, and written first too: the
  raylet then starts the workers and registers its node without waiting ~1 s for the
  agent's imports (the agent, which serves only runtime_envs, which a rank actor has
  none of, takes that port when it is up). The check for the dashboard's packages is skipped too: it
  imports aiohttp in the driver (0.5 s) before the raylet starts;
- a Python worker with no runtime env (every rank actor's) is exec'd by spmd's
  ray_worker_setup.py, which needs only the standard library, instead of Ray's
  setup_worker.py, which imports ray (~0.5 s of CPU) before the worker imports it
  again; a worker with a runtime env still goes through Ray's script;
- the runtime-env agent starts once the rank actors are up (`ranks_up`; its command is
  run through spmd's ray_agent_later.py, which waits for the word), and the dashboard
  agent not at all: each imports ray and its modules, 1-2 s of CPU each on a 2-core
  machine, while the rank actor's worker imports ray too and the driver's ray.init
  waits for that worker to register (that worker's start took 2.4 s of a 2-rank start
  with them under a load of 3, 1.05 s without them under a load of 4). Nothing of a
  start needs them: their ports are written before. The dashboard agent, without the
  dashboard, serves nothing spmd uses (no metrics, no state API): its ~2 s of CPU would
  be taken from the ranks' first steps. The runtime-env agent, which serves only a
  user's own tasks with a runtime env (a rank actor has none), runs at nice 10. Ray's
  log monitor starts with the node, at the priority of any program: it forwards what
  the actors print, and one started later, or at a low priority, lost a short
  program's last lines at its exit;
- one worker process per rank actor, no more (rank 0 runs in the driver), all at once
  (`worker_maximum_startup_concurrency`), not one at a time per core: Ray prestarts a
  worker per CPU and holds its first driver's ray.init until all have registered (an
  idle worker importing ray cost a 2-rank start on 2 cores ~1-2 s); with the raylet
  when every CPU has a rank (`enable_worker_prestart`); and at the priority of any
  program (`worker_niceness` 0; Ray's 15 left them a sliver of a busy machine, to
  start and then to compute and communicate).
On a quiet 2-core machine spmd.init(backend="ray", num_devices=2) takes a median 2.8 s
with all of these (3.7 s with the agents started with the node and lowered from a
thread); under a load of ~5, num_devices=4 ~5 s (three workers import ray). Ray has no
option in ray.init for the API server, the monitor, the agents' ports or commands, so
its internal switches are set for the length of the call; on a Ray without them the
start is the ordinary one.

Reaping: transports/ray/ray_reaper.py, started first in a session of its own, holds the reading
end of a pipe whose writing end only this process has; the kernel closes it when this
process ends (SIGKILL included), and the reaper then kills every Ray process descended
from this one (Ray's fate-sharing already ends the GCS and raylet with the driver, not
the raylet's agents).
"""
from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys

_REAPER = None
# the file whose existence tells the waiting agents (ray_agent_later.py) to start
_GO = None
# each agent's CPU priority, by Ray's name for it ("never": not started)
AGENTS = {"dashboard_agent": "never", "runtime_env_agent": 10}


def start(ranks, num_cpus, **init_kwargs):
    import ray
    global _REAPER
    if _REAPER is None:
        _REAPER = subprocess.Popen([sys.executable, "-S", os.path.join(os.path.dirname(__file__), "ray_reaper.py"),
                                    str(os.getpid())], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL, start_new_session=True)
    config = system_config(ranks, num_cpus, init_kwargs.pop("_system_config", None))
    # Ray turns token authentication on for a new local cluster, and warns that it did on
    # every start: it stays on, the warning is dropped (only that one message)
    logging.getLogger("ray._private.authentication.authentication_token_setup").addFilter(_quiet_auth_default)
    # ("Started a local Ray instance." is Ray's INFO line: the start is spmd's business)
    init_kwargs.setdefault("logging_level", logging.WARNING)
    with _lean_head():
        ray.init(address="local", include_dashboard=False, num_cpus=num_cpus, _system_config=config, **init_kwargs)


def system_config(ranks, num_cpus, given=None) -> dict:
    """The Ray settings of a private Ray for `ranks` rank actors on num_cpus CPUs (those
    `given` win)."""
    config = dict(given or {})
    # Ray prestarts a worker per CPU of the node, and the first driver's ray.init waits
    # until they have registered; at most `worker_maximum_startup_concurrency` of them.
    # So: as many as there are rank actors (rank 0 in the driver needs none: a worker
    # more imported ray, ~1 s of CPU on a loaded 2-core machine, and held ray.init for
    # it), started with the node when every CPU has a rank, else when the driver connects
    if ranks < 1:
        config.setdefault("prestart_worker_first_driver", False)
    elif num_cpus <= ranks:
        config.setdefault("enable_worker_prestart", True)
    config.setdefault("worker_maximum_startup_concurrency", max(1, int(ranks)))
    # Ray runs its workers at nice 15, below its own processes; here the workers are the
    # ranks, the program the user runs, as an MPI rank is
    config.setdefault("worker_niceness", 0)
    # the raylet connects to its object store, started on a thread of its own a moment
    # before, and retries a second later when it was not there yet: half the starts took
    # a second more. Every 20 ms instead, with the same ten seconds' patience in all
    config.setdefault("raylet_client_connect_timeout_milliseconds", 20)
    config.setdefault("raylet_client_num_connect_attempts", 500)
    return config


def ranks_up():
    """The rank actors are up: the raylet's agents start now (what the module's
    docstring says); a no-op when this process started no private Ray, or already said so."""
    global _GO
    go, _GO = _GO, None
    if go is not None:
        with open(go, "w"):
            pass


def _free_port(ip):
    """A port nobody listens on now (the agent binds it a moment later)."""
    import socket
    with socket.socket() as s:
        s.bind((ip, 0))
        return s.getsockname()[1]


def _quiet_auth_default(record) -> bool:
    return not record.getMessage().startswith("Token authentication is enabled for this Ray cluster")


def stop(timeout=10.0):
    """The reaper kills the Ray processes still running (after ray.shutdown) and exits."""
    global _REAPER
    reaper, _REAPER = _REAPER, None
    if reaper is None:
        return
    reaper.stdin.close()
    try:
        reaper.wait(timeout)
    except subprocess.TimeoutExpired:
        reaper.kill()
        reaper.wait()


@contextlib.contextmanager
def _lean_head():
    try:
        from ray._private import node, parameter, services, utils
        from ray._raylet import (DASHBOARD_AGENT_LISTEN_PORT_NAME, METRICS_AGENT_PORT_NAME,
                                 METRICS_EXPORT_PORT_NAME, RUNTIME_ENV_AGENT_PORT_NAME, persist_port)
        switches = (parameter.RayParams, "__init__"), (node.Node, "start_api_server"), \
            (utils, "get_dashboard_dependency_error"), (services, "_build_python_executable_command_memory_profileable")
        saved = [getattr(obj, name) for obj, name in switches]
    except (ImportError, AttributeError):
        yield
        return
    params_init, python_command = saved[0], saved[3]

    def lean_params(self, *args, **kwargs):
        params_init(self, *args, **kwargs)
        self.no_monitor = True
        if self.setup_worker_path is None:       # a worker is exec'd without importing ray first
            self.setup_worker_path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ray_worker_setup.py")
        if not self.runtime_env_agent_port:
            self.runtime_env_agent_port = _free_port(self.node_ip_address or "127.0.0.1")

    def no_api_server(self, **kwargs):
        # called once the GCS is up and before the raylet starts: the ports a minimal
        # dashboard agent writes, written first, so that the raylet need not wait for it
        self._webui_url = None
        for port in (METRICS_AGENT_PORT_NAME, METRICS_EXPORT_PORT_NAME, DASHBOARD_AGENT_LISTEN_PORT_NAME):
            persist_port(self.get_session_dir_path(), self.node_id, port, -1)
        if self._ray_params.runtime_env_agent_port:
            persist_port(self.get_session_dir_path(), self.node_id, RUNTIME_ENV_AGENT_PORT_NAME,
                         self._ray_params.runtime_env_agent_port)

    def no_dashboard_packages():
        return ImportError("a private Ray of spmd runs the dashboard agent minimal")

    def agent_later(component, session_dir, *args, **kwargs):
        # an agent's command (its script and arguments follow) waits for ranks_up
        global _GO
        command = python_command(component, session_dir, *args, **kwargs)
        if component not in AGENTS:
            return command
        _GO = os.path.join(session_dir, "spmd_ranks_up")
        later = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ray_agent_later.py")
        return [sys.executable, "-S", later, _GO, str(AGENTS[component])] + command

    for (obj, name), value in zip(switches, (lean_params, no_api_server, no_dashboard_packages, agent_later)):
        setattr(obj, name, value)
    try:
        yield
    finally:
        for (obj, name), value in zip(switches, saved):
            setattr(obj, name, value)
