"""Binary morphology with a 3x3 cross: erosion by logical and of shifted views, then an
opening (erosion then dilation) and the boundary pixels; counts with np.count_nonzero."""
import numpy as np


def erode(b):
    out = b.copy()
    out[1:, :] &= b[:-1, :]
    out[:-1, :] &= b[1:, :]
    out[:, 1:] &= b[:, :-1]
    out[:, :-1] &= b[:, 1:]
    return out


def dilate(b):
    out = b.copy()
    out[1:, :] |= b[:-1, :]
    out[:-1, :] |= b[1:, :]
    out[:, 1:] |= b[:, :-1]
    out[:, :-1] |= b[:, 1:]
    return out


def step(img, threshold):
    b = img > threshold
    e = erode(b)
    opened = dilate(e)
    boundary = b & ~e
    return e, opened, boundary, np.count_nonzero(boundary)


def make(rng):
    y, x = np.mgrid[0:48, 0:48]
    img = ((x - 24) ** 2 + (y - 20) ** 2 < 150).astype(float) + 0.3 * rng.random((48, 48))
    return (img, 0.8), (("d", None), None)
