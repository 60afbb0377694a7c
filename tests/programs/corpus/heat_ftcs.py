"""2-D heat equation, forward time centred space, Dirichlet walls, written into a new array."""
import numpy as np


def step(T, alpha, nsteps):
    ny, nx = np.size(T, 0), np.size(T, 1)
    for _ in range(nsteps):
        Tn = T.copy()
        for i in range(1, 3):            # two hot spots held fixed
            Tn[ny // 3 * i, nx // 2] = 100.0
        T[1:-1, 1:-1] = Tn[1:-1, 1:-1] + alpha * (Tn[2:, 1:-1] + Tn[:-2, 1:-1] + Tn[1:-1, 2:]
                                                   + Tn[1:-1, :-2] - 4 * Tn[1:-1, 1:-1])
    return T.mean(), T.max()


def make(rng):
    T = rng.random((40, 40)) * 10
    return (T, 0.2, 10), (("a", "b"), None, None)


MESH = ((2, 2), ("a", "b"))
STATIC = (2,)
