"""The PRK benchmark's kernels as data: for each, its inputs, its numpy iteration, how
its arrays split over ranks (by rows, or whole on every rank), its validation on the
final arrays, its work per iteration and rate unit, and the C reference's arguments.
"""
from dataclasses import dataclass

import numpy as np

import kernels as k


@dataclass
class Kernel:
    name: str
    unit: str                  # "MB/s" or "MFlops/s"
    inputs: object             # () -> tuple of numpy arrays
    fn: object                 # (*arrays, *static) -> the updated arrays (one or a tuple)
    static: tuple              # configuration passed after the arrays
    updated: tuple             # positions of the arrays fn updates (and returns, in order)
    split: tuple               # per array: True = rows split over ranks, False = whole
    check: object              # (final updated arrays, global numpy, iters) -> bool
    work: float                # bytes or flops of one iteration
    c_prog: str                # the C reference: program name (and -D flags), its arguments
    c_flags: tuple
    c_args: tuple

    @property
    def static_n(self):
        """The size the hand-written versions split: the C reference's first argument."""
        return self.c_args[0]

    def rate(self, seconds_per_iteration):
        return 1e-6 * self.work / seconds_per_iteration


def nstream(n):
    return Kernel("nstream", "MB/s", lambda: k.nstream_inputs(n), k.nstream, (), (0,), (True, True, True),
                  lambda f, it: k.nstream_check(float(np.abs(f[0]).sum()), n, it), k.nstream_work(n),
                  "nstream", (), (n,))


def stencil(n, r, star):
    def check(f, it):
        return k.stencil_check(float(np.abs(f[1][r:n - r, r:n - r]).sum()), n, r, it)
    return Kernel(f"{'star' if star else 'box'}{r}", "MFlops/s", lambda: k.stencil_inputs(n), k.stencil,
                  (k.stencil_weights(r, star), r), (0, 1), (True, True), check, k.stencil_work(n, r, star),
                  f"{'star' if star else 'box'}{r}", (f"-DRADIUS={r}", f"-DSTAR={int(star)}"), (n,))


def transpose(n):
    return Kernel("transpose", "MB/s", lambda: k.transpose_inputs(n), k.transpose, (), (0, 1), (True, True),
                  lambda f, it: k.transpose_check(k.transpose_error(f[1], 0, n, it)), k.transpose_work(n),
                  "transpose", (), (n,))


def dgemm(n):
    return Kernel("dgemm", "MFlops/s", lambda: k.dgemm_inputs(n), k.dgemm, (), (2,), (True, False, True),
                  lambda f, it: k.dgemm_check(float(f[0].sum()), n, it), k.dgemm_work(n),
                  "dgemm", (), (n,))


def sparse(lsize, r):
    nnz = (1 << lsize) ** 2 * (4 * r + 1)
    return Kernel("sparse", "MFlops/s", lambda: k.sparse_inputs(lsize, r), k.sparse, (), (2, 3),
                  (True, True, False, True), lambda f, it: k.sparse_check(float(f[1].sum()), nnz, it),
                  k.sparse_work(nnz), "sparse", (), (lsize, r))


@dataclass
class Sizes:
    nstream: int = 1 << 23        # 64 MB a vector
    grid: int = 2000              # stencil grid
    order: int = 2000             # transpose
    dgemm: int = 1000
    lsize: int = 10               # sparse: a 1024^2 grid, radius 2
    iters: int = 10
    runs: int = 3


QUICK = Sizes(nstream=1 << 14, grid=64, order=64, dgemm=64, lsize=5, iters=2, runs=1)


def suite(s, stencils=((1, True), (2, True), (3, True), (4, True), (1, False), (2, False), (3, False), (4, False))):
    return ([nstream(s.nstream)] + [stencil(s.grid, r, star) for r, star in stencils]
            + [transpose(s.order), dgemm(s.dgemm), sparse(s.lsize, 2)])
