"""Holt's linear exponential smoothing of many series at once (time along axis 0), one-step
forecasts and their mean squared error."""
import numpy as np


def step(Y, alpha, beta):
    T = Y.shape[0]
    level = np.empty_like(Y)
    trend = np.empty_like(Y)
    fc = np.zeros_like(Y)
    level[0] = Y[0]
    trend[0] = Y[1] - Y[0]
    for t in range(1, T):
        fc[t] = level[t - 1] + trend[t - 1]
        level[t] = alpha * Y[t] + (1 - alpha) * (level[t - 1] + trend[t - 1])
        trend[t] = beta * (level[t] - level[t - 1]) + (1 - beta) * trend[t - 1]
    mse = np.mean((Y[1:] - fc[1:]) ** 2, axis=0)
    return level, trend, mse


def make(rng):
    T, S = 30, 128
    Y = np.cumsum(rng.standard_normal((T, S)), axis=0) + np.linspace(0, 5, T)[:, None]
    return (Y, 0.3, 0.1), ((None, "d"), None, None)
