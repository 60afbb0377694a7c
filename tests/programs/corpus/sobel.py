"""Sobel edge magnitude and direction on a grayscale image, borders left zero."""
import numpy as np


def step(img):
    gx = np.zeros_like(img)
    gy = np.zeros_like(img)
    gx[1:-1, 1:-1] = ((img[:-2, 2:] + 2 * img[1:-1, 2:] + img[2:, 2:])
                      - (img[:-2, :-2] + 2 * img[1:-1, :-2] + img[2:, :-2]))
    gy[1:-1, 1:-1] = ((img[2:, :-2] + 2 * img[2:, 1:-1] + img[2:, 2:])
                      - (img[:-2, :-2] + 2 * img[:-2, 1:-1] + img[:-2, 2:]))
    mag = np.hypot(gx, gy)
    mag *= 255.0 / mag.max()
    theta = np.arctan2(gy, gx)
    return mag, theta


def make(rng):
    img = np.zeros((64, 64))
    img[16:48, 16:48] = 1.0
    img += 0.05 * rng.random((64, 64))
    return (img,), (("a", "b"),)


MESH = ((2, 2), ("a", "b"))
