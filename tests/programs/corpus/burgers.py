"""Viscous Burgers, upwind convection and central diffusion, time step from the CFL number."""
import numpy as np


def step(u, nu, dx, t_end):
    t = 0.0
    steps = 0
    while t < t_end and steps < 6:
        dt = 0.4 * dx / float(np.max(np.abs(u)))
        dt = min(dt, 0.2 * dx * dx / nu)
        un = u.copy()
        u[1:-1] = (un[1:-1] - un[1:-1] * dt / dx * (un[1:-1] - un[:-2])
                   + nu * dt / dx ** 2 * (un[2:] - 2 * un[1:-1] + un[:-2]))
        u[0] = u[-2]
        u[-1] = u[1]
        t += dt
        steps += 1
    return u, t


def make(rng):
    n = 1024
    x = np.linspace(0, 2 * np.pi, n)
    u = 1.5 + np.sin(x) + 0.05 * rng.standard_normal(n)
    return (u, 0.07, 2 * np.pi / (n - 1), 1e-2), (("d",), None, None, None)


STATIC = (1, 2, 3)        # the physical constants: Python floats the loop compares
