"""Viterbi decoding of a hidden Markov model in log space: a table of best scores and
back-pointers filled row by row, then the path traced backwards through the pointers."""
import numpy as np


def step(log_A, log_B, log_pi, obs):
    T, S = len(obs), log_A.shape[0]
    delta = np.zeros((T, S))
    psi = np.zeros((T, S), dtype=int)
    delta[0] = log_pi + log_B[:, obs[0]]
    for t in range(1, T):
        scores = delta[t - 1][:, None] + log_A
        psi[t] = np.argmax(scores, axis=0)
        delta[t] = np.max(scores, axis=0) + log_B[:, obs[t]]
    path = np.zeros(T, dtype=int)
    path[-1] = np.argmax(delta[-1])
    for t in range(T - 2, -1, -1):
        path[t] = psi[t + 1, path[t + 1]]
    return path, delta[-1].max()


def make(rng):
    S, O, T = 4, 6, 20
    A = rng.random((S, S)) + np.eye(S) * 3
    A /= A.sum(axis=1, keepdims=True)
    B = rng.random((S, O))
    B /= B.sum(axis=1, keepdims=True)
    pi = np.full(S, 1 / S)
    obs = rng.integers(0, O, T)
    return (np.log(A), np.log(B), np.log(pi), obs), (None, None, None, None)
