"""numpy's power-basis polynomial functions: np.vander, np.polyval, np.polyfit, computed
as numpy computes them (vander's columns as running products, polyval by Horner's rule,
polyfit as a least-squares fit of the column-scaled Vandermonde matrix), so values match
numpy's to the last bits where the same operations run in the same order (polyfit's
solve is an SVD, numpy's LAPACK gelsd: close, not bit-equal)."""
from __future__ import annotations

import numpy as np

from ...errors import user_loc
from .. import core, reductions as red, shapes
from .. import elementwise as ew
from . import linalg as LA


def vander(x, N=None, increasing=False):
    x = core.asarray(x)
    if x.ndim != 1:
        raise ValueError(f"np.vander: x must be a one-dimensional array or sequence (at {user_loc()})")
    n = x.shape[0] if N is None else int(N)
    dt = np.promote_types(x.dtype, int)
    x = core.astype(x, dt)
    cols, cur = [], None
    for k in range(n):
        cur = core.ones_like(x) if k == 0 else (x if k == 1 else ew.multiply(cur, x))
        cols.append(cur)
    if not increasing:
        cols = cols[::-1]
    if not cols:
        return core.zeros_like(x, shape=(x.shape[0], 0))
    return shapes.stack(cols, axis=1)


def polyval(p, x):
    p, x = core.asarray(p), core.asarray(x, t=core.trace_of(p, x))
    y = core.zeros_like(x)
    for i in range(p.shape[0]):
        y = ew.add(ew.multiply(y, x), p[i])
    return y


def polyfit(x, y, deg, rcond=None, full=False, w=None, cov=False):
    """np.polyfit. numpy warns (RankWarning) when the fit is rank-deficient; that needs
    the rank's value, which a compiled program has only when it runs: spmd does not warn
    (full=True returns the rank)."""
    if cov:
        raise NotImplementedError(f"np.polyfit: cov= is not supported in spmd (at {user_loc()}); compute the "
                                  f"covariance from full=True's results")
    order = int(deg) + 1
    t = core.trace_of(x, y)
    x = ew.add(core.asarray(x, t=t), 0.0)
    y = ew.add(core.asarray(y, t=t), 0.0)
    if deg < 0:
        raise ValueError(f"expected deg >= 0 (at {user_loc()})")
    if x.ndim != 1:
        raise TypeError(f"expected 1D vector for x (at {user_loc()})")
    if x.shape[0] == 0:
        raise TypeError(f"expected non-empty vector for x (at {user_loc()})")
    if y.ndim < 1 or y.ndim > 2:
        raise TypeError(f"expected 1D or 2D array for y (at {user_loc()})")
    if x.shape[0] != y.shape[0]:
        raise TypeError(f"expected x and y to have same length (at {user_loc()})")
    if rcond is None:           # (numpy's default is a numpy float, and full=True returns it)
        rcond = x.shape[0] * np.finfo(x.dtype).eps
    lhs = vander(x, order)
    rhs = y
    if w is not None:
        w = ew.add(core.asarray(w, t=t), 0.0)
        if w.ndim != 1:
            raise TypeError(f"expected a 1-d array for weights (at {user_loc()})")
        if w.shape[0] != y.shape[0]:
            raise TypeError(f"expected w and y to have the same length (at {user_loc()})")
        lhs = ew.multiply(lhs, shapes.reshape(w, (w.shape[0], 1)))
        rhs = ew.multiply(rhs, w if rhs.ndim == 1 else shapes.reshape(w, (w.shape[0], 1)))
    scale = ew.sqrt(red.sum(ew.multiply(lhs, lhs), axis=0))
    lhs = ew.true_divide(lhs, scale)
    c, resids, rank, s = LA.lstsq(lhs, rhs, float(rcond))
    c = ew.true_divide(c, scale if c.ndim == 1 else shapes.reshape(scale, (order, 1)))
    if full:
        return c, resids, rank, s, rcond
    return c
