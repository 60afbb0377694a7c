"""An uncaught error prints the user's frames, not spmd's (spmd/tracebacks.py): locally,
on a failing MPI rank, and after Ctrl-C; SPMD_TRACEBACK=full prints every frame."""
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import spmd
from spmd.transports.mpi.mpi_runtime import failure_report
from spmd.tracebacks import HIDDEN_NOTE, user_traceback
from paths import ROOT


def bad(x):
    raise ValueError("bad on purpose")          # the user's line


def caught(fn):
    try:
        fn()
    except Exception as e:                      # noqa: BLE001
        return type(e), e, e.__traceback__
    raise AssertionError("did not raise")


def spmd_frames(text):
    return [ln for ln in text.splitlines() if ln.strip().startswith("File") and os.sep + "spmd" + os.sep in ln]


def test_a_users_error_inside_jit_ends_at_the_users_line(monkeypatch):
    monkeypatch.delenv("SPMD_TRACEBACK", raising=False)
    exc = caught(lambda: spmd.jit(lambda x: bad(x) + 1)(np.ones(4)))
    text = user_traceback(*exc)
    assert "in bad" in text and 'raise ValueError("bad on purpose")' in text
    assert "ValueError: bad on purpose" in text
    assert spmd_frames(text) == [], text
    assert text.endswith(HIDDEN_NOTE)
    # Python's own traceback has spmd's frames between the user's; full keeps them
    assert spmd_frames("".join(__import__("traceback").format_exception(*exc)))
    monkeypatch.setenv("SPMD_TRACEBACK", "full")
    full = user_traceback(*exc)
    assert spmd_frames(full) and HIDDEN_NOTE not in full


def test_chained_exceptions_are_trimmed_too(monkeypatch):
    monkeypatch.delenv("SPMD_TRACEBACK", raising=False)

    def wrapped(x):
        try:
            return bad(x)
        except ValueError as e:
            raise RuntimeError("while tracing") from e
    text = user_traceback(*caught(lambda: spmd.jit(wrapped)(np.ones(4))))
    assert "direct cause" in text and "ValueError: bad on purpose" in text and "RuntimeError: while tracing" in text
    assert spmd_frames(text) == [], text


def test_a_failing_mpi_rank_reports_the_users_frames(monkeypatch):
    monkeypatch.delenv("SPMD_TRACEBACK", raising=False)
    text = failure_report(*caught(lambda: spmd.jit(lambda x: bad(x))(np.ones(4))), rank=3)
    assert text.startswith("spmd: rank 3 failed:\n")
    assert "in bad" in text and spmd_frames(text) == [], text


def run_local(code, env=None):
    e = {k: v for k, v in os.environ.items() if k not in ("SPMD_BACKEND", "SPMD_TRACEBACK")}
    e.update(PYTHONPATH=ROOT, **(env or {}))
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=e)


SCRIPT = """
import numpy as np, spmd
def bad(x):
    raise ValueError("bad on purpose")
spmd.jit(lambda x: bad(x))(np.ones(4))
"""


@pytest.mark.timeout(120)
def test_a_local_run_prints_the_users_frames_only():
    p = run_local(SCRIPT)
    _, err = p.communicate(timeout=100)
    assert p.returncode == 1
    assert "ValueError: bad on purpose" in err and 'line 4, in bad' in err, err
    assert spmd_frames(err) == [], err
    p = run_local(SCRIPT, {"SPMD_TRACEBACK": "full"})
    _, err = p.communicate(timeout=100)
    assert p.returncode == 1 and spmd_frames(err), err


@pytest.mark.timeout(120)
def test_ctrl_c_locally_is_still_one_traceback_and_sigint():
    p = run_local("import numpy as np, spmd\nf = spmd.jit(lambda x: x.sum())\nf(np.ones(8))\n"
                  "print('ready', flush=True)\nwhile True:\n    f(np.ones(8))\n")
    assert p.stdout.readline().strip() == "ready"
    time.sleep(0.3)
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=60)
    assert p.returncode == -signal.SIGINT, err        # a shell shows 130
    assert err.count("KeyboardInterrupt") == 1 and spmd_frames(err) == [], err
