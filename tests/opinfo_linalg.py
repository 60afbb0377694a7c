"""OpInfo entries for the linalg family (inv, solve, det, slogdet, cholesky, eig, eigh, svd,
qr), sort / argsort and atan2. Imported by opinfo.py; see its docstring.

Expected values are written independently of the ops' refs where an independent
formula exists (inv through solve, solve through inv, det through eigenvalues,
cholesky by the Cholesky-Banachiewicz loop, sort by a stable insertion order). The
factorizations whose signs are a LAPACK convention (eigh's vectors, svd's U and Vh,
qr's Q and R) are checked against numpy.linalg itself -- numpy is the spec -- plus
their defining identities in tests/test_numpy_functions.py.
"""
import numpy as np

from opinfo import entry, rand

FLOATS = ("float32", "float64")
# batch shapes x matrix sizes: empty batch, empty matrix, 1x1, a stack
SQUARE = [(3, 3), (1, 1), (2, 4, 4), (0, 2, 2), (0, 0), (2, 1, 3, 3)]
RECT = [(3, 2), (2, 4), (1, 1), (2, 3, 3), (0, 2), (2, 0), (2, 1, 4, 2)]


def _wellcond(rng, shape, dt):
    """Diagonally dominant matrices (well conditioned, safely invertible)."""
    a = rand(rng, shape, "float64", -1.0, 1.0)
    n = shape[-1]
    return (a + (n + 1.0) * np.eye(n)).astype(dt)


def _spd(rng, shape, dt):
    a = rand(rng, shape, "float64", -1.0, 1.0)
    n = shape[-1]
    return (a @ np.swapaxes(a, -1, -2) + n * np.eye(n)).astype(dt)


def _f64(f):
    def g(*xs, **attrs):
        return np.asarray(f(*[x.astype(np.float64) for x in xs], **attrs)).astype(xs[0].dtype)
    return g


def _eye_like(a):
    return np.broadcast_to(np.eye(a.shape[-1]), a.shape)


entry("inv", lambda rng, dt: [([_wellcond(rng, s, dt)], {}) for s in SQUARE],
      _f64(lambda a: np.linalg.solve(a, _eye_like(a))))


def _make_solve(rng, dt):
    out = []
    for s, k in zip(SQUARE, (2, 1, 3, 1, 2, 0)):
        a = _wellcond(rng, s, dt)
        out.append(([a, rand(rng, s[:-1] + (k,), dt)], {}))
    return out


entry("solve", _make_solve, _f64(lambda a, b: np.linalg.inv(a) @ b if a.size else np.zeros(b.shape)))


def _det_eig(a):
    if a.shape[-1] == 0:
        return np.ones(a.shape[:-2])
    return np.real(np.prod(np.linalg.eigvals(a), axis=-1))


entry("det", lambda rng, dt: [([_wellcond(rng, s, dt) * rng.choice([-1.0, 1.0], size=s[:-1] + (1,)).astype(dt)],
                               {}) for s in SQUARE],
      _f64(_det_eig))


def _slogdet_expect(a):
    d = _det_eig(a.astype(np.float64))
    return np.stack([np.sign(d), np.log(np.abs(d))], axis=-1).astype(a.dtype)


entry("slogdet", lambda rng, dt: [([_wellcond(rng, s, dt) * rng.choice([-1.0, 1.0], size=s[:-1] + (1,)).astype(dt)],
                                   {}) for s in SQUARE], _slogdet_expect)


def _chol_loop(a):
    a = a.astype(np.float64)
    out = np.zeros_like(a)
    n = a.shape[-1]
    for idx in np.ndindex(*a.shape[:-2]):
        m, L = a[idx], np.zeros((n, n))
        for i in range(n):
            for j in range(i + 1):
                s = m[i, j] - L[i, :j] @ L[j, :j]
                L[i, j] = np.sqrt(s) if i == j else s / L[j, j]
        out[idx] = L
    return out


entry("cholesky", lambda rng, dt: [([_spd(rng, s, dt)], {}) for s in SQUARE],
      lambda a: _chol_loop(a).astype(a.dtype))


def _make_eigh(rng, dt):
    return [([_spd(rng, s, dt)], {"part": p}) for s in SQUARE for p in ("w", "v")]


entry("eigh", _make_eigh, lambda a, part: np.linalg.eigvalsh(a) if part == "w" else np.linalg.eigh(a)[1],
      nondiff="eigh's gradient is not implemented (degenerate eigenvalues make it ill-defined)")


def _make_eig(rng, dt):
    # general (non-symmetric) matrices: complex pairs among the eigenvalues
    return [([rand(rng, s, dt, -1, 1)], {"part": p}) for s in SQUARE for p in ("w", "v")]


def _eig_expect(a, part):
    w, v = np.linalg.eig(a)
    return (v if part == "v" else w).astype(np.result_type(a.dtype, np.complex64))


entry("eig", _make_eig, _eig_expect, nondiff="eig's gradient is not implemented")


def _make_svd(rng, dt):
    return [([rand(rng, s, dt, -1, 1)], {"part": p, "full_matrices": f})
            for s in RECT for p in ("u", "s", "vh") for f in (False, True)]


def _svd_expect(a, part, full_matrices):
    if part == "s":
        # the singular values are the k largest eigenvalues of [[0, a], [a^T, 0]] (the others
        # are their negatives and zeros). Not the square roots of a^T a's: squaring loses the
        # small ones (error ~ eps * s_max^2 / s_min), which failed one random 3x3 in 20000
        m, n = a.shape[-2:]
        z = np.zeros(a.shape[:-2] + (m + n, m + n))
        z[..., :m, m:] = a
        z[..., m:, :m] = np.swapaxes(a, -1, -2)
        return np.linalg.eigvalsh(z)[..., ::-1][..., :min(m, n)].astype(a.dtype)
    u, s, vh = np.linalg.svd(a, full_matrices=full_matrices)
    return u if part == "u" else vh


entry("svd", _make_svd, _svd_expect, nondiff="svd's gradient is not implemented")


def _make_qr(rng, dt):
    return [([rand(rng, s, dt, -1, 1)], {"part": p, "mode": m})
            for s in RECT for p in ("q", "r") for m in ("reduced", "complete")]


entry("qr", _make_qr, lambda a, part, mode: np.linalg.qr(a, mode=mode)[0 if part == "q" else 1],
      nondiff="qr's gradient is not implemented")

SORT_SHAPES = [((5,), 0), ((3, 4), 1), ((3, 4), 0), ((0,), 0), ((2, 0), 1), ((1, 3, 1), 1), ((2, 1, 3), 2)]


def _make_sort(rng, dt):
    out = []
    for k, (s, ax) in enumerate(SORT_SHAPES):
        x = rand(rng, s, dt, -2, 2)
        if np.dtype(dt).kind == "f" and x.size > 2 and k % 2:
            x = x.copy()
            x.flat[1] = np.nan          # NaN sorts last
        out.append(([x], {"axis": ax}))
    return out


def _stable_order(x, axis):
    """Indices that sort x along axis, stable, NaN last: by a key sort on (nan, value, index)."""
    xm = np.moveaxis(x, axis, -1)
    out = np.zeros(xm.shape, np.int64)
    for idx in np.ndindex(*xm.shape[:-1]):
        row = xm[idx]
        keys = [((1, 0.0) if (row.dtype.kind == "f" and np.isnan(v)) else (0, v), i) for i, v in enumerate(row)]
        out[idx] = [i for _, i in sorted(keys)]
    return np.moveaxis(out, -1, axis)


def _sort_grad_ok(ops, attrs):
    x = ops[0]
    return not np.isnan(x).any() and len(np.unique(x)) == x.size


entry("sort", _make_sort, lambda x, axis: np.take_along_axis(x, _stable_order(x, axis), axis),
      grad_ok=_sort_grad_ok)
entry("argsort", _make_sort, lambda x, axis: _stable_order(x, axis), nondiff="its result is an index")


def _make_order_statistic(rng, dt):
    out = []
    for k, s in enumerate([(5,), (3, 7), (2, 3, 4), (1, 1), (4, 0)]):
        x = rand(rng, s, dt, -2, 2)
        if np.dtype(dt).kind == "f" and x.size > 2 and k % 2:
            x = x.copy()
            x.flat[1] = np.nan          # NaN sorts last
        r = rng.integers(-1, max(s[-1], 1) + 1, size=s[:-1] + (3,)).astype(np.int64)   # clipped to the axis
        out.append(([x, r], {}))
    return out


def _order_statistic_expect(x, ranks):
    if x.shape[-1] == 0:
        return np.full(ranks.shape, np.nan if x.dtype.kind == "f" else 0, x.dtype)
    s = np.take_along_axis(x, _stable_order(x, x.ndim - 1), -1)
    return np.take_along_axis(s, np.clip(ranks, 0, x.shape[-1] - 1), -1)


def _order_statistic_grad_ok(ops, attrs):
    return _sort_grad_ok(ops, attrs) and ops[0].shape[-1] > 0


entry("order_statistic", _make_order_statistic, _order_statistic_expect, grad_ok=_order_statistic_grad_ok)


def _make_atan2(rng, dt):
    from opinfo import SHAPES
    return [([rand(rng, s, dt), rand(rng, s, dt)], {}) for s in SHAPES]


def _atan2_expect(y, x):
    y64, x64 = y.astype(np.float64), x.astype(np.float64)
    # the angle of (x, y): arctan of the ratio, moved to the right quadrant
    with np.errstate(all="ignore"):
        base = np.arctan(y64 / x64)
    r = np.where(x64 > 0, base, np.where(y64 >= 0, base + np.pi, base - np.pi))
    r = np.where(x64 == 0, np.sign(y64) * np.pi / 2, r)
    return r.astype(y.dtype)


entry("atan2", _make_atan2, _atan2_expect,
      # smooth away from the origin and from the cut along the negative x axis
      grad_ok=lambda ops, a: bool(np.all((np.abs(ops[0]) > 0.05) | (ops[1] > 0.05))
                                  and np.all(np.hypot(ops[0], ops[1]) > 0.1)))
