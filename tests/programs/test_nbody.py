"""A direct-sum n-body simulation written as public numpy codes write it -- pairwise
separations by broadcasting, the inverse cube of each distance computed only where the
distance is nonzero through a boolean mask read and written back with the same mask
(`inv_r3[inv_r3 > 0] = inv_r3[inv_r3 > 0] ** -1.5`), leapfrog steps, the potential
energy from the upper triangle -- runs under spmd.jit unchanged, the bodies split over
the devices evenly and unevenly, with numpy's results."""
import numpy as np
import pytest

import spmd

G = 1.0


def accelerations(pos, mass):
    """The acceleration of each body from every other one (no softening: a body's
    distance to itself is 0, and the mask leaves it out)."""
    x, y, z = pos[:, 0:1], pos[:, 1:2], pos[:, 2:3]
    dx, dy, dz = x.T - x, y.T - y, z.T - z
    inv_r3 = dx ** 2 + dy ** 2 + dz ** 2
    inv_r3[inv_r3 > 0] = inv_r3[inv_r3 > 0] ** -1.5
    ax = G * (dx * inv_r3) @ mass
    ay = G * (dy * inv_r3) @ mass
    az = G * (dz * inv_r3) @ mass
    return np.hstack((ax, ay, az))


def energies(pos, vel, mass):
    kinetic = 0.5 * np.sum(mass * vel ** 2)
    x, y, z = pos[:, 0:1], pos[:, 1:2], pos[:, 2:3]
    inv_r = np.sqrt((x.T - x) ** 2 + (y.T - y) ** 2 + (z.T - z) ** 2)
    inv_r[inv_r > 0] = 1.0 / inv_r[inv_r > 0]
    potential = G * np.sum(np.triu(-(mass * mass.T) * inv_r, 1))
    return kinetic, potential


def leapfrog(pos, vel, mass, dt=0.01, steps=4):
    acc = accelerations(pos, mass)
    for _ in range(steps):
        vel += acc * dt / 2.0
        pos += vel * dt
        acc = accelerations(pos, mass)
        vel += acc * dt / 2.0
    return (pos, vel) + energies(pos, vel, mass)


def bodies(n, seed=0):
    rng = np.random.default_rng(seed)
    mass = 20.0 * np.ones((n, 1)) / n
    pos = rng.standard_normal((n, 3))
    pos[3] = pos[1]                       # two bodies at one place: a zero distance off the diagonal
    vel = rng.standard_normal((n, 3))
    vel -= np.mean(mass * vel, 0) / np.mean(mass)
    return pos, vel, mass


@pytest.mark.parametrize("n,devices", [(8, 2), (10, 4), (9, 1)])
def test_n_body_under_jit_matches_numpy(n, devices, compiler):
    pos, vel, mass = bodies(n)
    want = leapfrog(pos.copy(), vel.copy(), mass.copy())
    mesh = spmd.Mesh((devices,), ("bodies",))
    rows = mesh.sharding("bodies", None)
    f = spmd.jit(leapfrog, in_shardings=(rows, rows, rows), backend=compiler)
    p, v = pos.copy(), vel.copy()
    got = f(p, v, mass)
    for g, w in zip(got, want):
        g = np.asarray(g.numpy() if hasattr(g, "numpy") else g)
        assert g.shape == np.shape(w) and g.dtype == np.asarray(w).dtype
        np.testing.assert_allclose(g, w, rtol=1e-11, atol=1e-12)
    # numpy updates the arguments in place (vel += ..., pos += ...), and so does jit
    np.testing.assert_allclose(p, want[0], rtol=1e-11)
    np.testing.assert_allclose(v, want[1], rtol=1e-11)
