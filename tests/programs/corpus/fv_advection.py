"""Finite-volume linear advection with a flux limiter (van Leer), periodic, MUSCL-style."""
import numpy as np


def limiter(r):
    return (r + np.abs(r)) / (1 + np.abs(r))


def step(q, a, dx, dt, nsteps):
    for n in range(nsteps):
        dq_minus = q - np.roll(q, 1)
        dq_plus = np.roll(q, -1) - q
        r = dq_minus / np.where(np.abs(dq_plus) > 1e-12, dq_plus, 1e-12)
        phi = limiter(r)
        c = a * dt / dx
        flux = a * (q + 0.5 * (1 - c) * phi * dq_plus)
        q = q - dt / dx * (flux - np.roll(flux, 1))
    return q


def make(rng):
    n = 2048
    x = np.linspace(0, 1, n, endpoint=False)
    q = np.where((x > 0.3) & (x < 0.6), 1.0, 0.0) + 0.1 * np.sin(2 * np.pi * x)
    return (q, 1.0, 1.0 / n, 0.4 / n, 10), (("d",), None, None, None, None)


STATIC = (4,)
