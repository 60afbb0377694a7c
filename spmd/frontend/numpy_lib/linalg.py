"""np.linalg on Tracers. Factorizations and solves are IR ops of the `linalg` family
(ir/ops/linalg.py: batch dims split -> local; a split matrix dim is gathered, with a
warning); norms, pinv, lstsq and matrix_power are composed from them and from sums,
maxima and matmuls. Integer inputs are converted to float64, as numpy does."""
from __future__ import annotations

import builtins
import numpy as np

from ...errors import ShapeError, user_loc
from ...ir.ops.names import CHOLESKY, DET, EIG, EIGH, INV, QR, SLOGDET, SOLVE, SVD
from .. import contractions, core, indexing, reductions as red, shapes
from .. import elementwise as ew
from .math_funcs import isnan
from ..trace import Tracer

_UNSET = object()       # an argument not given (numpy's own marker is private)

# numpy's own named-tuple result classes, taken from its results (their module is
# private), so a traced or eager result is the same Python type as numpy's
SlogdetResult = type(np.linalg.slogdet(np.eye(1)))
EigResult = type(np.linalg.eig(np.eye(1)))
EighResult = type(np.linalg.eigh(np.eye(1)))
SVDResult = type(np.linalg.svd(np.eye(1)))
QRResult = type(np.linalg.qr(np.eye(1)))


def _f(a, name, square=True, min_ndim=2):
    x = core.asarray(a)
    if x.ndim < min_ndim:
        raise ShapeError(f"np.linalg.{name}: {x.ndim}-dimensional array given. Array must be at least "
                         f"two-dimensional (at {user_loc()})")
    if square and x.shape[-1] != x.shape[-2]:
        raise ShapeError(f"np.linalg.{name}: last 2 dimensions of the array must be square, got "
                         f"{list(x.shape)} (at {user_loc()})")
    if x.dtype.kind not in "fiub":
        raise TypeError(f"np.linalg.{name} of {x.dtype} (at {user_loc()})")
    return core.astype(x, x.dtype.name if x.dtype.kind == "f" else "float64")


def _op(name, x, *more, **attrs):
    return core.emit(x._tr, name, x, *more, **attrs)


def _mT(x):
    return shapes.swapaxes(x, -1, -2)


def _refused(r, why, *given):
    """numpy raises LinAlgError(why) for a matrix LAPACK refuses (singular, not positive
    definite), where the op gives NaN for it (ir/ops/linalg.py): a traced program raises
    it after the run, naming the user's line, where a matrix's result holds a NaN though
    its operands (`given`, batched as r) hold none (numpy gives NaN there without an
    error). Inside a loop body or branch it stays NaN (core.error_at_run)."""
    def nan_per_matrix(x):
        return red.any(isnan(x), axis=(-2, -1))
    refused = nan_per_matrix(r)
    for x in given:
        refused = ew.logical_and(refused, ew.logical_not(nan_per_matrix(x)))
    core.error_at_run(red.any(refused), np.linalg.LinAlgError, why)
    return r


def inv(a):
    x = _f(a, "inv")
    return _refused(_op(INV, x), "Singular matrix", x)


def det(a):
    return _op(DET, _f(a, "det"))


def slogdet(a):
    r = _op(SLOGDET, _f(a, "slogdet"))
    return SlogdetResult(indexing.getitem(r, (Ellipsis, 0)), indexing.getitem(r, (Ellipsis, 1)))


def cholesky(a, /, *, upper=False):
    x = _f(a, "cholesky")
    r = _mT(_op(CHOLESKY, _mT(x))) if upper else _op(CHOLESKY, x)
    return _refused(r, "Matrix is not positive definite", x)


def solve(a, b):
    t = core.trace_of(a, b)
    x = _f(a, "solve")
    bb = core.asarray(b, t=t)
    dt = core.result_dtype(x, bb)
    dt = dt if dt in ("float32", "float64") else "float64"
    x, bb = core.astype(x, dt), core.astype(bb, dt)
    n = x.shape[-1]
    vec = bb.ndim == 1
    if vec:
        bb = shapes.reshape(bb, (n, 1))
    if bb.shape[-2] != n:
        raise ShapeError(f"np.linalg.solve: b {list(bb.shape)} does not match a {list(x.shape)} (at {user_loc()})")
    try:
        batch = np.broadcast_shapes(x.shape[:-2], bb.shape[:-2])
    except ValueError:
        raise ShapeError(f"np.linalg.solve: batch dims of a {list(x.shape)} and b {list(bb.shape)} do not "
                         f"broadcast (at {user_loc()})") from None
    x = core.broadcast_to(x, batch + x.shape[-2:])
    bb = core.broadcast_to(bb, batch + bb.shape[-2:])
    r = _refused(_op(SOLVE, x, bb), "Singular matrix", x, bb)
    return shapes.reshape(r, (n,)) if vec else r


def eigh(a, UPLO="L"):
    x = _f(a, "eigh")
    if UPLO not in ("L", "U"):
        raise ValueError(f"np.linalg.eigh: UPLO argument must be 'L' or 'U' (at {user_loc()})")
    attrs = {"uplo": "U"} if UPLO == "U" else {}
    return EighResult(_op(EIGH, x, part="w", **attrs), _op(EIGH, x, part="v", **attrs))


def eig(a):
    """numpy's eig: complex eigenvalues and vectors, or real ones where every eigenvalue
    is real (numpy decides by the values: so does this, with one value of the data, a
    graph break under jit)."""
    x = _f(a, "eig")
    w, v = _op(EIG, x, part="w"), _op(EIG, x, part="v")
    if bool(red.all(ew.equal(ew.imag(w), 0))):
        return EigResult(ew.real(w), ew.real(v))
    return EigResult(w, v)


def eigvals(a):
    return eig(a).eigenvalues


def eigvalsh(a, UPLO="L"):
    return eigh(a, UPLO).eigenvalues


def svd(a, full_matrices=True, compute_uv=True, hermitian=False):
    x = _f(a, "svd", square=False)
    if not compute_uv:
        return _op(SVD, x, part="s", full_matrices=False)
    # (s as u's and vh's attributes: the three are one numpy call, executor.part_groups)
    return SVDResult(_op(SVD, x, part="u", full_matrices=bool(full_matrices)),
                     _op(SVD, x, part="s", full_matrices=bool(full_matrices)),
                     _op(SVD, x, part="vh", full_matrices=bool(full_matrices)))


def svdvals(x):
    return svd(x, compute_uv=False)


def qr(a, mode="reduced"):
    x = _f(a, "qr", square=False)
    if mode not in ("reduced", "complete", "r"):
        raise NotImplementedError(f"np.linalg.qr mode={mode!r} (supported: reduced, complete, r) "
                                  f"(at {user_loc()})")
    if mode == "r":
        return _op(QR, x, part="r", mode="reduced")
    return QRResult(_op(QR, x, part="q", mode=mode), _op(QR, x, part="r", mode=mode))


def _cutoff(s, rcond):
    smax = red.max(s, axis=-1, keepdims=True) if s.shape[-1] else s
    return ew.multiply(rcond, smax)


def pinv(a, rcond=None, hermitian=False, *, rtol=_UNSET):
    x = _f(a, "pinv", square=False)
    m, n = x.shape[-2:]
    if rcond is None:
        if rtol is _UNSET:
            rcond = 1e-15
        elif rtol is None:
            rcond = max(m, n) * float(np.finfo(x.dtype).eps)
        else:
            rcond = rtol
    elif rtol is not _UNSET:
        raise ValueError("`rtol` and `rcond` can't be both set.")
    if m == 0 or n == 0:
        return core.zeros_like(x, shape=x.shape[:-2] + (n, m))
    u, s, vh = svd(x, full_matrices=False)
    big = ew.greater(s, _cutoff(s, rcond))
    sinv = ew.where(big, ew.true_divide(1, ew.where(big, s, core.ones_like(s))), core.zeros_like(s))
    # pinv = V diag(1/s) U^T
    return contractions.matmul(_mT(vh), ew.multiply(shapes.expand_dims(sinv, -1), _mT(u)))


def lstsq(a, b, rcond=None):
    """(x, residuals, rank, s). numpy's residuals are empty when rank < N (known only at
    run time); spmd's shape is fixed, so they are NaN there instead."""
    t = core.trace_of(a, b)
    x = _f(a, "lstsq", square=False)
    if x.ndim != 2:
        raise ShapeError(f"np.linalg.lstsq: a must be 2-d, got {list(x.shape)} (at {user_loc()})")
    bb = core.asarray(b, t=t)
    dt = core.result_dtype(x, bb)
    dt = dt if dt in ("float32", "float64") else "float64"
    x, bb = core.astype(x, dt), core.astype(bb, dt)
    m, n = x.shape
    vec = bb.ndim == 1
    if bb.shape[0] != m:
        raise ShapeError(f"np.linalg.lstsq: incompatible dimensions {list(x.shape)}, {list(bb.shape)} "
                         f"(at {user_loc()})")
    b2 = shapes.reshape(bb, (m, 1)) if vec else bb
    if rcond is None:
        rcond = float(np.finfo(dt).eps) * max(m, n)
    if m == 0 or n == 0:
        sol = core.zeros_like(b2, shape=(n, b2.shape[1]))
        s = core.zeros_like(x, shape=(min(m, n),))
        rank = core.asarray(np.asarray(0, np.int64), t=t)
    else:
        u, s, vh = svd(x, full_matrices=False)
        big = ew.greater(s, _cutoff(s, rcond))
        sinv = ew.where(big, ew.true_divide(1, ew.where(big, s, core.ones_like(s))), core.zeros_like(s))
        sol = contractions.matmul(_mT(vh), ew.multiply(shapes.expand_dims(sinv, -1), contractions.matmul(_mT(u), b2)))
        rank = red.sum(core.astype(big, "int64"))
    if m > n and n > 0:
        r = ew.subtract(contractions.matmul(x, sol), b2)
        res = red.sum(ew.multiply(r, r), axis=0)
        res = ew.where(ew.equal(rank, n), res, core.full_like(res, np.nan))
    else:
        res = core.zeros_like(b2, shape=(0,))
    if vec:
        sol = shapes.reshape(sol, (n,))
    return sol, res, core.astype(rank, "int32"), s          # numpy's rank is an int32


def matrix_power(a, n):
    x = core.asarray(a)
    if x.ndim < 2 or x.shape[-1] != x.shape[-2]:
        raise ShapeError(f"np.linalg.matrix_power: expected a stack of square matrices, got {list(x.shape)} "
                         f"(at {user_loc()})")
    if isinstance(n, Tracer) or not isinstance(n, (int, np.integer)):
        raise TypeError(f"np.linalg.matrix_power: exponent must be a Python integer (at {user_loc()})")
    n = int(n)
    if n == 0:
        k = x.shape[-1]
        return core.broadcast_to(core.asarray(np.eye(k, dtype=x.dtype), t=x._tr), x.shape)
    if n < 0:
        x, n = inv(x), -n
    result, base = None, x
    while n:
        if n & 1:
            result = base if result is None else contractions.matmul(result, base)
        n >>= 1
        if n:
            base = contractions.matmul(base, base)
    return result


def _max0(x, axis, keepdims=False):
    """max of non-negative values; 0 over an empty axis, as numpy's norms give."""
    axes = core.normalize_axes(axis, x.ndim, "norm")
    if builtins.any(x.shape[d] == 0 for d in axes):
        r = red.sum(x, axis, keepdims=keepdims)
        return core.zeros_like(r)
    return red.max(x, axis, keepdims=keepdims)


def _squares(x):
    """|x|**2 as numpy sums it for the 2-norms and Frobenius norms: (x.conj() * x).real,
    re*re + im*im of a complex x (exact where the modulus squared is not); in float64
    unless x is a real float array."""
    if x.dtype.kind == "c":
        re, im = ew.real(x), ew.imag(x)
        return ew.add(ew.multiply(re, re), ew.multiply(im, im))
    x = core.astype(x, x.dtype.name if x.dtype.kind == "f" else "float64")
    return ew.multiply(x, x)


def _vector_norm(x, ord, axis, keepdims, sq):
    """x's moduli (sq: the input's _squares)."""
    ax = ew.absolute(x)
    if ord is None or ord == 2:
        return ew.sqrt(red.sum(sq, axis, keepdims=keepdims))
    if ord == np.inf:
        return _max0(ax, axis, keepdims=keepdims)
    if ord == -np.inf:
        return red.min(ax, axis, keepdims=keepdims)
    if ord == 0:
        return red.sum(core.astype(ew.not_equal(x, 0), x.dtype), axis, keepdims=keepdims)
    if ord == 1:
        return red.sum(ax, axis, keepdims=keepdims)
    if isinstance(ord, str):
        raise ValueError(f"Invalid norm order '{ord}' for vectors (at {user_loc()})")
    p = float(ord)
    s = red.sum(ew.power(ax, core.asarray(np.asarray(p, x.dtype), t=x._tr)), axis, keepdims=keepdims)
    return ew.power(s, core.asarray(np.asarray(1.0 / p, x.dtype), t=x._tr))


def _sv(x, r, c):
    """Singular values of the matrices on dims (r, c), on a last dim."""
    rest = [d for d in range(x.ndim) if d not in (r, c)]
    return _op(SVD, shapes.transpose(x, rest + [r, c]), part="s", full_matrices=False)


def _matrix_norm(x, ord, axes, keepdims, sq):
    r, c = axes
    if r == c:
        raise ValueError(f"Duplicate axes given (at {user_loc()})")
    if ord is None or ord == "fro":
        res = ew.sqrt(red.sum(sq, (r, c)))
    elif ord == "nuc":
        res = red.sum(_sv(x, r, c), -1)
    elif ord in (2, -2):
        s = _sv(x, r, c)
        res = _max0(s, -1) if ord == 2 else red.min(s, -1)
    elif ord in (1, -1):
        col = red.sum(ew.absolute(x), r)
        c2 = c - 1 if c > r else c
        res = _max0(col, c2) if ord == 1 else red.min(col, c2)
    elif ord in (np.inf, -np.inf):
        row = red.sum(ew.absolute(x), c)
        r2 = r - 1 if r > c else r
        res = _max0(row, r2) if ord == np.inf else red.min(row, r2)
    else:
        raise ValueError(f"Invalid norm order {ord!r} for matrices (at {user_loc()})")
    if keepdims:
        res = shapes.reshape(res, tuple(1 if d in (r, c) else s for d, s in enumerate(x.shape)))
    return res


def _moduli(x, ord, matrix):
    """A complex input's norms are its moduli's (numpy's), except a matrix's 2-norm and
    nuclear norm, which need a complex SVD: those raise."""
    if x.dtype.kind != "c":
        return x
    if matrix and ord in (2, -2, "nuc"):
        raise TypeError(f"np.linalg.norm(ord={ord!r}) of a complex matrix is not supported in spmd "
                        f"(at {user_loc()})")
    return ew.absolute(x)


def norm(x, ord=None, axis=None, keepdims=False):
    x = core.asarray(x)
    matrix = (x.ndim == 2 and ord is not None) if axis is None else \
        not isinstance(axis, (int, np.integer)) and len(axis) == 2
    sq = _squares(x)
    x = _moduli(x, ord, matrix)
    x = core.astype(x, x.dtype.name if x.dtype.kind == "f" else "float64")
    if axis is None:
        if ord is None:
            r = ew.sqrt(red.sum(sq))
            return shapes.reshape(r, (1,) * x.ndim) if keepdims else r
        if x.ndim == 1:
            return _vector_norm(x, ord, 0, keepdims, sq)
        if x.ndim == 2:
            return _matrix_norm(x, ord, (0, 1), keepdims, sq)
        raise ValueError(f"Improper number of dimensions to norm (at {user_loc()})")
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    axes = tuple(core.normalize_axis(a, x.ndim, "norm") for a in axes)
    if len(axes) == 1:
        return _vector_norm(x, ord, axes[0], keepdims, sq)
    if len(axes) == 2:
        return _matrix_norm(x, ord, axes, keepdims, sq)
    raise ValueError(f"Improper number of dimensions to norm (at {user_loc()})")


def matrix_rank(A_, tol=None, hermitian=False, *, rtol=None):
    x = core.asarray(A_)
    if x.ndim < 2:
        return core.astype(red.any(ew.not_equal(x, 0)), "int64")
    x = _f(x, "matrix_rank", square=False)
    s = svdvals(x)
    if s.shape[-1] == 0:
        return core.zeros_like(s, dtype="int64", shape=s.shape[:-1])
    smax = red.max(s, axis=-1, keepdims=True)
    if tol is None:
        r = max(x.shape[-2:]) * float(np.finfo(x.dtype).eps) if rtol is None else rtol
        cut = ew.multiply(smax, r)
    else:
        cut = shapes.expand_dims(core.asarray(tol, t=x._tr), -1) if np.ndim(tol) or isinstance(tol, Tracer) else tol
    return red.sum(core.astype(ew.greater(s, cut), "int64"), axis=-1)


def cond(x, p=None):
    x = _f(x, "cond", square=p not in (None, 2, -2))
    if p is None or p in (2, -2):
        s = svdvals(x)
        big, small = indexing.getitem(s, (Ellipsis, 0)), indexing.getitem(s, (Ellipsis, -1))
        return ew.true_divide(big, small) if p != -2 else ew.true_divide(small, big)
    r = ew.multiply(norm(x, p, axis=(-2, -1)), norm(inv(x), p, axis=(-2, -1)))
    # a singular matrix (NaN inverse) has condition number inf, as numpy gives
    x_nan = red.any(ew.not_equal(x, x), axis=(-2, -1))
    return ew.where(ew.logical_and(ew.not_equal(r, r), ew.logical_not(x_nan)), core.full_like(r, np.inf), r)


def multi_dot(arrays, *, out=None):
    core.no_extra("multi_dot", (), {"out": out})
    xs = list(arrays)
    if len(xs) < 2:
        raise ValueError(f"multi_dot: expecting at least two arrays (at {user_loc()})")
    r = xs[0]
    for y in xs[1:]:
        r = contractions.dot(r, y)
    return r


def vector_norm(x, /, *, axis=None, keepdims=False, ord=2):
    x = core.asarray(x)
    if axis is None:
        sq = shapes.ravel(_squares(x))
        x = _moduli(x, ord, False)
        flat = shapes.ravel(core.astype(x, x.dtype.name if x.dtype.kind == "f" else "float64"))
        r = _vector_norm(flat, ord, 0, False, sq)
        return shapes.reshape(r, (1,) * x.ndim) if keepdims else r
    if isinstance(axis, (int, np.integer)) or len(axis) == 1:
        return norm(x, ord, axis if isinstance(axis, (int, np.integer)) else axis[0], keepdims)
    axes = core.normalize_axes(axis, x.ndim, "vector_norm")
    rest = [d for d in range(x.ndim) if d not in axes]
    n = int(np.prod([x.shape[d] for d in axes], dtype=np.int64))
    y = shapes.reshape(shapes.transpose(x, rest + list(axes)), tuple(x.shape[d] for d in rest) + (n,))
    r = norm(y, ord, -1)
    return shapes.reshape(r, tuple(1 if d in axes else s for d, s in enumerate(x.shape))) if keepdims else r


def matrix_norm(x, /, *, keepdims=False, ord="fro"):
    return norm(x, ord, (-2, -1), keepdims)


# -- numpy 2's array-API spellings: numpy's functions on the last two axes (or `axis`) -----------
def matrix_transpose(x, /):
    x = core.asarray(x)
    if x.ndim < 2:
        raise ValueError(f"np.linalg.matrix_transpose: input array must be at least 2-dimensional, got "
                         f"{list(x.shape)} (at {user_loc()})")
    return np.swapaxes(x, -1, -2)


def outer(x1, x2, /):
    a, b = core.asarray(x1), core.asarray(x2)
    if a.ndim != 1 or b.ndim != 1:
        raise ValueError(f"np.linalg.outer: input arrays must be one-dimensional, got {list(a.shape)} and "
                         f"{list(b.shape)} (at {user_loc()})")
    return np.outer(a, b)


def cross(x1, x2, /, *, axis=-1):
    a, b = core.asarray(x1), core.asarray(x2)
    if a.shape[axis] != 3 or b.shape[axis] != 3:
        raise ValueError(f"np.linalg.cross: both input arrays must be (arrays of) 3-dimensional vectors, got "
                         f"{list(a.shape)} and {list(b.shape)} along axis {axis} (at {user_loc()})")
    return np.cross(a, b, axis=axis)


def vecdot(x1, x2, /, *, axis=-1):
    a, b = core.asarray(x1), core.asarray(x2)
    return np.sum(np.conj(a) * b, axis=axis)


def diagonal(x, /, *, offset=0):
    return np.diagonal(core.asarray(x), offset, -2, -1)


def trace(x, /, *, offset=0, dtype=None):
    return np.trace(core.asarray(x), offset, -2, -1, dtype)
