"""The private Ray that spmd.init(backend="ray") starts without a cluster
(transports/ray/ray_private.py): lean (no autoscaler monitor, no dashboard API server; the
ranks ready without the compiler), and nothing of it
outlives its driver, which is killed here with SIGKILL and SIGTERM.
"""
import os
import select
import signal
import subprocess
import sys
import time

import pytest

pytest.importorskip("ray")

from spmd.transports.ray import ray_reaper  # noqa: E402
from paths import ROOT  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.timeout(120)]

DRIVER = """
import os, sys, time, numpy as np, spmd
rt = spmd.init(backend="ray", num_devices=2)
# ready to run, a rank has not loaded the compiler, nor the API (SPMD_IMPORT_LAZY): its
# program brings what it needs
loaded = rt.call_on(1, lambda: sorted(m for m in sys.modules if m.startswith(("spmd.", "llvmlite", "mpi4py"))))
heavy = [m for m in loaded if m.startswith(("spmd.compiler", "spmd.backends", "spmd.sharding", "llvmlite", "mpi4py",
                                            "spmd.api", "spmd.frontend", "spmd.eager", "spmd.jit"))]
assert "spmd.transports.ray.ray_communicator" in loaded and not heavy, heavy
mesh = spmd.Mesh((2,), ("x",))
f = spmd.jit(lambda v: v.sum(), in_shardings=mesh.sharding("x"))
assert float(f(np.arange(8.0))) == 28.0
print("READY", flush=True)
time.sleep(300)
"""


def _alive(noted):
    return {pid: cmd for pid, (start, cmd) in noted.items()
            if (ray_reaper.stat(pid) or (None, None))[1] == start}


def _cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_nothing_of_a_private_ray_outlives_its_killed_driver(sig):
    env = dict(os.environ, PYTHONPATH=ROOT, SPMD_BACKEND="ray", RAY_USAGE_STATS_ENABLED="0")
    env.pop("RAY_ADDRESS", None)
    p = subprocess.Popen([sys.executable, "-c", DRIVER], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=env)
    noted = {}
    try:
        line = p.stdout.readline()
        assert line.strip() == "READY", p.stderr.read() if p.poll() is not None else line
        # the runtime-env agent starts once the ranks are up, the dashboard agent never: a
        # stand-in sleeps in its place (ray_agent_later.py). Each process by its program,
        # the first words of its command (the raylet's names the agents' scripts further
        # on, and so does the stand-in's)
        deadline = time.monotonic() + 20
        while True:
            found = {}
            ray_reaper.note(p.pid, -1, found)
            noted = {pid: (start, _cmdline(pid)) for pid, start in found.items()}
            heads = {pid: " ".join(c.split()[:3]) for pid, (_, c) in noted.items()}
            agent = [pid for pid, h in heads.items() if "DashboardAgent" in h or "dashboard/agent.py" in h]
            stand_in = [pid for pid, (_, c) in noted.items() if "ray_agent_later.py" in heads[pid]
                        and " never " in c and "dashboard/agent.py" in c]
            env_agent = [pid for pid, h in heads.items() if "RuntimeEnvAgent" in h or "runtime_env/agent/main.py" in h]
            if env_agent or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        cmds = " | ".join(c[:150] for _, c in noted.values())
        ranks = [pid for pid, h in heads.items() if "RankActor" in h]
        # the processes of a Ray node, its log monitor, the runtime-env agent, rank 1's
        # actor (rank 0 runs in the driver: transports/ray/ray_driver_rank.py), and the reaper
        for part in ("gcs_server", "raylet", "ray_reaper.py", "log_monitor.py"):
            assert part in cmds, (part, cmds)
        assert not agent and len(stand_in) == 1 and len(env_agent) == 1 and len(ranks) == 1, cmds
        # the ranks and the log monitor run as any program does, the runtime env's agent
        # (a user's own tasks) below them, at 10
        while os.getpriority(os.PRIO_PROCESS, env_agent[0]) != 10 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert os.getpriority(os.PRIO_PROCESS, env_agent[0]) == 10
        monitor = [pid for pid, h in heads.items() if "log_monitor.py" in h]
        driver = os.getpriority(os.PRIO_PROCESS, p.pid)
        assert len(monitor) == 1 and os.getpriority(os.PRIO_PROCESS, monitor[0]) == driver, cmds
        assert [os.getpriority(os.PRIO_PROCESS, r) for r in ranks] == [driver]
        # lean: neither the autoscaler's monitor nor the dashboard's API server
        assert "autoscaler/_private/monitor.py" not in cmds and "dashboard/dashboard.py" not in cmds, cmds
        os.kill(p.pid, sig)
        p.wait(30)
        deadline = time.monotonic() + 30
        while _alive(noted) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _alive(noted), f"left running after the driver's {sig.name}: {_alive(noted)}"
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        for pid in _alive(noted):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        p.stdout.close()
        p.stderr.close()


def test_a_private_ray_starts_without_a_warning():
    """spmd.init(backend="ray") says nothing of Ray's own: not the token-authentication
    notice Ray logs on every new local cluster (authentication stays on), nor its INFO
    line that it started."""
    env = dict(os.environ, PYTHONPATH=ROOT, RAY_USAGE_STATS_ENABLED="0")
    env.pop("RAY_ADDRESS", None)
    env.pop("RAY_AUTH_MODE", None)
    code = ("import numpy as np, spmd; spmd.init(backend='ray', num_devices=2); "
            "mesh = spmd.Mesh((2,), ('x',)); "
            "print(float(spmd.jit(lambda v: v.sum(), in_shardings=mesh.sharding('x'))(np.arange(4.0))))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=100)
    assert p.returncode == 0 and p.stdout.strip() == "6.0", p.stderr
    assert "Token authentication" not in p.stderr and "Started a local Ray" not in p.stderr, p.stderr
    assert "WARNING" not in p.stderr, p.stderr


def test_the_runtime_env_agent_is_given_its_port_and_still_serves():
    """The raylet of a private Ray is given the runtime-env agent's port (chosen and written
    by spmd before the raylet starts, so the node comes up without waiting for the agent
    to import its modules), and starts its Python workers through spmd's setup script;
    the agent takes that port and serves it: a task with a runtime_env gets its
    environment (its worker set up by Ray's script)."""
    env = dict(os.environ, PYTHONPATH=ROOT, RAY_USAGE_STATS_ENABLED="0")
    env.pop("RAY_ADDRESS", None)
    code = """
import os, socket, ray, spmd
spmd.init(backend="ray", num_devices=1)
from ray._private import ray_constants
node = ray._private.worker.global_worker.node
port = node.runtime_env_agent_port
raylet = node.all_processes[ray_constants.PROCESS_TYPE_RAYLET][0].process.args
assert port > 0 and f"--runtime_env_agent_port={port}" in raylet, (port, raylet)
# its Python workers are started by spmd's setup script (Ray's for those with a runtime env)
command = [a for a in raylet if a.startswith("--python_worker_command=")]
assert command and "spmd/transports/ray/ray_worker_setup.py" in command[0], raylet
@ray.remote(num_cpus=0, runtime_env={"env_vars": {"SPMD_TEST_VALUE": "42"}})
def value():
    return os.environ.get("SPMD_TEST_VALUE")
assert ray.get(value.remote(), timeout=90) == "42"
s = socket.socket()
try:
    s.bind((node.node_ip_address, port))
    taken = False
except OSError:
    taken = True
assert taken, "the agent does not listen on the port the raylet was given"
print("OK")
"""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=110)
    assert p.returncode == 0 and p.stdout.strip().endswith("OK"), p.stderr[-3000:]


def test_a_worker_with_nothing_to_set_up_is_started_directly():
    """ray_worker_setup: a Python worker whose runtime-env context is empty is exec'd as
    it is (its own arguments); any other goes through Ray's setup script."""
    from spmd.transports.ray.ray_worker_setup import plain_worker
    worker = ["/ray/default_worker.py", "--node-ip-address=127.0.0.2", "--worker-launch-time-ms=1"]
    empty = '--serialized-runtime-env-context={"command_prefix": [], "env_vars": {}, ' \
            f'"py_executable": "{sys.executable}", "override_worker_entrypoint": null, "java_jars": []}}'
    assert plain_worker(worker + ["--language=PYTHON"]) == worker
    assert plain_worker(worker[:1] + [empty] + worker[1:] + ["--language=PYTHON"]) == worker
    assert plain_worker(worker + ['--serialized-runtime-env-context={}', "--language=PYTHON"]) == worker
    for other in ['--serialized-runtime-env-context={"env_vars": {"A": "1"}}',
                  '--serialized-runtime-env-context={"py_executable": "/other/python"}',
                  '--serialized-runtime-env-context={"command_prefix": ["conda", "activate", "x"]}',
                  '--serialized-runtime-env-context={"override_worker_entrypoint": "/w.py"}',
                  '--serialized-runtime-env-context={"new_field": 1}',
                  '--serialized-runtime-env-context=not json']:
        assert plain_worker(worker + [other, "--language=PYTHON"]) is None, other
    assert plain_worker(worker + ["--language=JAVA"]) is None
    assert plain_worker(worker) is None                                  # no language said
    assert plain_worker(worker + ["--language", "PYTHON"]) is None       # another spelling


def test_a_private_rays_raylet_retries_its_store_often_with_rays_patience():
    """The raylet's first connection to its object store (started a moment before, on a
    thread of its own) can miss it; Ray retries a second later, which half the starts
    on 2 cores paid. A private Ray retries every 20 ms, as long in all as Ray's own
    default (10 tries a second apart), and a setting the caller gives wins."""
    from ray._raylet import Config

    from spmd.transports.ray.ray_private import system_config
    config = system_config(2, 2)
    every, tries = config["raylet_client_connect_timeout_milliseconds"], config["raylet_client_num_connect_attempts"]
    assert every <= 20
    assert every * tries >= Config.raylet_client_connect_timeout_milliseconds() * Config.raylet_client_num_connect_attempts()
    assert system_config(2, 2, {"raylet_client_connect_timeout_milliseconds": 500})[
        "raylet_client_connect_timeout_milliseconds"] == 500
    assert system_config(2, 2)["worker_niceness"] == 0


def test_a_private_ray_starts_a_worker_per_rank_actor_and_no_more():
    """The ranks but the driver's own (rank 0) each need a worker; Ray would prestart one
    per CPU, and its first driver waits for all of them to register: on 2 cores an idle
    worker more, importing ray, held spmd.init for it. n=1 needs none."""
    env = dict(os.environ, PYTHONPATH=ROOT, RAY_USAGE_STATS_ENABLED="0")
    env.pop("RAY_ADDRESS", None)
    env.pop("SPMD_RAY_DRIVER_RANK", None)
    for n in (1, 3):
        code = (f"import time, spmd; spmd.init(backend='ray', num_devices={n}); print('READY', flush=True); "
                f"time.sleep(300)")
        p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env=env)
        try:
            line = p.stdout.readline()
            assert line.strip() == "READY", p.stderr.read() if p.poll() is not None else line
            time.sleep(1)               # a worker started late would be there by now
            found = {}
            ray_reaper.note(p.pid, -1, found)
            heads = [_cmdline(pid).split(" ")[0] for pid in found]
            workers = [h for h in heads if h.startswith("ray::") and not h.endswith("Agent")] + \
                [h for h in heads if "default_worker.py" in h]
            assert len(workers) == n - 1, heads
        finally:
            p.kill()
            p.wait()
            p.stdout.close()
            p.stderr.close()


def test_a_lazy_import_of_spmd_loads_the_whole_api_at_its_first_use():
    """SPMD_IMPORT_LAZY=1 (a rank actor's worker): `import spmd` loads no API module; the
    first use of any public name loads all of it, eager mode included, as `import spmd`
    does otherwise."""
    code = """
import sys, numpy as np, spmd
assert not any(m.startswith(("spmd.api", "spmd.frontend", "spmd.eager", "spmd.jit")) for m in sys.modules)
from spmd import jit
assert "spmd.eager" in sys.modules and spmd.Mesh and spmd.random.key and spmd.SpmdError
mesh = spmd.Mesh((2,), ("x",))
a = spmd.device_put(np.arange(4.0), mesh.sharding("x"))
print(float(jit(lambda v: v.sum())(a)), float(np.sum(a * 2)))
"""
    env = dict(os.environ, PYTHONPATH=ROOT, SPMD_IMPORT_LAZY="1", SPMD_BACKEND="local")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=100)
    assert p.returncode == 0 and p.stdout.split() == ["6.0", "12.0"], p.stderr


def test_an_agent_started_later_waits_for_the_word_then_becomes_its_command(tmp_path):
    """ray_agent_later.py, in front of an agent's command: nothing of the command runs
    until the go file exists; then it runs as that process (exec), at the niceness given."""
    go, out = tmp_path / "go", tmp_path / "out"
    command = [sys.executable, "-c", f"import os; open({str(out)!r}, 'w').write(f'{{os.getpid()}} {{os.nice(0)}}')"]
    later = os.path.join(ROOT, "spmd", "transports", "ray", "ray_agent_later.py")
    p = subprocess.Popen([sys.executable, "-S", later, str(go), "7"] + command)
    try:
        time.sleep(1.0)
        assert p.poll() is None and not out.exists()       # still waiting, the command not run
        go.touch()
        assert p.wait(30) == 0
        pid, nice = out.read_text().split()
        assert int(pid) == p.pid and int(nice) == 7
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_what_a_rank_actor_prints_reaches_the_driver():
    """The log monitor of a private Ray forwards what an actor printed while the driver
    runs (test_launcher.py's spmd run test: also when the program ends right after)."""
    env = dict(os.environ, PYTHONPATH=ROOT, RAY_USAGE_STATS_ENABLED="0")
    env.pop("RAY_ADDRESS", None)
    code = """
import time, spmd
rt = spmd.init(backend="ray", num_devices=2)
rt.call_on(1, lambda: print("from rank one", flush=True))
time.sleep(300)
"""
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, env=env)
    seen = []
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and p.poll() is None:
            ready, _, _ = select.select([p.stdout], [], [], 1.0)
            if ready:
                seen.append(p.stdout.readline())
                if "from rank one" in seen[-1]:
                    break
        assert seen and "from rank one" in seen[-1], "".join(seen)[-3000:]
    finally:
        p.kill()
        p.wait()
        p.stdout.close()
