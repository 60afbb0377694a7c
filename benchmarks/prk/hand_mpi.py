"""The kernels written by hand with mpi4py and numpy, as an HPC programmer would: the rows
of each array in one block per rank, halo rows exchanged with MPI Sendrecv (stencil),
the blocks of a transpose moved with one Alltoall, the whole vector or B on every rank
(sparse, dgemm). Each is a variant (variants.py: start, step, valid)."""
import numpy as np

import kernels as k


def _rows(n, comm):
    size, rank = comm.Get_size(), comm.Get_rank()
    if n % size:
        raise SystemExit(f"hand_mpi: {n} rows do not split evenly over {size} ranks")
    b = n // size
    return rank * b, (rank + 1) * b


class _Hand:
    def __init__(self, kern, comm):
        self.k, self.comm = kern, comm

    def total(self, x):
        return self.comm.allreduce(float(x))


class Nstream(_Hand):
    def start(self):
        self.n = self.k.static_n
        lo, hi = _rows(self.n, self.comm)
        self.a, self.b, self.c = (x[lo:hi].copy() for x in k.nstream_inputs(self.n))

    def step(self):
        self.a += self.b + k.SCALAR * self.c

    def valid(self, iters):
        return k.nstream_check(self.total(np.abs(self.a).sum()), self.n, iters)


class Stencil(_Hand):
    """Rows lo..hi of the grid with r ghost rows above and below."""

    def start(self):
        n, r = self.k.static_n, self.k.static[1]
        self.n, self.r = n, r
        self.lo, self.hi = _rows(n, self.comm)
        inp, out = k.stencil_inputs(n)
        self.inp = np.zeros((self.hi - self.lo + 2 * r, n))
        g0, g1 = max(self.lo - r, 0), min(self.hi + r, n)
        self.inp[g0 - (self.lo - r):g1 - (self.lo - r)] = inp[g0:g1]
        self.out = np.zeros((self.hi - self.lo, n))
        rank, size = self.comm.Get_rank(), self.comm.Get_size()
        from mpi4py import MPI
        self.up = rank - 1 if rank > 0 else MPI.PROC_NULL
        self.down = rank + 1 if rank < size - 1 else MPI.PROC_NULL
        # the owned rows whose stencil lies inside the grid, in local coordinates
        self.a0 = max(self.lo, r) - self.lo
        self.a1 = min(self.hi, n - r) - self.lo

    def step(self):
        r, a, comm = self.r, self.inp, self.comm
        m = a.shape[0] - 2 * r
        comm.Sendrecv(a[r:2 * r], dest=self.up, recvbuf=a[m + r:], source=self.down)
        comm.Sendrecv(a[m:m + r], dest=self.down, recvbuf=a[:r], source=self.up)
        n, a0, a1 = self.n, self.a0, self.a1
        acc = None
        for di, dj, w in self.k.static[0]:
            term = w * a[r + a0 + di:r + a1 + di, r + dj:n - r + dj]
            acc = term if acc is None else acc + term
        self.out[a0:a1, r:n - r] += acc
        a[r:m + r] += 1.0

    def valid(self, iters):
        r, n = self.r, self.n
        return k.stencil_check(self.total(np.abs(self.out[self.a0:self.a1, r:n - r]).sum()), n, r, iters)


class Transpose(_Hand):
    def start(self):
        n = self.n = self.k.static_n
        self.lo, self.hi = _rows(n, self.comm)
        a, b = k.transpose_inputs(n)
        self.a, self.b = a[self.lo:self.hi].copy(), b[self.lo:self.hi].copy()
        self.size = self.comm.Get_size()
        self.bs = n // self.size
        self.send = np.empty((self.size, self.bs, self.bs))
        self.recv = np.empty_like(self.send)

    def step(self):
        bs = self.bs
        # block q goes to rank q: my rows, q's columns, transposed
        for q in range(self.size):
            self.send[q] = self.a[:, q * bs:(q + 1) * bs].T
        self.comm.Alltoall(self.send, self.recv)
        for q in range(self.size):
            self.b[:, q * bs:(q + 1) * bs] += self.recv[q]
        self.a += 1.0

    def valid(self, iters):
        return k.transpose_check(self.total(k.transpose_error(self.b, self.lo, self.n, iters)))


class Dgemm(_Hand):
    def start(self):
        n = self.n = self.k.static_n
        lo, hi = _rows(n, self.comm)
        a, self.bm, c = k.dgemm_inputs(n)
        self.a, self.c = a[lo:hi].copy(), c[lo:hi].copy()

    def step(self):
        self.c += self.a @ self.bm

    def valid(self, iters):
        return k.dgemm_check(self.total(self.c.sum()), self.n, iters)


class Sparse(_Hand):
    def start(self):
        vals, cols, self.vector, result = self.k.inputs()
        lo, hi = _rows(vals.shape[0], self.comm)
        self.vals, self.cols, self.result = vals[lo:hi].copy(), cols[lo:hi].copy(), result[lo:hi].copy()
        self.ramp = np.arange(1, self.vector.shape[0] + 1, dtype=np.float64)

    def step(self):
        self.vector += self.ramp
        self.result += (self.vals * self.vector[self.cols]).sum(axis=1)

    def valid(self, iters):
        return k.sparse_check(self.total(self.result.sum()), self.vector.shape[0] * self.vals.shape[1], iters)


def variant(kern, comm):
    cls = {"nstream": Nstream, "transpose": Transpose, "dgemm": Dgemm, "sparse": Sparse}.get(kern.name, Stencil)
    return cls(kern, comm)
