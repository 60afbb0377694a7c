"""Multi-head causal self-attention forward pass written with np.einsum: heads split by
reshape and transpose, a causal mask from np.triu, a numerically stable softmax, and the
output projection."""
import numpy as np


def softmax(x, axis=-1):
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


def step(x, wq, wk, wv, wo, heads):
    b, t, d = x.shape
    hd = d // heads
    q = (x @ wq).reshape(b, t, heads, hd).transpose(0, 2, 1, 3)
    k = (x @ wk).reshape(b, t, heads, hd).transpose(0, 2, 1, 3)
    v = (x @ wv).reshape(b, t, heads, hd).transpose(0, 2, 1, 3)
    att = np.einsum("bhqd,bhkd->bhqk", q, k) / np.sqrt(hd)
    mask = np.triu(np.ones((t, t), dtype=bool), k=1)
    att = np.where(mask, -np.inf, att)
    att = softmax(att, axis=-1)
    y = np.einsum("bhqk,bhkd->bhqd", att, v)
    y = y.transpose(0, 2, 1, 3).reshape(b, t, d)
    return y @ wo, att.mean(axis=1)


def make(rng):
    b, t, d = 8, 16, 32
    ws = [rng.standard_normal((d, d)) / np.sqrt(d) for _ in range(4)]
    return (rng.standard_normal((b, t, d)), *ws, 4), (("d", None, None), None, None, None, None, None)


STATIC = (5,)
