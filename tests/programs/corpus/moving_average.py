"""Moving average by the cumulative-sum trick and a rolling standard deviation; Bollinger-band
crossings counted."""
import numpy as np


def step(price, w):
    c = np.cumsum(np.insert(price, 0, 0.0))
    ma = (c[w:] - c[:-w]) / w
    c2 = np.cumsum(np.insert(price ** 2, 0, 0.0))
    var = (c2[w:] - c2[:-w]) / w - ma ** 2
    sd = np.sqrt(np.maximum(var, 0))
    p = price[w - 1:]
    above = p > ma + 2 * sd
    below = p < ma - 2 * sd
    return ma, sd, int(above.sum()), int(below.sum())


def make(rng):
    price = 100 + np.cumsum(rng.standard_normal(3000))
    return (price, 20), (("d",), None)


STATIC = (1,)
RTOL = 1e-7
