"""`pip install spmd` brings what local threads need; MPI and Ray are extras. Without
them, a jitted program runs on local devices, and asking for a backend whose package is
missing names the extra that brings it."""
import os
import subprocess
import sys
import tomllib

from paths import ROOT as REPO

SCRIPT = r"""
import sys
sys.modules["mpi4py"] = None          # as if not installed: importing them fails
sys.modules["ray"] = None
import importlib.util
real_find_spec = importlib.util.find_spec
importlib.util.find_spec = lambda name, *a: None if name in ("mpi4py", "ray") else real_find_spec(name, *a)
import numpy as np, spmd
mesh = spmd.Mesh((2,), ("x",))
f = spmd.jit(lambda a: (a * 2).sum(0), in_shardings=(mesh.sharding("x", None),))
assert np.allclose(np.asarray(f(np.ones((4, 3)))), 8.0)
for backend in ("mpi", "ray"):
    try:
        spmd.init(backend=backend)
    except spmd.SpmdError as e:
        print(e)
    else:
        raise SystemExit(f"{backend} started without its package")
"""


def test_the_core_dependencies_are_what_local_threads_need():
    meta = tomllib.loads(open(os.path.join(REPO, "pyproject.toml")).read())["project"]
    names = {d.split("[")[0].split(">")[0].split("=")[0].strip() for d in meta["dependencies"]}
    # (scipy: HiGHS, for spmd.AUTO's sharding search)
    assert names == {"numpy", "llvmlite", "threadpoolctl", "ml_dtypes", "scipy"}, names
    extras = meta["optional-dependencies"]
    assert set(extras["mpi"]) >= {"mpi4py>=4.0", "mpich"} and any(d.startswith("ray[") for d in extras["ray"])
    assert "spmd[all]" in extras["test"]


def test_local_runs_without_mpi_or_ray_and_a_missing_backend_names_its_extra():
    env = dict(os.environ, SPMD_NUM_DEVICES="2", SPMD_BACKEND="local")
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=300,
                         cwd=REPO)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.strip().splitlines()
    assert "pip install 'spmd[mpi]'" in lines[0] and "pip install 'spmd[ray]'" in lines[1], out.stdout


def test_spmd_doctor_alone_checks_this_machines_install():
    out = subprocess.run([sys.executable, "-c", "from spmd.launcher.cli import main; main(['doctor'])"],
                         capture_output=True, text=True, timeout=300, cwd=REPO)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert all(ln.startswith(("ok ", "-- ")) for ln in lines), lines
    text = out.stdout
    assert "compiled to LLVM kernels and ran" in text and " cores: " in text and "/dev/shm" in text
    assert "MPI" in text and "Ray" in text
