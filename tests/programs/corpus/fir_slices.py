"""FIR filter written as a sum of shifted slices into a preallocated output (y[k:] += h[k] *
x[:n-k]), then decimation by a stride and the signal-to-noise ratio in decibels."""
import numpy as np


def step(x, h, clean):
    n = len(x)
    y = np.zeros(n)
    for k in range(len(h)):
        y[k:] += h[k] * x[:n - k]
    delay = (len(h) - 1) // 2
    aligned = y[delay:]
    err = aligned - clean[:n - delay]
    snr = 10 * np.log10(np.sum(clean[:n - delay] ** 2) / np.sum(err ** 2))
    return y, y[::4], snr


def make(rng):
    n = 4000
    t = np.arange(n)
    clean = np.sin(2 * np.pi * t / 200)
    x = clean + 0.3 * rng.standard_normal(n)
    h = np.ones(9) / 9
    return (x, h, clean), (("d",), None, ("d",))
