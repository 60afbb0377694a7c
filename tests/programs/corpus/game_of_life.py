"""Conway's Game of Life on a torus: neighbour counts as a sum of np.roll shifts, the rule by
boolean algebra, population per generation."""
import numpy as np


def step(board, generations):
    pop = []
    for _ in range(generations):
        n = sum(np.roll(np.roll(board, i, 0), j, 1)
                for i in (-1, 0, 1) for j in (-1, 0, 1) if (i, j) != (0, 0))
        board = (n == 3) | (board & (n == 2))
        pop.append(board.sum())
    return board, pop


def make(rng):
    return (rng.random((32, 32)) < 0.3, 4), (("d", None), None)


STATIC = (1,)
