"""Welford's online mean and variance, one row of observations at a time (per column)."""
import numpy as np


def step(X):
    n = 0
    mean = np.zeros(X.shape[1])
    M2 = np.zeros(X.shape[1])
    for i in range(X.shape[0]):
        n += 1
        delta = X[i] - mean
        mean += delta / n
        M2 += delta * (X[i] - mean)
    var = M2 / (n - 1)
    return mean, var


def make(rng):
    return (rng.standard_normal((40, 256)) * 3 + 1,), ((None, "d"),)
