"""1-D electrostatic particle-in-cell: cloud-in-cell charge deposit with np.add.at, field from
the potential by a periodic finite-difference solve (FFT), gather and leapfrog push."""
import numpy as np


def step(x, v, L, ng, dt, nsteps):
    dx = L / ng
    k = 2 * np.pi * np.fft.rfftfreq(ng, d=dx)
    k[0] = 1.0
    for _ in range(nsteps):
        j = np.floor(x / dx).astype(int)
        frac = x / dx - j
        j0 = j % ng
        j1 = (j + 1) % ng
        rho = np.zeros(ng)
        np.add.at(rho, j0, 1 - frac)
        np.add.at(rho, j1, frac)
        rho = rho / (x.shape[0] / ng) - 1.0
        phi_k = np.fft.rfft(rho) / k ** 2
        phi_k[0] = 0.0
        phi = np.fft.irfft(phi_k, n=ng)
        E = -(np.roll(phi, -1) - np.roll(phi, 1)) / (2 * dx)
        Ep = E[j0] * (1 - frac) + E[j1] * frac
        v = v - Ep * dt
        x = (x + v * dt) % L
    return x, v, rho


def make(rng):
    n = 4096
    L = 2 * np.pi
    x = rng.uniform(0, L, n)
    v = rng.standard_normal(n) + np.where(np.arange(n) % 2 == 0, 1.0, -1.0)
    return (x, v, L, 64, 0.1, 3), (("d",), ("d",), None, None, None, None)


STATIC = (2, 3, 4, 5)
RTOL = 1e-7
