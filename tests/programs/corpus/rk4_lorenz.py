"""An ensemble of Lorenz-63 trajectories integrated with classic fourth-order Runge-Kutta."""
import numpy as np


def lorenz(s, sigma=10.0, rho=28.0, beta=8 / 3):
    x, y, z = s[:, 0], s[:, 1], s[:, 2]
    return np.stack([sigma * (y - x), x * (rho - z) - y, x * y - beta * z], axis=1)


def step(states, dt, nsteps):
    for _ in range(nsteps):
        k1 = lorenz(states)
        k2 = lorenz(states + 0.5 * dt * k1)
        k3 = lorenz(states + 0.5 * dt * k2)
        k4 = lorenz(states + dt * k3)
        states = states + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    return states, states.mean(axis=0)


def make(rng):
    return (rng.standard_normal((256, 3)) + [1, 1, 20], 0.01, 10), (("d", None), None, None)


STATIC = (2,)
RTOL = 1e-8
