"""The corpus (tests/programs/corpus/): programs written as numpy users write them, run
unchanged under spmd.jit on 4 local devices and compared with plain numpy (results and
arguments written in place). Each records how it ran: compiled, with graph breaks, or
eagerly. Of the 64, 61 compile whole and 3 take graph breaks (BREAKS: each needs a value
of the data that decides Python's control flow or a size; a Python number only returned,
`return float(loss)`, is an output of the one program: frontend/returned_scalars.py; a
loop whose test is on the data is one traced while loop: frontend/loop_conversion.py),
none runs eagerly; at least 95% must run without the eager fallback. Ten of them also run
in one mpiexec launch (tests/mpi_scripts/corpus.py)."""
import os
import re
import subprocess
import sys

import pytest

import corpus
from paths import ROOT, SCRIPTS
from spmd.transports.mpi.mpi_launch import find_mpiexec

# programs spmd cannot run yet: the minimal reproduction and its error
XFAIL = {
}

# programs that take graph breaks, and the value each needs from the data; every other
# program must compile whole (no FallbackWarning), and none may fall back to eager. Each is
# genuine: Python decides its control flow or a shape from the value. (conjugate_gradient's
# `if np.sqrt(rs_new) < tol: break` and backtracking's `while loss(w - t * g) > ...: t *= 0.5`
# compile whole: frontend/loop_conversion.py traces those loops as while loops.)
BREAKS = {
    "burgers": "float(np.max(np.abs(u))) for the CFL time step inside `while t < t_end`, and Python's min "
               "of it: a float() of the data in a loop's body is not converted (loop_conversion.py)",
    "groupby_unique": "np.unique(keys, return_inverse=True): the number of groups is the results' shape",
    "label_propagation": "labels.max() + 1 is Y's shape (an argument: no bound known while tracing)",
}

HOW = {}          # name -> "compiled" | "breaks" | "eager", as the programs ran


def _param(name):
    if name in XFAIL:
        return pytest.param(name, marks=pytest.mark.xfail(strict=True, reason=XFAIL[name]))
    return name


@pytest.mark.parametrize("name", [_param(n) for n in corpus.NAMES])
def test_program_matches_numpy(name):
    HOW[name] = corpus.run(name)
    assert HOW[name] in (("compiled", "breaks") if name in BREAKS else ("compiled",)), HOW[name]


def test_at_most_5_percent_run_eagerly():
    """Run after the programs (file order); one selected alone with -k is run here."""
    for name in corpus.NAMES:
        if name not in XFAIL and name not in HOW:
            HOW[name] = corpus.run(name)
    runs = [HOW[n] for n in corpus.NAMES if n not in XFAIL]
    counts = {k: runs.count(k) for k in ("compiled", "breaks", "eager")}
    print(f"corpus: {counts}, xfail {len(XFAIL)}; breaks: "
          f"{[n for n in corpus.NAMES if HOW.get(n) == 'breaks']}; eager: "
          f"{[n for n in corpus.NAMES if HOW.get(n) == 'eager']}")
    assert len(corpus.NAMES) >= 40
    assert counts["eager"] <= 0.05 * len(corpus.NAMES), counts


MPIEXEC = find_mpiexec()


@pytest.mark.mpi
@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.skipif(MPIEXEC is None, reason="no mpiexec")
def test_ten_programs_under_mpiexec():
    assert len(corpus.MPI_NAMES) == 10 and not set(corpus.MPI_NAMES) & set(XFAIL)
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("SPMD_BACKEND", None)
    p = subprocess.run([MPIEXEC, "-n", "4", sys.executable, os.path.join(SCRIPTS, "corpus.py")],
                       capture_output=True, text=True, timeout=280, env=env)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    for name in corpus.MPI_NAMES:
        # every rank compared its results with numpy's, and ran as the program may
        hows = re.findall(rf"^(?:\[rank \d\] )?OK {name} (\w+)$", p.stdout, re.M)
        allowed = ("compiled", "breaks") if name in BREAKS else ("compiled",)
        assert len(hows) == 4 and all(h in allowed for h in hows), (name, hows, p.stdout[-3000:])
