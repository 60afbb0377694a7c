"""A vanilla RNN language-model step: forward over the sequence storing hidden states in
dicts, softmax losses, backpropagation through time with gradient clipping (np.clip with
out=), Adagrad update of the parameters in place."""
import numpy as np


def step(inputs, targets, hprev, Wxh, Whh, Why, bh, by, mem):
    xs, hs, ps = {}, {}, {}
    hs[-1] = np.copy(hprev)
    loss = 0
    V = Wxh.shape[1]
    for t in range(len(inputs)):
        xs[t] = np.zeros((V, 1))
        xs[t][inputs[t]] = 1
        hs[t] = np.tanh(Wxh @ xs[t] + Whh @ hs[t - 1] + bh)
        ys = Why @ hs[t] + by
        ps[t] = np.exp(ys) / np.sum(np.exp(ys))
        loss += -np.log(ps[t][targets[t], 0])
    dWxh, dWhh, dWhy = np.zeros_like(Wxh), np.zeros_like(Whh), np.zeros_like(Why)
    dbh, dby = np.zeros_like(bh), np.zeros_like(by)
    dhnext = np.zeros_like(hs[0])
    for t in reversed(range(len(inputs))):
        dy = np.copy(ps[t])
        dy[targets[t]] -= 1
        dWhy += dy @ hs[t].T
        dby += dy
        dh = Why.T @ dy + dhnext
        dhraw = (1 - hs[t] * hs[t]) * dh
        dbh += dhraw
        dWxh += dhraw @ xs[t].T
        dWhh += dhraw @ hs[t - 1].T
        dhnext = Whh.T @ dhraw
    for d in [dWxh, dWhh, dWhy, dbh, dby]:
        np.clip(d, -5, 5, out=d)
    for p, d, m in zip([Wxh, Whh, Why, bh, by], [dWxh, dWhh, dWhy, dbh, dby], mem):
        m += d * d
        p += -0.1 * d / np.sqrt(m + 1e-8)
    return loss, hs[len(inputs) - 1]


def make(rng):
    V, H, T = 12, 16, 8
    inputs = rng.integers(0, V, T)
    targets = rng.integers(0, V, T)
    Wxh = rng.standard_normal((H, V)) * 0.1
    Whh = rng.standard_normal((H, H)) * 0.1
    Why = rng.standard_normal((V, H)) * 0.1
    bh, by = np.zeros((H, 1)), np.zeros((V, 1))
    mem = [np.zeros_like(p) for p in (Wxh, Whh, Why, bh, by)]
    return ((inputs, targets, np.zeros((H, 1)), Wxh, Whh, Why, bh, by, mem),
            (None, None, None, ("d", None), None, ("d", None), None, None, None))

