"""1-D wave equation, leapfrog in time: u_next from u and u_prev, fixed ends."""
import numpy as np


def step(u_prev, u, c, dx, dt, nsteps):
    r2 = (c * dt / dx) ** 2
    for n in range(nsteps):
        u_next = np.zeros(u.shape[0])
        u_next[1:-1] = 2 * u[1:-1] - u_prev[1:-1] + r2 * (u[2:] - 2 * u[1:-1] + u[:-2])
        u_prev, u = u, u_next
    return u_prev, u


def make(rng):
    n = 4000
    x = np.linspace(0, 1, n)
    u = np.exp(-200 * (x - 0.4) ** 2)
    return (u.copy(), u, 1.0, 1 / (n - 1), 0.5 / (n - 1), 12), (("d",), ("d",), None, None, None, None)


STATIC = (5,)
