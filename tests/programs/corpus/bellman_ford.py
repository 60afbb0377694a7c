"""Bellman-Ford single-source shortest paths on an edge list: every round relaxes all edges
at once with np.minimum.at; predecessors recovered from the final distances."""
import numpy as np


def step(src, dst, w, n, source):
    dist = np.full(n, np.inf)
    dist[source] = 0.0
    for _ in range(n - 1):
        cand = dist[src] + w
        np.minimum.at(dist, dst, cand)
    tight = dist[src] + w == dist[dst]
    pred = np.full(n, -1)
    pred[dst[tight]] = src[tight]
    reachable = np.isfinite(dist)
    return dist, reachable, pred[source]


def make(rng):
    n, m = 40, 200
    src = rng.integers(0, n, m)
    dst = rng.integers(0, n, m)
    w = rng.random(m) * 10
    return (src, dst, w, n, 0), (("d",), ("d",), ("d",), None, None)


STATIC = (3, 4)
