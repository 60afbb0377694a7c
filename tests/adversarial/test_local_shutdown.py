"""The local backend shuts down cleanly when a step is interrupted (issue #16): a
caught Ctrl-C or a SIGTERM handler that exits must not leave the process hanging at
exit with device threads abandoned inside BLAS."""
import os
import subprocess
import sys

import pytest
from paths import ROOT


SCRIPT = r"""
import faulthandler, os, signal, sys, threading, numpy as np, spmd
faulthandler.dump_traceback_later(30, exit=True)    # a hang fails with every thread's stack
mesh = spmd.Mesh((4,), ("x",))
mode = sys.argv[1]
if mode == "term":
    def on_term(*_):
        raise SystemExit("terminated")
    signal.signal(signal.SIGTERM, on_term)

def step(a, b):
    for _ in range(10):
        a = np.tanh(a @ b)
    return a.sum()

f = spmd.jit(step, in_shardings=(mesh.sharding("x", None), mesh.sharding(None, None)))
a, b = np.random.rand(768, 768), np.random.rand(768, 768) / 768
f(a, b)
print("warm", flush=True)
threading.Timer(0.2, lambda: os.kill(os.getpid(), signal.SIGINT if mode == "int" else signal.SIGTERM)).start()
try:
    for i in range(10000):
        f(a, b)
except KeyboardInterrupt:
    print("caught", flush=True)
    f(a, b)                       # the runtime still works
print("leaving", flush=True)
"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode, rc", [("int", 0), ("term", 1)])
def test_interrupted_step_exits_cleanly(mode, rc):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("SPMD_BACKEND", None)
    p = subprocess.run([sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True, timeout=40, env=env)
    assert p.returncode == rc, (p.stdout, p.stderr)
    assert "warm" in p.stdout
    if mode == "int":
        assert "caught" in p.stdout and "leaving" in p.stdout
    else:
        assert "terminated" in p.stderr
