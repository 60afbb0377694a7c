import os
import sys

from hypothesis import settings

# tests import their shared helpers (opinfo, partition_util) as top-level modules
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# CI replays the same examples every run (a red CI is then a real, reproducible bug);
# locally hypothesis explores new ones each time.
# every stage's graph is checked by ir.verify (SSA, shapes, shardings) in the tests,
# including the MPI and Ray processes they start (they inherit the environment)
os.environ.setdefault("SPMD_VERIFY", "1")
# every test runs the passes it tests: some plant a broken pass or rule and expect it to
# be caught, which a program loaded from the disk cache would hide (test_program_cache.py
# turns the cache on in processes of its own)
os.environ.setdefault("SPMD_PROGRAM_CACHE", "0")

settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


import pytest  # noqa: E402


@pytest.fixture(params=["numpy", "llvm"])
def compiler(request):
    """The compiler backends (spmd.jit(..., backend=compiler)): tests that run programs take
    this fixture to run under both; the numpy backend is the reference."""
    return request.param
