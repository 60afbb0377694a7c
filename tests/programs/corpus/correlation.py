"""Covariance and correlation matrices (np.cov, np.corrcoef and by hand), z-scores."""
import numpy as np


def step(X):
    mu = X.mean(axis=0)
    sd = X.std(axis=0, ddof=1)
    Z = (X - mu) / sd
    C = np.cov(X, rowvar=False)
    R = np.corrcoef(X, rowvar=False)
    R2 = Z.T @ Z / (X.shape[0] - 1)
    return C, R, R2


def make(rng):
    n, d = 512, 6
    X = rng.standard_normal((n, d)) @ rng.standard_normal((d, d))
    return (X,), (("d", None),)
