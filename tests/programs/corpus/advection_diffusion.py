"""2-D advection-diffusion with np.gradient for the advective term and a 5-point Laplacian."""
import numpy as np


def step(c, vx, vy, D, dt, nsteps):
    dx = 1.0 / c.shape[0]
    for _ in range(nsteps):
        dcdy, dcdx = np.gradient(c, dx)
        lap = (np.roll(c, 1, 0) + np.roll(c, -1, 0) + np.roll(c, 1, 1) + np.roll(c, -1, 1) - 4 * c) / dx ** 2
        c = c + dt * (D * lap - vx * dcdx - vy * dcdy)
    return c


def make(rng):
    n = 40
    y, x = np.mgrid[0:1:n * 1j, 0:1:n * 1j]
    c = np.exp(-50 * ((x - 0.5) ** 2 + (y - 0.5) ** 2))
    vx = np.sin(np.pi * y)
    vy = np.cos(np.pi * x)
    return (c, vx, vy, 1e-3, 1e-4, 6), (("d", None), ("d", None), ("d", None), None, None, None)


STATIC = (5,)
