"""The eager tests' backend: programs compiled inside the block run on the numpy backend
(quick to compile), and SPMD_COMPILER is put back as it was after it."""
import contextlib
import os


@contextlib.contextmanager
def numpy_compiler():
    old = os.environ.get("SPMD_COMPILER")
    os.environ["SPMD_COMPILER"] = "numpy"
    try:
        yield
    finally:
        if old is None:
            del os.environ["SPMD_COMPILER"]
        else:
            os.environ["SPMD_COMPILER"] = old
