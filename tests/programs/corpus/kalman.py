"""Kalman filter for a constant-velocity target, predict and update per measurement,
np.linalg.inv of the innovation covariance; filtered states and the log-likelihood."""
import numpy as np


def step(zs, dt, q, r):
    F = np.array([[1, dt, 0, 0], [0, 1, 0, 0], [0, 0, 1, dt], [0, 0, 0, 1]])
    H = np.array([[1.0, 0, 0, 0], [0, 0, 1.0, 0]])
    Q = q * np.eye(4)
    R = r * np.eye(2)
    x = np.zeros(4)
    P = np.eye(4) * 10.0
    out = np.zeros((zs.shape[0], 4))
    ll = 0.0
    for k in range(zs.shape[0]):
        x = F @ x
        P = F @ P @ F.T + Q
        y = zs[k] - H @ x
        S = H @ P @ H.T + R
        Si = np.linalg.inv(S)
        K = P @ H.T @ Si
        x = x + K @ y
        P = (np.eye(4) - K @ H) @ P
        out[k] = x
        ll += -0.5 * (y @ Si @ y + np.log(np.linalg.det(S)) + 2 * np.log(2 * np.pi))
    return out, P, ll


def make(rng):
    T = 24
    t = np.arange(T) * 0.1
    truth = np.stack([1 + 2 * t, 3 - t], axis=1)
    zs = truth + 0.2 * rng.standard_normal((T, 2))
    return (zs, 0.1, 0.01, 0.04), (None, None, None, None)


STATIC = (1, 2, 3)
RTOL = 1e-8
