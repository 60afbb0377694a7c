"""Bootstrap of the mean with a fixed table of resample indices: standard error and a
percentile confidence interval."""
import numpy as np


def step(x, idx, alpha):
    B = idx.shape[0]
    means = np.empty(B)
    for b in range(B):
        means[b] = x[idx[b]].mean()
    se = means.std(ddof=1)
    lo, hi = np.percentile(means, [100 * alpha / 2, 100 * (1 - alpha / 2)])
    return means, se, lo, hi


def make(rng):
    n, B = 500, 40
    x = rng.exponential(2.0, n)
    idx = rng.integers(0, n, (B, n))
    return (x, idx, 0.1), (None, ("d", None), None)


STATIC = (2,)
