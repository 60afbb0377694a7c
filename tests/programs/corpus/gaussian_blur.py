"""Separable Gaussian blur by weighted sums of shifted slices of an edge-padded image."""
import numpy as np


def step(img, sigma):
    radius = 2
    x = np.arange(-radius, radius + 1)
    k = np.exp(-x ** 2 / (2 * sigma ** 2))
    k = k / k.sum()
    h, w = img.shape
    p = np.pad(img, radius, mode="edge")
    tmp = np.zeros((h + 2 * radius, w))
    for i in range(2 * radius + 1):
        tmp += k[i] * p[:, i:i + w]
    out = np.zeros((h, w))
    for i in range(2 * radius + 1):
        out += k[i] * tmp[i:i + h, :]
    return out


def make(rng):
    return (rng.random((48, 64)), 1.2), (("d", None), None)


STATIC = (1,)
