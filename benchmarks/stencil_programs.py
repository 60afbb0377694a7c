"""The stencil suite's programs, written as numpy users write them (in-place interior
updates through slices, boundary conditions as writes, a Python loop of steps), and what
each needs to run: its inputs, how its arrays are split, and the halo a step must move.

Every program is `f(*arrays, steps)` updating its arrays in place (as numpy code does)
and returning them; spmd runs the same function under `spmd.jit`.
"""
import numpy as np


def jacobi(u, steps):
    """2-D Jacobi, 5 points, fixed boundary."""
    for _ in range(steps):
        u[1:-1, 1:-1] = 0.25 * (u[2:, 1:-1] + u[:-2, 1:-1] + u[1:-1, 2:] + u[1:-1, :-2])
    return u


def nine_point(u, steps):
    """2-D 9-point (Mehrstellen) smoother: the corners' values come from diagonal neighbours."""
    for _ in range(steps):
        u[1:-1, 1:-1] = (4.0 * (u[2:, 1:-1] + u[:-2, 1:-1] + u[1:-1, 2:] + u[1:-1, :-2])
                         + u[2:, 2:] + u[2:, :-2] + u[:-2, 2:] + u[:-2, :-2]) / 20.0
    return u


def heat3d(u, steps):
    """3-D heat equation, 7 points, explicit Euler."""
    for _ in range(steps):
        c = u[1:-1, 1:-1, 1:-1]
        u[1:-1, 1:-1, 1:-1] = c + 0.1 * (u[2:, 1:-1, 1:-1] + u[:-2, 1:-1, 1:-1] + u[1:-1, 2:, 1:-1]
                                         + u[1:-1, :-2, 1:-1] + u[1:-1, 1:-1, 2:] + u[1:-1, 1:-1, :-2] - 6.0 * c)
    return u


def diffusion(u, steps):
    """2-D diffusion with Dirichlet boundaries (the CFD lesson's step 7): a copy, an
    update of the interior, four boundary writes, every time step."""
    nu, dt, dx, dy = 0.05, 1e-4, 0.01, 0.01
    for _ in range(steps):
        un = u.copy()
        u[1:-1, 1:-1] = (un[1:-1, 1:-1] + nu * dt / dx ** 2 * (un[1:-1, 2:] - 2 * un[1:-1, 1:-1] + un[1:-1, 0:-2])
                         + nu * dt / dy ** 2 * (un[2:, 1:-1] - 2 * un[1:-1, 1:-1] + un[0:-2, 1:-1]))
        u[0, :] = 1
        u[-1, :] = 1
        u[:, 0] = 1
        u[:, -1] = 1
    return u


def life(z, steps):
    """Conway's Game of Life on an int grid, the usual numpy formulation (a masked write
    through a view)."""
    for _ in range(steps):
        n = (z[0:-2, 0:-2] + z[0:-2, 1:-1] + z[0:-2, 2:] + z[1:-1, 0:-2] + z[1:-1, 2:]
             + z[2:, 0:-2] + z[2:, 1:-1] + z[2:, 2:])
        birth = (n == 3) & (z[1:-1, 1:-1] == 0)
        survive = ((n == 2) | (n == 3)) & (z[1:-1, 1:-1] == 1)
        z[...] = 0
        z[1:-1, 1:-1][birth | survive] = 1
    return z


def laplace(v):
    """The 5-point Laplacian with zero Dirichlet boundary, matrix-free (A v)."""
    av = 4.0 * v
    av[1:, :] -= v[:-1, :]
    av[:-1, :] -= v[1:, :]
    av[:, 1:] -= v[:, :-1]
    av[:, :-1] -= v[:, 1:]
    return av


def cg(x, r, p, rs, steps):
    """Conjugate gradients on the 2-D Poisson problem A x = b (A the 5-point Laplacian),
    `steps` iterations from a state (x, r = b - A x, p, rs = r.r)."""
    for _ in range(steps):
        ap = laplace(p)
        alpha = rs / np.sum(p * ap)
        x += alpha * p
        r -= alpha * ap
        rs_new = np.sum(r * r)
        p[...] = r + (rs_new / rs) * p
        rs[...] = rs_new
    return x, r, p, rs


def cavity(u, v, p, steps, nit=50):
    """Navier-Stokes cavity flow (the CFD lesson's step 11), unchanged: `nit` pressure
    Poisson sweeps a time step."""
    nx = u.shape[0]
    dx = dy = 2.0 / (nx - 1)
    rho, nu, dt = 1.0, 0.1, 0.001
    for _ in range(steps):
        un, vn = u.copy(), v.copy()
        b = np.zeros_like(p)
        b[1:-1, 1:-1] = (rho * (1 / dt * ((u[1:-1, 2:] - u[1:-1, 0:-2]) / (2 * dx) + (v[2:, 1:-1] - v[0:-2, 1:-1]) / (2 * dy))
                                - ((u[1:-1, 2:] - u[1:-1, 0:-2]) / (2 * dx)) ** 2
                                - 2 * ((u[2:, 1:-1] - u[0:-2, 1:-1]) / (2 * dy) * (v[1:-1, 2:] - v[1:-1, 0:-2]) / (2 * dx))
                                - ((v[2:, 1:-1] - v[0:-2, 1:-1]) / (2 * dy)) ** 2))
        for _ in range(nit):
            pn = p.copy()
            p[1:-1, 1:-1] = (((pn[1:-1, 2:] + pn[1:-1, 0:-2]) * dy ** 2 + (pn[2:, 1:-1] + pn[0:-2, 1:-1]) * dx ** 2)
                             / (2 * (dx ** 2 + dy ** 2))
                             - dx ** 2 * dy ** 2 / (2 * (dx ** 2 + dy ** 2)) * b[1:-1, 1:-1])
            p[:, -1] = p[:, -2]
            p[0, :] = p[1, :]
            p[:, 0] = p[:, 1]
            p[-1, :] = 0
        u[1:-1, 1:-1] = (un[1:-1, 1:-1] - un[1:-1, 1:-1] * dt / dx * (un[1:-1, 1:-1] - un[1:-1, 0:-2])
                         - vn[1:-1, 1:-1] * dt / dy * (un[1:-1, 1:-1] - un[0:-2, 1:-1])
                         - dt / (2 * rho * dx) * (p[1:-1, 2:] - p[1:-1, 0:-2])
                         + nu * (dt / dx ** 2 * (un[1:-1, 2:] - 2 * un[1:-1, 1:-1] + un[1:-1, 0:-2])
                                 + dt / dy ** 2 * (un[2:, 1:-1] - 2 * un[1:-1, 1:-1] + un[0:-2, 1:-1])))
        v[1:-1, 1:-1] = (vn[1:-1, 1:-1] - un[1:-1, 1:-1] * dt / dx * (vn[1:-1, 1:-1] - vn[1:-1, 0:-2])
                         - vn[1:-1, 1:-1] * dt / dy * (vn[1:-1, 1:-1] - vn[0:-2, 1:-1])
                         - dt / (2 * rho * dy) * (p[2:, 1:-1] - p[0:-2, 1:-1])
                         + nu * (dt / dx ** 2 * (vn[1:-1, 2:] - 2 * vn[1:-1, 1:-1] + vn[1:-1, 0:-2])
                                 + dt / dy ** 2 * (vn[2:, 1:-1] - 2 * vn[1:-1, 1:-1] + vn[0:-2, 1:-1])))
        u[0, :] = 0
        u[:, 0] = 0
        u[:, -1] = 0
        u[-1, :] = 1
        v[0, :] = 0
        v[-1, :] = 0
        v[:, 0] = 0
        v[:, -1] = 0
    return u, v, p


def _grid(n, ndim=2, seed=0):
    return np.random.default_rng(seed).random((n,) * ndim)


def _cg_state(n):
    b = _grid(n, seed=1)
    x = np.zeros((n, n))
    r = b - laplace(x)
    return x, r, r.copy(), np.array(np.sum(r * r))


class Program:
    def __init__(self, name, fn, inputs, steps, halo_width=1, corners=True, exchanged=1, exact=True, sweeps=None):
        self.name, self.fn, self.inputs, self.steps = name, fn, inputs, steps
        # arrays a step exchanges edges of (the first `exchanged` inputs), how wide, and
        # whether the corners travel too (they do in a ghost-layer exchange); sweeps:
        # {input: exchanges more a step} for an inner loop (cavity's pressure sweeps)
        self.halo_width, self.corners, self.exchanged, self.exact = halo_width, corners, exchanged, exact
        self.sweeps = sweeps or {}

    def step_halo_bytes(self, arrays, grid):
        """A hand-written exchange's bytes a step: each exchanged array's halo once, and
        an inner loop's arrays once a sweep."""
        halo = lambda a: self.halo_bytes(a.shape, a.itemsize, grid) if a.ndim >= 2 else 0  # noqa: E731
        return (sum(halo(a) for a in arrays[:self.exchanged or len(arrays)])
                + sum(k * halo(arrays[i]) for i, k in self.sweeps.items()))

    def halo_bytes(self, shape, itemsize, grid):
        """The halo of one shard of one array a step: its block's faces along every split
        dim, both ways (and the corners, which a ghost-layer exchange carries with the
        second dim's faces), as a hand-written halo exchange moves them."""
        blk = [-(-s // g) for s, g in zip(shape, grid)] + list(shape[len(grid):])
        total = 0
        for d, g in enumerate(grid):
            if g > 1:
                face = int(np.prod([b for e, b in enumerate(blk) if e != d]))
                total += 2 * face * self.halo_width
        if self.corners and all(g > 1 for g in grid):
            total += 4 * self.halo_width ** 2 * int(np.prod(blk[2:]))
        return total * itemsize


def suite(n2d=2048, n3d=160, steps=10, ncavity=128):
    return [
        Program("jacobi", jacobi, lambda: (_grid(n2d),), steps),
        Program("nine_point", nine_point, lambda: (_grid(n2d),), steps),
        Program("heat3d", heat3d, lambda: (_grid(n3d, 3),), steps),
        Program("diffusion", diffusion, lambda: (_grid(n2d),), steps),
        Program("life", life, lambda: ((np.random.default_rng(2).random((n2d, n2d)) < 0.3).astype(np.int64),),
                steps),
        Program("cg", cg, lambda: _cg_state(n2d), steps, exact=False),
        Program("cavity", cavity, lambda: (np.zeros((ncavity, ncavity)), np.zeros((ncavity, ncavity)),
                                           np.zeros((ncavity, ncavity))), 1, exchanged=3, sweeps={2: 50}),
    ]
