"""A variational autoencoder, one step: MLP encoder to (mu, logvar), reparameterised sample
with given noise, sigmoid decoder, Bernoulli likelihood + KL; gradients by hand; SGD on a
dict of parameters."""
import numpy as np


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def step(params, x, eps, lr):
    W1, b1 = params["W1"], params["b1"]
    Wmu, bmu, Wlv, blv = params["Wmu"], params["bmu"], params["Wlv"], params["blv"]
    W2, b2, W3, b3 = params["W2"], params["b2"], params["W3"], params["b3"]
    n = x.shape[0]
    # forward
    h = np.tanh(x @ W1 + b1)
    mu = h @ Wmu + bmu
    logvar = h @ Wlv + blv
    std = np.exp(0.5 * logvar)
    z = mu + std * eps
    h2 = np.tanh(z @ W2 + b2)
    xr = sigmoid(h2 @ W3 + b3)
    rec = -np.sum(x * np.log(xr + 1e-8) + (1 - x) * np.log(1 - xr + 1e-8)) / n
    kl = -0.5 * np.sum(1 + logvar - mu ** 2 - np.exp(logvar)) / n
    # backward
    dlogits = (xr - x) / n
    grads = {}
    grads["W3"] = h2.T @ dlogits
    grads["b3"] = dlogits.sum(0)
    dh2 = dlogits @ W3.T * (1 - h2 ** 2)
    grads["W2"] = z.T @ dh2
    grads["b2"] = dh2.sum(0)
    dz = dh2 @ W2.T
    dmu = dz + mu / n
    dlogvar = dz * eps * 0.5 * std + 0.5 * (np.exp(logvar) - 1) / n
    grads["Wmu"] = h.T @ dmu
    grads["bmu"] = dmu.sum(0)
    grads["Wlv"] = h.T @ dlogvar
    grads["blv"] = dlogvar.sum(0)
    dh = (dmu @ Wmu.T + dlogvar @ Wlv.T) * (1 - h ** 2)
    grads["W1"] = x.T @ dh
    grads["b1"] = dh.sum(0)
    new = {k: params[k] - lr * grads[k] for k in params}
    return new, rec + kl


def make(rng):
    n, d, hdim, zdim = 64, 20, 16, 4
    shapes = {"W1": (d, hdim), "b1": (hdim,), "Wmu": (hdim, zdim), "bmu": (zdim,), "Wlv": (hdim, zdim),
              "blv": (zdim,), "W2": (zdim, hdim), "b2": (hdim,), "W3": (hdim, d), "b3": (d,)}
    params = {k: 0.2 * rng.standard_normal(s) for k, s in shapes.items()}
    x = (rng.random((n, d)) < 0.3).astype(float)
    eps = rng.standard_normal((n, zdim))
    return (params, x, eps, 0.1), (None, ("d", None), ("d", None), None)
