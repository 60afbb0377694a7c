"""Histogram equalisation of an 8-bit image (held as int64: spmd has no uint8): np.histogram of the flattened pixels, the
normalised cumulative histogram, and np.interp to map each pixel through it."""
import numpy as np


def step(img):
    hist, bins = np.histogram(img.flatten(), 256, (0, 256))
    cdf = hist.cumsum()
    cdf_normalized = cdf * hist.max() / cdf.max()
    cdf_m = (cdf - cdf.min()) * 255 / (cdf.max() - cdf.min())
    out = np.interp(img.flatten(), bins[:-1], cdf_m)
    return out.reshape(img.shape).astype(np.int64), cdf_normalized


def make(rng):
    img = np.clip(rng.normal(90, 25, (64, 48)), 0, 255).astype(np.int64)
    return (img,), (("d", None),)
