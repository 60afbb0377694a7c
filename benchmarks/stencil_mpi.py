"""The suite's peers under MPI: each stencil written by hand with mpi4py and numpy, as an
HPC programmer would (a block of the grid per rank with one layer of ghost cells,
Sendrecv with the four neighbours, the numpy update on the block), and the worker that
times it and spmd's version of the same program in one `mpiexec` run.

    mpiexec -n 4 python benchmarks/stencil_mpi.py OUT.json [--n 2048] [--steps 10] [--only a,b]
"""
import argparse
import json
import time

import numpy as np

import stencil_programs as sp


class Block:
    """This rank's block of a global array split over a px x py grid of ranks along its
    first two dims, with one ghost layer on each side of those dims."""

    def __init__(self, cart, shape, dtype):
        self.cart = cart
        self.px, self.py = cart.Get_topo()[0]
        self.cx, self.cy = cart.Get_coords(cart.Get_rank())
        n0, n1 = shape[0], shape[1]
        self.r0, self.r1 = _bounds(n0, self.px, self.cx)
        self.c0, self.c1 = _bounds(n1, self.py, self.cy)
        self.shape = shape
        self.a = np.zeros((self.r1 - self.r0 + 2, self.c1 - self.c0 + 2) + tuple(shape[2:]), dtype)
        self.top, self.bottom = self.r0 == 0, self.r1 == n0
        self.left, self.right = self.c0 == 0, self.c1 == n1
        self.received = 0

    def scatter(self, g):
        self.a[1:-1, 1:-1] = g[self.r0:self.r1, self.c0:self.c1]
        return self

    def owned(self):
        return self.a[1:-1, 1:-1]

    def interior(self):
        """Slices (in the ghosted block) of the owned cells that are not on the global boundary."""
        rows = slice(1 + self.top, self.a.shape[0] - 1 - self.bottom)
        cols = slice(1 + self.left, self.a.shape[1] - 1 - self.right)
        return rows, cols

    def exchange(self):
        """Ghost rows from the up/down neighbours, then ghost columns (with the ghost rows
        just received, so corners arrive too) from the left/right ones."""
        from mpi4py import MPI
        a, comm = self.a, self.cart
        for dim, (lo, hi) in ((0, (a[1], a[-2])), (1, (a[:, 1], a[:, -2]))):
            src, dst = comm.Shift(dim, 1)
            buf = np.empty_like(hi)
            comm.Sendrecv(np.ascontiguousarray(hi), dest=dst, recvbuf=buf, source=src)
            if src != MPI.PROC_NULL:
                (a.__setitem__((0,), buf) if dim == 0 else a.__setitem__((slice(None), 0), buf))
                self.received += buf.nbytes
            buf = np.empty_like(lo)
            comm.Sendrecv(np.ascontiguousarray(lo), dest=src, recvbuf=buf, source=dst)
            if dst != MPI.PROC_NULL:
                (a.__setitem__((-1,), buf) if dim == 0 else a.__setitem__((slice(None), -1), buf))
                self.received += buf.nbytes


def _bounds(n, parts, i):
    c = -(-n // parts)
    return min(i * c, n), min((i + 1) * c, n)


def _shift(a, rows, cols, di, dj):
    return a[rows.start + di:rows.stop + di, cols.start + dj:cols.stop + dj]


# -- the programs, by hand ------------------------------------------------------------------------
def jacobi(b, steps):
    for _ in range(steps):
        b.exchange()
        r, c = b.interior()
        a = b.a
        a[r, c] = 0.25 * (_shift(a, r, c, 1, 0) + _shift(a, r, c, -1, 0) + _shift(a, r, c, 0, 1) + _shift(a, r, c, 0, -1))


def nine_point(b, steps):
    for _ in range(steps):
        b.exchange()
        r, c = b.interior()
        a = b.a
        a[r, c] = (4.0 * (_shift(a, r, c, 1, 0) + _shift(a, r, c, -1, 0) + _shift(a, r, c, 0, 1) + _shift(a, r, c, 0, -1))
                   + _shift(a, r, c, 1, 1) + _shift(a, r, c, 1, -1) + _shift(a, r, c, -1, 1)
                   + _shift(a, r, c, -1, -1)) / 20.0


def heat3d(b, steps):
    for _ in range(steps):
        b.exchange()
        r, c = b.interior()
        a = b.a
        ctr = a[r, c, 1:-1]
        a[r, c, 1:-1] = ctr + 0.1 * (_shift(a, r, c, 1, 0)[..., 1:-1] + _shift(a, r, c, -1, 0)[..., 1:-1]
                                     + _shift(a, r, c, 0, 1)[..., 1:-1] + _shift(a, r, c, 0, -1)[..., 1:-1]
                                     + a[r, c, 2:] + a[r, c, :-2] - 6.0 * ctr)


def diffusion(b, steps):
    nu, dt, dx, dy = 0.05, 1e-4, 0.01, 0.01
    for _ in range(steps):
        b.exchange()
        r, c = b.interior()
        a = b.a
        ctr = a[r, c]
        a[r, c] = (ctr + nu * dt / dx ** 2 * (_shift(a, r, c, 0, 1) - 2 * ctr + _shift(a, r, c, 0, -1))
                   + nu * dt / dy ** 2 * (_shift(a, r, c, 1, 0) - 2 * ctr + _shift(a, r, c, -1, 0)))
        o = b.owned()
        if b.top:
            o[0, :] = 1
        if b.bottom:
            o[-1, :] = 1
        if b.left:
            o[:, 0] = 1
        if b.right:
            o[:, -1] = 1


def life(b, steps):
    for _ in range(steps):
        b.exchange()
        r, c = b.interior()
        a = b.a
        n = sum(_shift(a, r, c, di, dj) for di in (-1, 0, 1) for dj in (-1, 0, 1) if di or dj)
        z = a[r, c]
        new = (((n == 3) & (z == 0)) | (((n == 2) | (n == 3)) & (z == 1))).astype(a.dtype)
        b.owned()[...] = 0
        a[r, c] = new


def _laplace(b, v):
    """A v on the owned block (v's ghosts exchanged; zero outside the domain)."""
    b.a = v
    b.exchange()
    return 4.0 * v[1:-1, 1:-1] - v[:-2, 1:-1] - v[2:, 1:-1] - v[1:-1, :-2] - v[1:-1, 2:]


def cg(blocks, steps):
    from mpi4py import MPI
    x, r, p = (bl.a for bl in blocks[:3])
    rs = blocks[3]
    comm = blocks[0].cart
    bp = blocks[2]
    for _ in range(steps):
        ap = _laplace(bp, p)
        pap = comm.allreduce(float(np.sum(p[1:-1, 1:-1] * ap)), MPI.SUM)
        alpha = rs[0] / pap
        x[1:-1, 1:-1] += alpha * p[1:-1, 1:-1]
        r[1:-1, 1:-1] -= alpha * ap
        rs_new = comm.allreduce(float(np.sum(r[1:-1, 1:-1] ** 2)), MPI.SUM)
        p[1:-1, 1:-1] = r[1:-1, 1:-1] + (rs_new / rs[0]) * p[1:-1, 1:-1]
        rs[0] = rs_new


HAND = {"jacobi": jacobi, "nine_point": nine_point, "heat3d": heat3d, "diffusion": diffusion, "life": life}


# -- the worker ----------------------------------------------------------------------------------
def _grid_of(size):
    return (1, 2) if size == 2 else (2, 2) if size == 4 else (1, size)


def _timed(comm, f, repeats):
    """Median over repeats of the slowest rank's time for f()."""
    from mpi4py import MPI
    f()                                            # warm up (and compile)
    ts = []
    for _ in range(repeats):
        comm.Barrier()
        t0 = time.perf_counter()
        f()
        ts.append(comm.allreduce(time.perf_counter() - t0, MPI.MAX))
    return float(np.median(ts))


def worker(out_path, n2d, n3d, steps, repeats, only):
    from mpi4py import MPI

    import spmd
    spmd.init()
    world = MPI.COMM_WORLD
    size = world.Get_size()
    px, py = _grid_of(size)
    cart = world.Create_cart((px, py), periods=(False, False))
    mesh = spmd.Mesh((px, py), ("x", "y"))
    rows = {}
    for prog in sp.suite(n2d, n3d, steps):
        if only and prog.name not in only:
            continue
        arrays = prog.inputs()
        row = {}
        # spmd: the user's function, its grids split over the mesh
        shs = tuple(mesh.sharding("x", "y") if a.ndim >= 2 else mesh.sharding() for a in arrays)
        f = spmd.jit(prog.fn, in_shardings=shs, static_argnums=(len(arrays),))
        placed = [spmd.device_put(a.copy(), s) for a, s in zip(arrays, shs)]
        row["spmd_ms"] = 1e3 * _timed(world, lambda: f(*placed, prog.steps), repeats) / prog.steps
        row["spmd_bytes"] = f.lower(*arrays, prog.steps).report()["bytes_per_run"] / prog.steps
        # by hand
        if prog.name in HAND:
            b = Block(cart, arrays[0].shape, arrays[0].dtype).scatter(arrays[0])
            row["hand_ms"] = 1e3 * _timed(world, lambda: HAND[prog.name](b, prog.steps), repeats) / prog.steps
            b.received = 0
            HAND[prog.name](b, 1)
            row["hand_bytes"] = world.allreduce(b.received, MPI.MAX)
        elif prog.name == "cg":
            blocks = [Block(cart, a.shape, a.dtype).scatter(a) for a in arrays[:3]] + [np.array([float(arrays[3])])]
            row["hand_ms"] = 1e3 * _timed(world, lambda: cg(blocks, prog.steps), repeats) / prog.steps
            blocks[2].received = 0
            cg(blocks, 1)
            row["hand_bytes"] = world.allreduce(blocks[2].received, MPI.MAX)
        rows[prog.name] = row
    if world.Get_rank() == 0:
        with open(out_path, "w") as fh:
            json.dump(rows, fh)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--n", type=int, default=2048)
    ap.add_argument("--n3d", type=int, default=160)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--only", default="")
    a = ap.parse_args()
    worker(a.out, a.n, a.n3d, a.steps, a.repeats, set(filter(None, a.only.split(","))))


if __name__ == "__main__":
    main()
