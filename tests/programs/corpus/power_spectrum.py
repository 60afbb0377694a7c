"""Welch power spectral density: Hann-windowed overlapping segments, |rfft|^2 averaged, one-
sided scaling; the peak frequency."""
import numpy as np


def step(x, fs, nperseg):
    step_ = nperseg // 2
    win = np.hanning(nperseg)
    scale = 1.0 / (fs * np.sum(win ** 2))
    nseg = (len(x) - nperseg) // step_ + 1
    psd = np.zeros(nperseg // 2 + 1)
    for s in range(nseg):
        seg = x[s * step_: s * step_ + nperseg]
        seg = (seg - seg.mean()) * win
        psd += np.abs(np.fft.rfft(seg)) ** 2
    psd *= scale / nseg
    psd[1:-1] *= 2
    freqs = np.fft.rfftfreq(nperseg, 1 / fs)
    return freqs, psd, freqs[np.argmax(psd)]


def make(rng):
    fs = 1000.0
    t = np.arange(4096) / fs
    x = np.sin(2 * np.pi * 123 * t) + rng.standard_normal(4096)
    return (x, fs, 256), (("d",), None, None)


STATIC = (1, 2)
