"""Linear algebra on stacks of matrices (numpy.linalg): cholesky, inv, solve, det,
slogdet, eig, eigh, svd, qr. Operands are (..., m, n) with equal leading (batch) dims; the
tracer broadcasts batch dims and converts integers to float64 before it emits them.

Sharding: batch dims are pass-through factors (a stack split over devices is solved
locally, no communication); the matrix dims are `replicate` factors: a device needs
whole matrices, so a split row or column dim is gathered first (the partitioner warns,
naming the op and the user's line). Every op runs its numpy reference on both backends.

Ops with several numpy results are one op per result, picked by the `part` attribute
(eig, eigh: "w" / "v", svd: "u" / "s" / "vh", qr: "q" / "r"); the parts a program takes
of one matrix are still one numpy call when it runs (OpDef.parts). slogdet's result
stacks (sign, logabsdet) on a last dim of 2.
"""
import numpy as np

from ..factors import einsum_rule, letters
from .elementwise import aval, const_like
from .names import (
    ADD, BROADCAST_IN_DIM, COMPARE, CONSTANT, DOT_GENERAL, INV, IOTA, MULTIPLY, NEGATE, RESHAPE,
    SELECT, SLICE, SOLVE, SUBTRACT, TRANSPOSE
)
from .registry import OpDef, check, register

FLOAT = ("float32", "float64")     # numpy.linalg has no float16 / bfloat16

WHY = "it needs whole matrices on every device"


# -- IR-building helpers for the VJPs ----------------------------------------------------------
def _nb(v):
    return v.ndim - 2


def mT(g, a):
    """Swap the last two dims."""
    p = tuple(range(a.ndim - 2)) + (a.ndim - 1, a.ndim - 2)
    return g.emit(TRANSPOSE, a, permutation=p)


def mm(g, a, b):
    """Batched a @ b of (..., m, k) and (..., k, n)."""
    nb = _nb(a)
    return g.emit(DOT_GENERAL, a, b, lhs_batch=tuple(range(nb)), rhs_batch=tuple(range(nb)),
                  lhs_contract=(nb + 1,), rhs_contract=(nb,))


def _bcast_trailing(g, v, shape):
    """v of shape[:-2] -> shape (repeated over the two matrix dims)."""
    return g.emit(BROADCAST_IN_DIM, v, shape=shape, broadcast_dimensions=tuple(range(v.ndim)))


def _tril_mask(g, shape, k=0):
    """bool (..., m, n): True on and below diagonal k."""
    i = g.emit(IOTA, shape=shape, dtype="int64", dimension=len(shape) - 2)
    j = g.emit(IOTA, shape=shape, dtype="int64", dimension=len(shape) - 1)
    d = g.emit(SUBTRACT, j, i)
    kk = g.emit(BROADCAST_IN_DIM, g.emit(CONSTANT, value=np.array(k, "int64")), shape=shape,
                broadcast_dimensions=())
    return g.emit(COMPARE, d, kk, direction="LE")


def _where0(g, mask, x):
    return g.emit(SELECT, mask, x, const_like(g, x, 0))


# -- shape rules ---------------------------------------------------------------------------------
def _square(a):
    check(a.dtype in FLOAT, f"linalg ops take float32/float64, got {a.dtype}")
    check(len(a.shape) >= 2, f"need a (..., n, n) stack of matrices, got {list(a.shape)}")
    check(a.shape[-1] == a.shape[-2], f"need square matrices, got {list(a.shape[-2:])}")


def _matrix(a):
    check(a.dtype in FLOAT, f"linalg ops take float32/float64, got {a.dtype}")
    check(len(a.shape) >= 2, f"need a (..., m, n) stack of matrices, got {list(a.shape)}")


def _factors(out_tail):
    """Batch dims pass through; the operand's two matrix dims are replicate factors; the
    result's non-batch dims (out_tail of them) carry no factor."""
    def rule(ins, outs, attrs):
        nb = len(ins[0].shape) - 2
        b = letters(nb)
        mat = letters(2, start=nb)
        spec = b + mat + "->" + b + "_" * (len(outs[0].shape) - nb)
        return einsum_rule(spec, ins, outs, replicate=mat)
    return rule


def _flops_cubic(ins, out, attrs):
    """A factorization of an m x n matrix: m n^2 for m >= n (n^3 when square); a tall,
    thin least-squares matrix is not m^3."""
    s = ins[0].shape
    big, small = (max(s[-1], s[-2]), min(s[-1], s[-2])) if len(s) >= 2 else (1, 1)
    return int(np.prod(s[:-2], dtype=np.int64)) * big * small ** 2


def _keep_dtype(f):
    """numpy.linalg, in the operand's dtype. A matrix numpy.linalg refuses (singular,
    not positive definite, NaN: LinAlgError) gives NaN in its place, as in JAX: the
    compiled program cannot raise mid-run, and the padding of uneven shards must not
    stop the others (frontend/numpy_lib/linalg.py raises numpy's error after the run,
    where it can tell)."""
    def ref(a, *rest, **attrs):
        with np.errstate(all="ignore"):
            try:
                out = np.asarray(f(a, *rest, **attrs))
            except np.linalg.LinAlgError:
                out = _one_by_one(f, a, rest, attrs)
        return _in_precision(out, a)
    return ref


def _in_precision(out, a):
    """numpy.linalg's result in a's dtype (a complex one, eig's, in the complex dtype of
    a's precision)."""
    out = np.asarray(out)
    return out.astype(a.dtype if out.dtype.kind != "c" else np.result_type(a.dtype, np.complex64), copy=False)


def _one_by_one(f, a, rest, attrs):
    nb = a.ndim - 2
    outs = []
    for idx in np.ndindex(*a.shape[:nb]):
        args = [a[idx]] + [r[idx] for r in rest]
        try:
            outs.append(np.asarray(f(*args, **attrs)))
        except np.linalg.LinAlgError:
            outs.append(None)
    good = next((o for o in outs if o is not None), None)
    if good is None:       # every matrix failed: the result's shape from a healthy stand-in
        eye = np.broadcast_to(np.eye(a.shape[-2], a.shape[-1], dtype=a.dtype), a.shape[-2:])
        good = np.asarray(f(eye.copy(), *[r[(0,) * nb] if r.ndim else r for r in rest], **attrs))
    outs = [np.full(good.shape, np.nan, good.dtype) if o is None else o for o in outs]
    return np.stack(outs).reshape(a.shape[:nb] + good.shape) if outs else np.zeros(a.shape[:nb] + good.shape)


def _linalg(name, infer, ref, vjp, factors=None, nondiff=None, parts=None, **rules):
    register(OpDef(name, family="linalg", infer=infer, ref=_keep_dtype(ref), vjp=vjp, factors=factors or _factors(2),
                   flops=_flops_cubic, dtypes=FLOAT, needs_whole=WHY, lowering="lapack",
                   parts=_parts_of(*parts) if parts else None, **rules))


def _parts_of(names, f):
    """An op's `parts`: f(a, **attrs) is numpy's call giving every part, in `names`' order;
    each part as `_keep_dtype` makes the op's result (NaN for a matrix numpy refuses)."""
    def parts(a, wanted, **attrs):
        out = {}
        with np.errstate(all="ignore"):
            try:
                got = f(a, **attrs)
            except np.linalg.LinAlgError:
                got = [_one_by_one(lambda m, k=k, **kw: f(m, **kw)[k], a, (), attrs) for k in range(len(names))]
        for name, x in zip(names, got):
            if name in wanted:
                out[name] = _in_precision(x, a)
        return out
    return parts


# -- inv -----------------------------------------------------------------------------------------
def _inv_infer(a):
    _square(a)
    return aval(a.shape, a.dtype)


def _inv_vjp(g, op, ct):
    y = op.result
    yt = mT(g, y)
    return (g.emit(NEGATE, mm(g, mm(g, yt, ct), yt)),)


_linalg("inv", _inv_infer, lambda a: np.linalg.inv(a), _inv_vjp)


# -- solve: a (..., n, n), b (..., n, k) ---------------------------------------------------------
def _solve_infer(a, b):
    _square(a)
    check(b.dtype == a.dtype, f"operand dtypes differ: {a.dtype} vs {b.dtype}")
    check(len(b.shape) == len(a.shape) and tuple(b.shape[:-2]) == tuple(a.shape[:-2])
          and b.shape[-2] == a.shape[-1],
          f"b must be (..., {a.shape[-1]}, k) with a's batch dims {list(a.shape[:-2])}, got {list(b.shape)}")
    return aval(b.shape, a.dtype)


def _solve_vjp(g, op, ct):
    a, _ = op.operands
    x = op.result
    db = g.emit(SOLVE, mT(g, a), ct)
    da = g.emit(NEGATE, mm(g, db, mT(g, x)))
    return da, db


def _solve_factors(ins, outs, attrs):
    nb = len(ins[0].shape) - 2
    b = letters(nb)
    i, j, k = letters(3, start=nb)
    # columns of b are solved independently: k passes through
    return einsum_rule(f"{b}{i}{j},{b}{j}{k}->{b}{i}{k}", ins, outs, replicate=i + j)


_linalg("solve", _solve_infer, lambda a, b: np.linalg.solve(a, b), _solve_vjp, _solve_factors,
        linear=((1,),))


# -- det, slogdet ----------------------------------------------------------------------------------
def _det_infer(a):
    _square(a)
    return aval(a.shape[:-2], a.dtype)


def _inv_T(g, a):
    return mT(g, g.emit(INV, a))


def _det_vjp(g, op, ct):
    a = op.operands[0]
    w = g.emit(MULTIPLY, ct, op.result)
    return (g.emit(MULTIPLY, _bcast_trailing(g, w, a.shape), _inv_T(g, a)),)


_linalg("det", _det_infer, lambda a: np.linalg.det(a), _det_vjp, _factors(0))


def _slogdet_infer(a):
    _square(a)
    return aval(tuple(a.shape[:-2]) + (2,), a.dtype)


def _slogdet_ref(a):
    s, l = np.linalg.slogdet(a)
    return np.stack([s, l], axis=-1)


def _slogdet_vjp(g, op, ct):
    a = op.operands[0]
    nb = _nb(a)
    start = (0,) * nb + (1,)
    cl = g.emit(SLICE, ct, start=start, limit=tuple(ct.shape[:-1]) + (2,), stride=(1,) * (nb + 1))
    cl = g.emit(RESHAPE, cl, shape=tuple(a.shape[:-2]))
    return (g.emit(MULTIPLY, _bcast_trailing(g, cl, a.shape), _inv_T(g, a)),)


_linalg("slogdet", _slogdet_infer, _slogdet_ref, _slogdet_vjp, _factors(1))


# -- cholesky ---------------------------------------------------------------------------------------
def _chol_vjp(g, op, ct):
    """numpy reads A's lower triangle: with S = L^-T Phi(L^T dL) L^-1 (Phi: the lower
    triangle, diagonal halved) and G = (S + S^T) / 2, dA = 2 tril(G, -1) + diag(G)."""
    L = op.result
    shape = L.shape
    half = const_like(g, L, 0.5)
    P = mm(g, mT(g, L), ct)
    P = _where0(g, _tril_mask(g, shape), P)
    eye = g.emit(COMPARE, g.emit(IOTA, shape=shape, dtype="int64", dimension=len(shape) - 2),
                 g.emit(IOTA, shape=shape, dtype="int64", dimension=len(shape) - 1), direction="EQ")
    P = g.emit(SELECT, eye, g.emit(MULTIPLY, P, half), P)
    Li = g.emit(INV, L)
    S = mm(g, mm(g, mT(g, Li), P), Li)
    G = g.emit(MULTIPLY, g.emit(ADD, S, mT(g, S)), half)
    two_g = g.emit(ADD, G, G)
    out = g.emit(SELECT, eye, G, _where0(g, _tril_mask(g, shape, -1), two_g))
    return (out,)


_linalg("cholesky", _inv_infer, lambda a: np.linalg.cholesky(a), _chol_vjp)


# -- eigh, svd, qr: one op per result ------------------------------------------------------------
def _eigh_infer(a, part, uplo="L"):
    _square(a)
    check(uplo in ("L", "U"), f"eigh uplo must be 'L' or 'U', got {uplo!r}")
    check(part in ("w", "v"), f"eigh part must be 'w' or 'v', got {part!r}")
    return aval(a.shape if part == "v" else a.shape[:-1], a.dtype)


def _eigh_ref(a, part, uplo="L"):
    w, v = np.linalg.eigh(a, UPLO=uplo)       # the triangle it reads: LAPACK's signs follow it
    return v if part == "v" else w


def _eigh_factors(ins, outs, attrs):
    return _factors(2 if attrs["part"] == "v" else 1)(ins, outs, attrs)


_linalg("eigh", _eigh_infer, _eigh_ref, None, _eigh_factors,
        parts=(("w", "v"), lambda a, uplo="L": np.linalg.eigh(a, UPLO=uplo)))


def _eig_infer(a, part):
    _square(a)
    check(part in ("w", "v"), f"eig part must be 'w' or 'v', got {part!r}")
    return aval(a.shape if part == "v" else a.shape[:-1], "complex64" if a.dtype == "float32" else "complex128")


def _eig_ref(a, part):
    # always complex: numpy's real result where every eigenvalue is real is the frontend's
    w, v = np.linalg.eig(a)
    return (v if part == "v" else w).astype(np.result_type(a.dtype, np.complex64))


_linalg("eig", _eig_infer, _eig_ref, None, _eigh_factors,
        parts=(("w", "v"), lambda a: [x.astype(np.result_type(a.dtype, np.complex64)) for x in np.linalg.eig(a)]))


def _svd_shape(s, part, full):
    m, n = s[-2], s[-1]
    k = min(m, n)
    b = tuple(s[:-2])
    if part == "s":
        return b + (k,)
    if part == "u":
        return b + (m, m if full else k)
    return b + (n if full else k, n)


def _svd_infer(a, part, full_matrices):
    _matrix(a)
    check(part in ("u", "s", "vh"), f"svd part must be 'u', 's' or 'vh', got {part!r}")
    return aval(_svd_shape(a.shape, part, full_matrices), a.dtype)


def _svd_ref(a, part, full_matrices):
    if part == "s":
        return np.linalg.svd(a, compute_uv=False)
    u, s, vh = np.linalg.svd(a, full_matrices=full_matrices)
    return u if part == "u" else vh


def _svd_factors(ins, outs, attrs):
    return _factors(1 if attrs["part"] == "s" else 2)(ins, outs, attrs)


_linalg("svd", _svd_infer, _svd_ref, None, _svd_factors,
        parts=(("u", "s", "vh"), lambda a, full_matrices: np.linalg.svd(a, full_matrices=full_matrices)))


def _qr_shape(s, part, mode):
    m, n = s[-2], s[-1]
    k = min(m, n)
    b = tuple(s[:-2])
    if part == "q":
        return b + (m, m if mode == "complete" else k)
    return b + (m if mode == "complete" else k, n)


def _qr_infer(a, part, mode):
    _matrix(a)
    check(part in ("q", "r"), f"qr part must be 'q' or 'r', got {part!r}")
    check(mode in ("reduced", "complete"), f"qr mode must be 'reduced' or 'complete', got {mode!r}")
    return aval(_qr_shape(a.shape, part, mode), a.dtype)


def _qr_ref(a, part, mode):
    q, r = np.linalg.qr(a, mode=mode)
    return q if part == "q" else r


_linalg("qr", _qr_infer, _qr_ref, None, parts=(("q", "r"), lambda a, mode: np.linalg.qr(a, mode=mode)))
