"""A distributed 2-d FFT under mpiexec: fft2 of a row-split matrix (the pencil
decomposition: all_to_all, no all_gather) and an FFT convolution, compared with numpy on
every rank; the complex result is laid out over the ranks like any other spmd.Array."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import spmd  # noqa: E402

spmd.init()
n = spmd.process_count()
mesh = spmd.Mesh((n,), ("x",))
rng = np.random.default_rng(0)
a = rng.standard_normal((8, 12))
k = rng.standard_normal((8, 12))
row = mesh.sharding("x", None)
f = spmd.jit(lambda x: np.fft.fft2(x), in_shardings=(row,))
rep = f.lower(a).report()
ops = [c["op"] for c in rep["collectives"]]
assert "all_gather" not in ops and "all_to_all" in ops, ops
got = f(a)
assert got.dtype == np.complex128, got.dtype
assert np.allclose(got.numpy(), np.fft.fft2(a)), "fft2"
conv = spmd.jit(lambda x, y: np.fft.irfft2(np.fft.rfft2(x) * np.fft.rfft2(y), s=x.shape),
                in_shardings=(row, row))
assert np.allclose(conv(a, k).numpy(), np.fft.irfft2(np.fft.rfft2(a) * np.fft.rfft2(k), s=a.shape)), "conv"
z = spmd.device_put((a + 1j * k).astype(np.complex64), row)
assert np.allclose(np.fft.ifft(z, axis=0).numpy(), np.fft.ifft(a + 1j * k, axis=0), atol=1e-5), "eager ifft"
print(f"FFT OK {spmd.process_index()} {len(ops)}")
