"""benchmarks/prk/run.py --quick: every kernel validates the PRK's way in every variant
(numpy, spmd on 1 and 2 local devices, and, where MPI is installed, spmd, mpi4py and the
C reference under mpiexec). Not a timing test."""
import json
import os
import subprocess
import sys

import pytest

from spmd.transports.mpi.mpi_launch import find_mpiexec

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KERNELS = ["nstream", "star1", "star2", "star3", "star4", "box1", "box2", "box3", "box4", "transpose", "dgemm", "sparse"]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_prk_quick_every_variant_validates(tmp_path):
    out = tmp_path / "rows.json"
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "prk", "run.py"), "--quick", "--ranks", "2",
                        "--json", str(out)], capture_output=True, text=True, timeout=580, env=env, cwd=ROOT)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    rows = json.loads(out.read_text())
    assert sorted(rows) == sorted(KERNELS)
    want = {"numpy", "spmd1", "spmd x2"}
    if find_mpiexec() is not None:
        want |= {"spmd 2", "mpi4py 2"}
        if subprocess.run(["which", "mpicc"], capture_output=True).returncode == 0:
            want |= {"C 1", "C 2"}
    for name, row in rows.items():
        assert want <= set(row), (name, sorted(row))
        for variant, (seconds, valid) in row.items():
            assert valid is True and seconds > 0, (name, variant)
    assert "every run valid" in p.stdout
