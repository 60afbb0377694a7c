"""Where things are, for tests that start scripts or read files by path."""
import os

TESTS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(TESTS)
SCRIPTS = os.path.join(TESTS, "mpi_scripts")
