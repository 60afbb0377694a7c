"""Direct-sum gravitational n-body, softened, kick-drift-kick leapfrog; energy as a float."""
import numpy as np


def accelerations(pos, mass, G, soft):
    dx = pos[:, 0:1].T - pos[:, 0:1]
    dy = pos[:, 1:2].T - pos[:, 1:2]
    dz = pos[:, 2:3].T - pos[:, 2:3]
    inv_r3 = (dx ** 2 + dy ** 2 + dz ** 2 + soft ** 2) ** (-1.5)
    ax = G * (dx * inv_r3) @ mass
    ay = G * (dy * inv_r3) @ mass
    az = G * (dz * inv_r3) @ mass
    return np.hstack((ax, ay, az))


def energy(pos, vel, mass, G, soft):
    KE = 0.5 * np.sum(mass * vel ** 2)
    dx = pos[:, 0:1].T - pos[:, 0:1]
    dy = pos[:, 1:2].T - pos[:, 1:2]
    dz = pos[:, 2:3].T - pos[:, 2:3]
    inv_r = np.sqrt(dx ** 2 + dy ** 2 + dz ** 2 + soft ** 2)
    inv_r[inv_r > 0] = 1.0 / inv_r[inv_r > 0]
    PE = G * np.sum(np.sum(np.triu(-(mass * mass.T) * inv_r, 1)))
    return KE, PE


def step(pos, vel, mass, dt, nsteps):
    G, soft = 1.0, 0.1
    acc = accelerations(pos, mass, G, soft)
    for _ in range(nsteps):
        vel += acc * dt / 2.0
        pos += vel * dt
        acc = accelerations(pos, mass, G, soft)
        vel += acc * dt / 2.0
    KE, PE = energy(pos, vel, mass, G, soft)
    return KE, PE


def make(rng):
    n = 64
    mass = 20.0 * np.ones((n, 1)) / n
    pos = rng.standard_normal((n, 3))
    vel = rng.standard_normal((n, 3))
    vel -= np.mean(mass * vel, 0) / np.mean(mass)
    return (pos, vel, mass, 0.01, 4), (("d", None), ("d", None), ("d", None), None, None)


STATIC = (4,)
