"""A private Ray for this process (what `spmd run --backend ray` and
spmd.init(backend="ray") start when no cluster is given): started lean, and reaped
when this process dies, however it dies.

    start(**ray_init_kwargs)      ray.init(address="local", ...) without the autoscaler's
                                  monitor and the dashboard's API server, with a reaper
    stop()                        after ray.shutdown(): the reaper kills what is left, and exits

Start-up: of ray.init's ~4.4 s on a quiet 2-core machine, ~1.2 s is spent waiting for
the API server (the dashboard's back end, started even with include_dashboard=False)
and the autoscaler's monitor competes for the cores meanwhile; a private single-node
Ray serves neither a dashboard, jobs nor autoscaling, so they are not started. Ray has
no option for either in ray.init, so its two internal switches are set for the length
of the call (RayParams.no_monitor, Node.start_api_server); on a Ray without them the
start is the ordinary one.

Reaping: runtime/ray_reaper.py, started first in a session of its own, holds the reading
end of a pipe whose writing end only this process has; the kernel closes it when this
process ends (SIGKILL included), and the reaper then kills every Ray process descended
from this one (Ray's fate-sharing already ends the GCS and raylet with the driver, not
the raylet's agents).
"""
from __future__ import annotations

import contextlib
import os
import subprocess
import sys

_REAPER = None


def start(**init_kwargs):
    import ray
    global _REAPER
    if _REAPER is None:
        _REAPER = subprocess.Popen([sys.executable, "-S", os.path.join(os.path.dirname(__file__), "ray_reaper.py"),
                                    str(os.getpid())], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL, start_new_session=True)
    with _lean_head():
        ray.init(address="local", include_dashboard=False, **init_kwargs)


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
        from ray._private import node, parameter
        params_init, api_server = parameter.RayParams.__init__, node.Node.start_api_server
    except (ImportError, AttributeError):
        yield
        return

    def lean_params(self, *args, **kwargs):
        params_init(self, *args, **kwargs)
        self.no_monitor = True

    def no_api_server(self, **kwargs):
        self._webui_url = None

    parameter.RayParams.__init__, node.Node.start_api_server = lean_params, no_api_server
    try:
        yield
    finally:
        parameter.RayParams.__init__, node.Node.start_api_server = params_init, api_server
