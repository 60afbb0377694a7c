"""1-D shallow water equations, Lax-Friedrichs with conserved variables h, hu."""
import numpy as np

g = 9.81


def fluxes(h, hu):
    u = hu / h
    return hu, hu * u + 0.5 * g * h ** 2


def step(h, hu, dx, dt, nsteps):
    for _ in range(nsteps):
        F1, F2 = fluxes(h, hu)
        hn = np.empty_like(h)
        hun = np.empty_like(hu)
        hn[1:-1] = 0.5 * (h[2:] + h[:-2]) - dt / (2 * dx) * (F1[2:] - F1[:-2])
        hun[1:-1] = 0.5 * (hu[2:] + hu[:-2]) - dt / (2 * dx) * (F2[2:] - F2[:-2])
        hn[0], hn[-1] = hn[1], hn[-2]                 # outflow
        hun[0], hun[-1] = -hun[1], -hun[-2]           # reflecting walls
        h, hu = hn, hun
    return h, hu


def make(rng):
    n = 2000
    x = np.linspace(0, 1, n)
    h = 1 + 0.5 * np.exp(-400 * (x - 0.5) ** 2)
    hu = np.zeros(n)
    return (h, hu, 1 / (n - 1), 0.2 / (n - 1) / 4.5, 10), (("d",), ("d",), None, None, None)


STATIC = (4,)
