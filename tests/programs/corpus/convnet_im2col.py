"""One SGD step of a small ConvNet: conv (3x3, via im2col) -> ReLU -> 2x2 max pool -> dense
-> softmax cross-entropy; backprop by hand (col2im with np.add.at), weights updated in place."""
import numpy as np


def im2col_indices(C, H, W, kh, kw):
    Ho, Wo = H - kh + 1, W - kw + 1
    i0 = np.tile(np.repeat(np.arange(kh), kw), C)
    i1 = np.repeat(np.arange(Ho), Wo)
    j0 = np.tile(np.arange(kw), kh * C)
    j1 = np.tile(np.arange(Wo), Ho)
    i = i0.reshape(-1, 1) + i1.reshape(1, -1)
    j = j0.reshape(-1, 1) + j1.reshape(1, -1)
    k = np.repeat(np.arange(C), kh * kw).reshape(-1, 1)
    return k, i, j


def step(X, y, Wc, bc, Wd, bd, lr):
    N, C, H, W = X.shape
    F, _, kh, kw = Wc.shape
    Ho, Wo = H - kh + 1, W - kw + 1
    k, i, j = im2col_indices(C, H, W, kh, kw)
    cols = X[:, k, i, j]                                  # (N, C*kh*kw, Ho*Wo)
    cols = cols.transpose(1, 2, 0).reshape(C * kh * kw, -1)
    out = Wc.reshape(F, -1) @ cols + bc.reshape(-1, 1)    # (F, Ho*Wo*N)
    out = out.reshape(F, Ho, Wo, N).transpose(3, 0, 1, 2)
    a = np.maximum(out, 0)
    # 2x2 max pool
    p = a.reshape(N, F, Ho // 2, 2, Wo // 2, 2)
    pooled = p.max(axis=(3, 5))
    flat = pooled.reshape(N, -1)
    logits = flat @ Wd + bd
    logits -= logits.max(axis=1, keepdims=True)
    probs = np.exp(logits)
    probs /= probs.sum(axis=1, keepdims=True)
    loss = -np.mean(np.log(probs[np.arange(N), y]))
    # backward
    dlogits = probs.copy()
    dlogits[np.arange(N), y] -= 1
    dlogits /= N
    dWd = flat.T @ dlogits
    dbd = dlogits.sum(axis=0)
    dflat = dlogits @ Wd.T
    dpooled = dflat.reshape(pooled.shape)
    mask = (p == pooled[:, :, :, None, :, None])
    da = (mask * dpooled[:, :, :, None, :, None]).reshape(a.shape)
    dout = da * (out > 0)
    dout_r = dout.transpose(1, 2, 3, 0).reshape(F, -1)
    dWc = (dout_r @ cols.T).reshape(Wc.shape)
    dbc = dout_r.sum(axis=1)
    dcols = Wc.reshape(F, -1).T @ dout_r
    dX = np.zeros_like(X)
    dcols = dcols.reshape(C * kh * kw, -1, N).transpose(2, 0, 1)
    np.add.at(dX, (slice(None), k, i, j), dcols)
    Wc -= lr * dWc
    bc -= lr * dbc
    Wd -= lr * dWd
    bd -= lr * dbd
    return float(loss), dX


def make(rng):
    N, C, H, W, F, K = 8, 2, 8, 8, 4, 3
    X = rng.standard_normal((N, C, H, W))
    y = rng.integers(0, K, N)
    Wc = 0.3 * rng.standard_normal((F, C, 3, 3))
    bc = np.zeros(F)
    Wd = 0.3 * rng.standard_normal((F * 3 * 3, K))
    bd = np.zeros(K)
    return (X, y, Wc, bc, Wd, bd, 0.1), (("d", None, None, None), ("d",), None, None, None, None, None)
