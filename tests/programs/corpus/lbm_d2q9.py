"""Lattice Boltzmann D2Q9: BGK collision then streaming with np.roll, periodic box."""
import numpy as np

cx = np.array([0, 1, 0, -1, 0, 1, -1, -1, 1])
cy = np.array([0, 0, 1, 0, -1, 1, 1, -1, -1])
w = np.array([4 / 9, 1 / 9, 1 / 9, 1 / 9, 1 / 9, 1 / 36, 1 / 36, 1 / 36, 1 / 36])


def equilibrium(rho, ux, uy):
    feq = np.zeros((9,) + rho.shape)
    usq = ux ** 2 + uy ** 2
    for i in range(9):
        cu = 3 * (cx[i] * ux + cy[i] * uy)
        feq[i, :, :] = rho * w[i] * (1 + cu + 0.5 * cu ** 2 - 1.5 * usq)
    return feq


def step(f, tau, steps):
    for _ in range(steps):
        rho = np.sum(f, axis=0)
        ux = np.sum(f * cx[:, None, None], axis=0) / rho
        uy = np.sum(f * cy[:, None, None], axis=0) / rho
        f += -(1.0 / tau) * (f - equilibrium(rho, ux, uy))
        for i in range(9):
            f[i] = np.roll(np.roll(f[i], cx[i], axis=1), cy[i], axis=0)
    return rho, ux, uy


def make(rng):
    ny, nx = 24, 32
    rho = 1 + 0.05 * rng.standard_normal((ny, nx))
    ux = 0.05 * rng.standard_normal((ny, nx))
    uy = 0.05 * rng.standard_normal((ny, nx))
    f = equilibrium(rho, ux, uy)
    return (f, 0.6, 2), ((None, "d", None), None, None)


STATIC = (2,)
