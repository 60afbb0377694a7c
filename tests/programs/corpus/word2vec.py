"""Skip-gram with negative sampling: one minibatch SGD update of the two embedding tables,
the sparse gradients scattered with np.add.at (a word can repeat in the batch)."""
import numpy as np


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def step(W_in, W_out, center, context, negatives, lr):
    v = W_in[center]                                    # (B, D)
    u_pos = W_out[context]                              # (B, D)
    u_neg = W_out[negatives]                            # (B, K, D)
    s_pos = sigmoid(np.sum(v * u_pos, axis=1))
    s_neg = sigmoid(-np.einsum("bkd,bd->bk", u_neg, v))
    loss = -np.sum(np.log(s_pos)) - np.sum(np.log(s_neg))
    g_pos = (s_pos - 1)[:, None]                        # d loss / d score
    g_neg = (1 - s_neg)[:, :, None]
    grad_v = g_pos * u_pos + np.sum(g_neg * u_neg, axis=1)
    grad_u_pos = g_pos * v
    grad_u_neg = g_neg * v[:, None, :]
    np.add.at(W_in, center, -lr * grad_v)
    np.add.at(W_out, context, -lr * grad_u_pos)
    np.add.at(W_out, negatives.ravel(), -lr * grad_u_neg.reshape(-1, W_out.shape[1]))
    return loss / center.shape[0]


def make(rng):
    V, D, B, K = 50, 16, 32, 5
    W_in = (rng.random((V, D)) - 0.5) / D
    W_out = 0.1 * rng.standard_normal((V, D))
    center = rng.integers(0, V, B)
    context = rng.integers(0, V, B)
    negatives = rng.integers(0, V, (B, K))
    return (W_in, W_out, center, context, negatives, 0.05), (None, None, ("d",), ("d",), ("d", None), None)
