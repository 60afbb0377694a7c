"""FIR low-pass filter designed by a windowed sinc, applied with np.convolve ("same" and
"valid"), and its frequency response sampled by np.fft.rfft of the zero-padded taps."""
import numpy as np


def step(x, cutoff, ntaps):
    n = np.arange(ntaps) - (ntaps - 1) / 2
    h = np.sinc(2 * cutoff * n) * np.hamming(ntaps)
    h /= np.sum(h)
    y_same = np.convolve(x, h, mode="same")
    y_valid = np.convolve(x, h, mode="valid")
    H = np.abs(np.fft.rfft(h, 256))
    return y_same, y_valid, H


def make(rng):
    t = np.arange(2048) / 2048
    x = np.sin(2 * np.pi * 10 * t) + 0.5 * np.sin(2 * np.pi * 300 * t) + 0.1 * rng.standard_normal(2048)
    return (x, 0.05, 31), (("d",), None, None)


STATIC = (1, 2)
