"""Bootstrap particle filter for a 1-D random walk observed in noise: predict, weight by a
Gaussian likelihood, estimate with np.average, systematic resampling by np.cumsum and
np.searchsorted, particles re-indexed by the drawn indices."""
import numpy as np


def step(particles, zs, noise, offsets, q, r):
    n = particles.shape[0]
    weights = np.ones(n) / n
    estimates = []
    for t in range(zs.shape[0]):
        particles = particles + noise[t] * q
        weights = weights * np.exp(-0.5 * ((zs[t] - particles) / r) ** 2)
        weights += 1.e-300
        weights /= np.sum(weights)
        estimates.append(np.average(particles, weights=weights))
        positions = (np.arange(n) + offsets[t]) / n
        cumulative = np.cumsum(weights)
        cumulative[-1] = 1.0
        indexes = np.searchsorted(cumulative, positions)
        particles = particles[indexes]
        weights.fill(1.0 / n)
    return np.array(estimates), particles


def make(rng):
    n, steps = 256, 6
    truth = np.cumsum(rng.standard_normal(steps))
    zs = truth + 0.5 * rng.standard_normal(steps)
    return ((rng.standard_normal(n), zs, rng.standard_normal((steps, n)), rng.random(steps), 0.3, 0.5),
            (("d",), None, (None, "d"), None, None, None))


STATIC = (4, 5)
