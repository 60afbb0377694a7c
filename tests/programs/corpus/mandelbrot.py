"""Mandelbrot escape times on a complex grid: the points still bounded are iterated through a
boolean mask (z[m] = z[m] ** 2 + c[m]), and each point's escape iteration recorded once."""
import numpy as np


def step(c, maxiter):
    z = np.zeros_like(c)
    out = np.full(c.shape, maxiter)
    for i in range(maxiter):
        m = np.abs(z) <= 2.0
        z[m] = z[m] ** 2 + c[m]
        out[(np.abs(z) > 2.0) & (out == maxiter)] = i
    return out, np.abs(z) <= 2.0


def make(rng):
    x = np.linspace(-2.0, 0.6, 48)
    y = np.linspace(-1.2, 1.2, 32)
    c = x[None, :] + 1j * y[:, None]
    return (c, 20), (("d", None), None)


STATIC = (1,)
