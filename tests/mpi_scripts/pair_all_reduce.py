"""All-reduces of floats over two ranks, gathered in one round (up to PAIR_GATHER_BYTES)
and block-wise (beyond it, and with the limit lowered to 0): every rank's result has the
bits of the two inputs summed in group order (communicator.reduce_arrays)."""
import numpy as np

import spmd
import spmd.transports.mpi.mpi_all_reduce as mpi_all_reduce
from spmd.transports.communicator import reduce_arrays
from spmd.transports.mpi.mpi_communicator import MPICommunicator

spmd.init()
assert spmd.process_count() == 2
me = spmd.process_index()
comm = MPICommunicator(spmd.Mesh((2,), ("x",)))


def inputs(n, dtype):
    """Both ranks' inputs (the same on every rank): magnitudes over 12 decades, so that
    the order of the additions shows in the bits."""
    out = []
    for r in range(2):
        rng = np.random.default_rng([n, r])
        out.append((rng.standard_normal(n) * 10.0 ** rng.integers(-6, 6, n)).astype(dtype))
    return out


checked = 0
limit = mpi_all_reduce.PAIR_GATHER_BYTES
for pair_limit in (limit, 0):
    mpi_all_reduce.PAIR_GATHER_BYTES = pair_limit
    for dtype in ("float32", "float64"):
        size = np.dtype(dtype).itemsize
        for n in (3, 32768 + 1, limit // (2 * size) + 2):        # small, gathered at 128 KiB, just past the limit
            xs = inputs(n, dtype)
            want = reduce_arrays("sum", xs)
            got = comm.all_reduce(xs[me], ("x",), "sum")
            assert got.tobytes() == want.tobytes(), (pair_limit, dtype, n)
            h = comm.all_reduce_start(xs[me], ("x",), "sum")
            assert comm.wait(h).tobytes() == want.tobytes(), ("started", pair_limit, dtype, n)
            checked += 2
print(f"OK {checked}", flush=True)
