"""README.md's one-script example, taken from the README itself, runs all three ways it
says: `python x.py` (local threads), `mpiexec -n N python x.py` and `spmd run -n N
--backend ray x.py`, printing the same lines in the same order: the step's
spmd.debug.print once per call, then the script's own print on process 0."""
import os
import re
import subprocess
import sys

import pytest

from paths import ROOT
from spmd.transports.mpi.mpi_launch import find_mpiexec

N = 2                    # devices (ranks): the machine has 2 cores


def readme_script() -> str:
    text = open(os.path.join(ROOT, "README.md")).read()
    section = text.split("## One script for N local devices, N MPI ranks or N Ray actors", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


@pytest.fixture(scope="module")
def script(tmp_path_factory):
    path = tmp_path_factory.mktemp("readme") / "regress.py"
    path.write_text(readme_script())
    return str(path)


def run(cmd, **env):
    e = dict(os.environ, PYTHONPATH=ROOT, **env)
    for k in ("SPMD_BACKEND", "RAY_ADDRESS"):
        if k not in env:
            e.pop(k, None)
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=e)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout.splitlines()


def check(lines):
    """Five steps, each: the debug print from inside the step, then the loss; the loss falls."""
    assert len(lines) == 10, lines
    assert all(re.fullmatch(r"  \|grad\| = \d+\.\d{4}", ln) for ln in lines[0::2]), lines
    assert [ln.split(":")[0] for ln in lines[1::2]] == [f"step {i}" for i in range(5)], lines
    losses = [float(ln.split()[-1]) for ln in lines[1::2]]
    assert all(b < a for a, b in zip(losses, losses[1:])), losses


@pytest.fixture(scope="module")
def local(script):
    return run([sys.executable, script], SPMD_NUM_DEVICES=str(N))


def test_readme_script_as_python(local):
    check(local)


@pytest.mark.mpi
@pytest.mark.timeout(240)
@pytest.mark.skipif(find_mpiexec() is None, reason="no mpiexec")
def test_readme_script_under_mpiexec(script, local):
    assert run([find_mpiexec(), "-n", str(N), sys.executable, script]) == local


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.timeout(240)
def test_readme_script_under_spmd_run_ray(script, local):
    pytest.importorskip("ray")
    out = run([sys.executable, "-m", "spmd.launcher.cli", "run", "-n", str(N), "--backend", "ray", script])
    assert [ln for ln in out if not ln.startswith("(")] == local


def test_readme_api_snippet_runs_as_written(tmp_path):
    """The README's first example (the API at a glance) runs as it stands, on 4 devices."""
    text = open(os.path.join(ROOT, "README.md")).read()
    path = tmp_path / "api.py"
    path.write_text(re.search(r"```python\n(.*?)```", text, re.S).group(1))
    out = run([sys.executable, str(path)], SPMD_NUM_DEVICES="4", SPMD_BACKEND="local")
    assert any("all_reduce" in line for line in out) and any(line.startswith("collectives (") for line in out)
