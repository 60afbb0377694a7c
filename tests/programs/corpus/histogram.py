"""Histograms: np.histogram with fixed bins, a density, and a hand-made one by bin index and
np.bincount; the mode bin's centre."""
import numpy as np


def step(x, nbins):
    counts, edges = np.histogram(x, bins=nbins, range=(-4.0, 4.0))
    dens, _ = np.histogram(x, bins=edges, density=True)
    i = np.clip(((x + 4.0) / 8.0 * nbins).astype(int), 0, nbins - 1)
    inside = (x >= -4.0) & (x <= 4.0)
    manual = np.bincount(i[inside], minlength=nbins)
    mode = 0.5 * (edges[np.argmax(counts)] + edges[np.argmax(counts) + 1])
    return counts, dens, manual, mode


def make(rng):
    return (rng.standard_normal(4000), 32), (("d",), None)


STATIC = (1,)
