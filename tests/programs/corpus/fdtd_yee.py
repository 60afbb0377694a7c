"""2-D FDTD on a Yee grid (TM mode): Hx, Hy, Ez updated in place with slices, a soft source."""
import numpy as np


def step(Ez, Hx, Hy, nsteps):
    nx, ny = Ez.shape
    courant = 0.5
    for t in range(nsteps):
        Hx[:, :-1] -= courant * (Ez[:, 1:] - Ez[:, :-1])
        Hy[:-1, :] += courant * (Ez[1:, :] - Ez[:-1, :])
        Ez[1:-1, 1:-1] += courant * ((Hy[1:-1, 1:-1] - Hy[:-2, 1:-1]) - (Hx[1:-1, 1:-1] - Hx[1:-1, :-2]))
        Ez[nx // 2, ny // 2] += np.exp(-((t - 6) / 3.0) ** 2)
    energy = np.sum(Ez ** 2) + np.sum(Hx ** 2) + np.sum(Hy ** 2)
    return energy


def make(rng):
    n = 48
    Ez = np.zeros((n, n))
    Hx = np.zeros((n, n))
    Hy = np.zeros((n, n))
    Ez[10:20, 10:20] = rng.standard_normal((10, 10)) * 0.1
    return (Ez, Hx, Hy, 8), (("a", "b"), ("a", "b"), ("a", "b"), None)


MESH = ((2, 2), ("a", "b"))
STATIC = (3,)
