"""Detrending and smoothing signals with low-order polynomials: np.polyfit / np.polyval for a
global trend, and a least-squares fit by hand with np.vander and np.linalg.lstsq."""
import numpy as np


def step(t, y, deg):
    coef = np.polyfit(t, y, deg)
    trend = np.polyval(coef, t)
    resid = y - trend
    V = np.vander(t, deg + 1)
    c2, res, rank, sv = np.linalg.lstsq(V, y, rcond=None)
    return resid, coef, V @ c2, rank, np.std(resid)


def make(rng):
    t = np.linspace(0.0, 4.0, 400)
    y = 0.5 * t ** 2 - t + 2 + np.sin(8 * t) * 0.3 + 0.05 * rng.standard_normal(400)
    return (t, y, 3), (("d",), ("d",), None)


STATIC = (2,)
RTOL = 1e-7
