"""European and Asian call prices by Monte Carlo over given normal draws (geometric Brownian
motion paths by np.cumsum), with the standard error."""
import numpy as np


def step(Z, S0, K, r, sigma, T):
    npaths, nsteps = Z.shape
    dt = T / nsteps
    logS = np.log(S0) + np.cumsum((r - 0.5 * sigma ** 2) * dt + sigma * np.sqrt(dt) * Z, axis=1)
    S = np.exp(logS)
    disc = np.exp(-r * T)
    euro = disc * np.maximum(S[:, -1] - K, 0)
    asian = disc * np.maximum(S.mean(axis=1) - K, 0)
    return euro.mean(), euro.std(ddof=1) / np.sqrt(npaths), asian.mean()


def make(rng):
    return (rng.standard_normal((1024, 16)), 100.0, 105.0, 0.03, 0.2, 1.0), (("d", None),) + (None,) * 5
