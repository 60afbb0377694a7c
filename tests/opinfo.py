"""The OpInfo table: for every op of the registry, sample inputs and an independent numpy
expression of what the op must compute.

One entry per op. Each entry says how to make samples for one operand dtype (`make`),
what the result must be (`expect`, written here from scratch in plain numpy, never the
op's own `ref`), and where the op is differentiable (`grad_ok`, used by the gradient
tests to keep finite differences away from kinks). The partitioner tests reuse it:

    from opinfo import samples, expected
    for operands, attrs in samples("add", rng):
        want = expected("add", operands, attrs)

Ops that only make sense on one device of a mesh (collectives: `needs_comm`, and the
families in PER_DEVICE_FAMILIES) have no entry; `ops_to_test()` is the list that must.
"""
from __future__ import annotations

import itertools
import operator
import zlib
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

from spmd.ir import REGISTRY
from spmd.ir.ops.names import (
    ADD, BROADCAST_IN_DIM, COMPARE, CONSTANT, MULTIPLY, REDUCE, SIN, SUBTRACT
)

FLOATS = ("float32", "float64")
INTS = ("int32", "int64")

# ops that need a communicator or a mesh position: not testable on one device
PER_DEVICE_FAMILIES = ("collective",)
PER_DEVICE_OPS = ("sharding_constraint", "axis_index", "select_step")

# shapes every elementwise op is tried on: 0-d, size-1, empty and ordinary dims
SHAPES = [(), (1,), (4,), (2, 3), (0,), (2, 0), (1, 3, 1), (2, 1, 3)]


@dataclass(frozen=True)
class OpInfo:
    name: str
    # (rng, dtype) -> list of (operands, attrs); dtype is one of the op's registry dtypes
    make: Callable
    # (*operands, **attrs) -> ndarray: the result, in plain numpy
    expect: Callable
    # (operands, attrs) -> bool: the op is smooth at this point (for finite differences)
    grad_ok: Callable = lambda operands, attrs: True
    # why the op has no derivative, when it takes floats but has none
    nondiff: Optional[str] = None


TABLE: dict[str, OpInfo] = {}


def entry(name, make, expect, grad_ok=None, nondiff=None):
    assert name not in TABLE, name
    TABLE[name] = OpInfo(name, make, expect, grad_ok or (lambda ops, attrs: True), nondiff)


def is_per_device(name) -> bool:
    op = REGISTRY[name]
    if op.family == "control":      # they take the communicator only for the collectives of their bodies
        return False
    return op.needs_comm or op.family in PER_DEVICE_FAMILIES or name in PER_DEVICE_OPS


def ops_to_test():
    """Every registry op that must have a table entry."""
    return sorted(n for n in REGISTRY if not is_per_device(n))


def seed_of(name) -> int:
    """A seed for the samples of `name`, the same in every process (hash() of a str is
    not: each run drew other data, and a rare bad draw failed once in a while)."""
    return zlib.crc32(name.encode())


def samples(name, rng):
    """All samples of op `name`: a list of (operand arrays, attrs), over every dtype the
    registry says the op takes."""
    info = TABLE[name]
    out = []
    for dt in REGISTRY[name].dtypes:
        out.extend(info.make(rng, dt))
    return out


def expected(name, operands, attrs):
    return np.asarray(TABLE[name].expect(*operands, **attrs))


# ------------------------------------------------------------------------ value makers
def _isf(dt):
    """A float dtype (bfloat16, from ml_dtypes, has numpy kind 'V')."""
    return np.dtype(dt).kind == "f" or np.dtype(dt).name == "bfloat16"


def rand(rng, shape, dtype, lo=-3.0, hi=3.0, nonzero=False):
    """Random values of `dtype` in [lo, hi] (ints: integers in that range)."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return np.asarray(rng.random(shape) < 0.5)
    if dtype.kind in "iu":
        x = rng.integers(int(np.ceil(lo)), int(np.floor(hi)) + 1, size=shape).astype(dtype)
        if nonzero:
            x = np.where(x == 0, 1, x).astype(dtype)
        return x
    if dtype.kind == "c":            # complex: both parts in [lo, hi]
        x = (rng.uniform(lo, hi, size=shape) + 1j * rng.uniform(lo, hi, size=shape)).astype(dtype)
        if nonzero:
            x = np.where(np.abs(x) < 0.25, 0.5 + 0.5j, x).astype(dtype)
        return x
    x = rng.uniform(lo, hi, size=shape).astype(dtype)
    if nonzero:
        x = np.where(np.abs(x) < 0.25, np.where(x < 0, -0.5, 0.5), x).astype(dtype)
    return x


def wide(x):
    """x in float64 (complex128 if complex): the precision expectations are computed in."""
    return x.astype(np.complex128 if x.dtype.kind == "c" else np.float64)


def cast(f):
    """Evaluate f and give the result the first operand's dtype (numpy may widen 0-d)."""
    def g(*xs, **attrs):
        return np.asarray(f(*xs, **attrs)).astype(xs[0].dtype)
    return g


def away(x, points, eps=1e-2):
    """True when every element of x is at least eps away from every point."""
    x = np.asarray(x, dtype=np.float64)
    return all(np.all(np.abs(x - p) > eps) for p in points)


# ------------------------------------------------------------------------ elementwise
def unary(name, expect, lo=-3.0, hi=3.0, grad_ok=None, nondiff=None):
    def make(rng, dt):
        return [([rand(rng, s, dt, lo, hi)], {}) for s in SHAPES]
    entry(name, make, expect, grad_ok, nondiff)


def binary(name, expect, lo=-3.0, hi=3.0, y_lo=None, y_hi=None, y_nonzero=False, grad_ok=None,
           nondiff=None, y_int=None):
    y_lo = lo if y_lo is None else y_lo
    y_hi = hi if y_hi is None else y_hi

    def make(rng, dt):
        out = []
        for s in SHAPES:
            x = rand(rng, s, dt, lo, hi)
            lo_, hi_ = (y_int if y_int and np.dtype(dt).kind in "iu" else (y_lo, y_hi))
            y = rand(rng, s, dt, lo_, hi_, nonzero=y_nonzero)
            out.append(([x, y], {}))
        return out
    entry(name, make, expect, grad_ok, nondiff)


def _trunc_div(x, y):
    if x.dtype.kind in "iu":
        q = np.abs(x) // np.abs(y)
        return np.where(np.sign(x) * np.sign(y) < 0, -q, q).astype(x.dtype)
    return x / y


binary("add", lambda x, y: x + y)
binary("subtract", lambda x, y: x - y)
binary("multiply", lambda x, y: x * y)
binary("divide", _trunc_div, y_nonzero=True)
binary("maximum", lambda x, y: np.where(x >= y, x, y),
       grad_ok=lambda ops, a: away(ops[0] - ops[1], [0]))
binary("minimum", lambda x, y: np.where(x <= y, x, y),
       grad_ok=lambda ops, a: away(ops[0] - ops[1], [0]))
# floats: positive bases (log x is in d/dy); ints: non-negative exponents
binary("power", cast(lambda x, y: wide(x) ** wide(y) if _isf(x.dtype) or x.dtype.kind == "c" else x ** y),
       lo=0.5, hi=2.0, y_lo=-2.0, y_hi=2.0, y_int=(0, 4))
# C fmod: the result has the sign of the dividend
binary("remainder", cast(lambda x, y: x - y * (np.trunc(x.astype(np.float64) / y))
                         if _isf(x.dtype) else x - y * _trunc_div(x, y)),
       lo=-5.0, hi=5.0, y_lo=-2.0, y_hi=2.0, y_nonzero=True,
       grad_ok=lambda ops, a: away(np.abs(ops[0] / ops[1]) % 1.0, [0.0, 1.0], 0.05))
binary("and", lambda x, y: x & y)
binary("or", lambda x, y: x | y)
binary("xor", lambda x, y: x ^ y)
# counts outside [0, bits) included: numpy defines them (all bits shifted out). Expected
# values from Python's unbounded ints, wrapped to the width
def _shift_expect(left):
    def one(x, y, bits):
        if not 0 <= y < bits:
            return 0 if left or x >= 0 else -1
        v = (x << y) if left else (x >> y)
        return (v + 2 ** (bits - 1)) % 2 ** bits - 2 ** (bits - 1)
    return lambda x, y: np.array([one(int(a), int(b), 8 * x.itemsize) for a, b in zip(x.ravel(), y.ravel())],
                                 dtype=x.dtype).reshape(x.shape)



binary("shift_left", _shift_expect(True), lo=-40.0, hi=40.0, y_lo=-3.0, y_hi=70.0)
binary("shift_right", _shift_expect(False), lo=-40.0, hi=40.0, y_lo=-3.0, y_hi=70.0)

unary("negate", lambda x: (-wide(x)).astype(x.dtype) if _isf(x.dtype) or x.dtype.kind == "c" else -x)
unary("not", lambda x: ~x)
unary("abs", lambda x: np.hypot(x.real, x.imag) if x.dtype.kind == "c" else np.where(x < 0, -x, x).astype(x.dtype),
      grad_ok=lambda ops, a: away(np.abs(ops[0]), [0]))
unary("sign", cast(lambda x: (x > 0).astype(np.int8) - (x < 0).astype(np.int8)),
      grad_ok=lambda ops, a: away(ops[0], [0]))
unary("floor", cast(lambda x: x - np.mod(x, 1.0)),
      grad_ok=lambda ops, a: away(ops[0] % 1.0, [0.0, 1.0]))
unary("exp", cast(lambda x: np.e ** wide(x)))
unary("log", cast(lambda x: np.log2(wide(x)) / np.log2(np.e)), lo=0.1, hi=4.0)
unary("log1p", cast(lambda x: np.log(1.0 + x.astype(np.float64))), lo=-0.9, hi=3.0)
unary("tanh", cast(lambda x: (1 - np.exp(-2.0 * x)) / (1 + np.exp(-2.0 * x))))
unary("logistic", cast(lambda x: 0.5 * (1 + np.tanh(x.astype(np.float64) / 2))))
unary("sqrt", cast(lambda x: wide(x) ** 0.5), lo=0.1, hi=4.0)
unary("rsqrt", cast(lambda x: x.astype(np.float64) ** -0.5), lo=0.1, hi=4.0)
unary("sin", cast(lambda x: np.cos(x.astype(np.float64) - np.pi / 2)))
unary("cos", cast(lambda x: np.sin(x.astype(np.float64) + np.pi / 2)))

# complex parts (from the definition z = a + bi, not numpy's np.real / np.imag / np.conj)
_REAL_OF = {np.dtype("complex64"): np.float32, np.dtype("complex128"): np.float64}
unary("real", lambda z: np.array([complex(v).real for v in z.ravel()], _REAL_OF[z.dtype]).reshape(z.shape))
unary("imag", lambda z: np.array([complex(v).imag for v in z.ravel()], _REAL_OF[z.dtype]).reshape(z.shape))
_COMPLEX_OF = {np.dtype("float32"): np.complex64, np.dtype("float64"): np.complex128}
binary("complex", lambda a, b: np.array([complex(float(u), float(v)) for u, v in zip(a.ravel(), b.ravel())],
                                        _COMPLEX_OF[a.dtype]).reshape(a.shape))
unary("conj", lambda z: np.array([complex(v.real, -v.imag) for v in z.ravel()], z.dtype).reshape(z.shape))


# -- fft: the DFT written out as a matrix product, one axis at a time (not pocketfft)
def _dft(x, axis, sign, scale):
    n = x.shape[axis]
    k = np.arange(n)
    w = np.exp(sign * 2j * np.pi * np.outer(k, k) / n) * scale
    return np.moveaxis(np.tensordot(w, np.moveaxis(x, axis, 0), axes=(1, 0)), 0, axis)


def _scale(n, norm, inverse):
    return {"backward": 1.0 / n if inverse else 1.0, "ortho": n ** -0.5,
            "forward": 1.0 if inverse else 1.0 / n}[norm]


def _fft_expect(x, kind, axes, n, norm):
    cdt = {"float32": np.complex64, "complex64": np.complex64}.get(x.dtype.name, np.complex128)
    z = x.astype(np.complex128)
    if kind in ("fft", "ifft", "rfft"):
        inv = kind == "ifft"
        for a in axes:
            z = _dft(z, a, 1 if inv else -1, _scale(z.shape[a], norm, inv))
        if kind == "rfft":
            z = np.take(z, np.arange(n // 2 + 1), axis=axes[-1])
        return z.astype(cdt)
    for a in axes[:-1]:                  # irfft: inverse c2c on the others, then c2r
        z = _dft(z, a, 1, _scale(z.shape[a], norm, True))
    last = axes[-1]
    m = z.shape[last]
    k, t = np.arange(m), np.arange(n)
    wgt = np.where((k == 0) | ((n % 2 == 0) & (k == n // 2)), 1.0, 2.0)
    e = np.exp(2j * np.pi * np.outer(t, k) / n) * wgt * _scale(n, norm, True)
    z = np.moveaxis(np.tensordot(e, np.moveaxis(z, last, 0), axes=(1, 0)), 0, last)
    return z.real.astype(np.float32 if cdt is np.complex64 else np.float64)


FFT_CASES = [((8,), (0,)), ((5,), (0,)), ((3, 4), (1,)), ((3, 4), (0,)), ((4, 3), (0, 1)),
             ((4, 5), (1, 0)), ((2, 3, 4), (0, 2)), ((2, 3, 4), (2, 1, 0)), ((1, 1), (0, 1)), ((0, 4), (1,))]


def _make_fft(rng, dt):
    out = []
    norms = itertools.cycle(("backward", "ortho", "forward"))
    for shape, axes in FFT_CASES:
        if np.dtype(dt).kind == "f":
            out.append(([rand(rng, shape, dt)], {"kind": "rfft", "axes": axes, "n": shape[axes[-1]],
                                                 "norm": next(norms)}))
            continue
        for kind in ("fft", "ifft"):
            out.append(([rand(rng, shape, dt)], {"kind": kind, "axes": axes, "n": shape[axes[-1]],
                                                 "norm": next(norms)}))
        for n in (2 * shape[axes[-1]] - 2, 2 * shape[axes[-1]] - 1):
            if n >= 1:
                out.append(([rand(rng, shape, dt)], {"kind": "irfft", "axes": axes, "n": n,
                                                     "norm": next(norms)}))
    return out


entry("fft", _make_fft, _fft_expect)

CMP = {"EQ": operator.eq, "NE": operator.ne, "LT": operator.lt, "LE": operator.le,
       "GT": operator.gt, "GE": operator.ge}


def _make_compare(rng, dt):
    out = []
    dirs = ("EQ", "NE") if np.dtype(dt).kind == "c" else CMP      # complex numbers have no order
    for s, d in zip(SHAPES * 2, itertools.cycle(dirs)):
        x, y = rand(rng, s, dt), rand(rng, s, dt)
        y = np.where(rng.random(s) < 0.3, x, y).astype(dt)      # some equal pairs
        out.append(([x, y], {"direction": d}))
    return out


entry("compare", _make_compare, lambda x, y, direction: np.asarray(CMP[direction](x, y), dtype=bool),
      nondiff="its result is bool")


def _make_select(rng, dt):
    return [([rng.random(s) < 0.5, rand(rng, s, dt), rand(rng, s, dt)], {}) for s in SHAPES]


entry("select", _make_select, lambda p, a, b: np.array([y if c else z for c, y, z in
                                                       zip(p.ravel(), a.ravel(), b.ravel())],
                                                      dtype=a.dtype).reshape(a.shape))


def _make_convert(rng, dt):
    out = []
    for target, s in itertools.product(REGISTRY["convert"].dtypes, [(), (1,), (2, 0), (2, 3)]):
        out.append(([rand(rng, s, dt, -100.0, 100.0)], {"dtype": target}))
    return out


def _convert_expect(x, dtype):
    if np.dtype(dtype) == np.bool_:
        return x != 0
    if x.dtype.kind == "c" and np.dtype(dtype).kind != "c":
        x = x.real                                # numpy keeps the real part
    if np.dtype(dtype).kind in "iu" and _isf(x.dtype):
        return np.trunc(x).astype(dtype)          # toward zero
    return np.array(x.tolist(), dtype=dtype).reshape(x.shape)


entry("convert", _make_convert, _convert_expect,
      grad_ok=lambda ops, a: ops[0].dtype == np.float64 and a["dtype"] == "float64")


def _make_bitcast(rng, dt):
    size = np.dtype(dt).itemsize
    return [([rand(rng, s, dt, -100.0, 100.0)], {"dtype": target})
            for target in REGISTRY["bitcast"].dtypes if np.dtype(target).itemsize == size
            for s in [(), (1,), (2, 0), (2, 3)]]


entry("bitcast", _make_bitcast, lambda x, dtype: np.array(x, order="C").view(dtype),
      nondiff="the same bits read as another dtype")


# ------------------------------------------------------------------------ data movement
def _make_constant(rng, dt):
    return [([], {"value": rand(rng, s, dt)}) for s in SHAPES]


entry("constant", _make_constant, lambda value: value.copy())


def _make_iota(rng, dt):
    return [([], {"shape": s, "dtype": dt, "dimension": d})
            for s in [(1,), (5,), (0,), (2, 3), (2, 0), (2, 3, 4)] for d in range(len(s))]


entry("iota", _make_iota, lambda shape, dtype, dimension: np.indices(shape, dtype=dtype)[dimension]
      if len(shape) else np.zeros((), dtype))

BCASTS = [((), (2, 3), ()), ((3,), (2, 3), (1,)), ((1,), (4,), (0,)), ((2, 1), (2, 0), (0, 1)),
          ((2, 3), (2, 4, 3), (0, 2)), ((0,), (2, 0), (1,)), ((1, 3), (2, 2, 3), (1, 2)),
          ((), (), ()), ((2,), (2, 1), (0,))]


def _make_bcast(rng, dt):
    return [([rand(rng, x, dt)], {"shape": s, "broadcast_dimensions": bd}) for x, s, bd in BCASTS]


def _bcast_expect(x, shape, broadcast_dimensions):
    out = np.empty(shape, x.dtype)
    for idx in np.ndindex(*shape):
        src = tuple(0 if x.shape[i] == 1 else idx[d] for i, d in enumerate(broadcast_dimensions))
        out[idx] = x[src]
    return out


entry("broadcast_in_dim", _make_bcast, _bcast_expect)

RESHAPES = [((2, 3), (3, 2)), ((6,), (2, 3)), ((), (1, 1)), ((1,), ()), ((2, 0), (0, 5)),
            ((2, 3, 4), (6, 4)), ((4,), (4,)), ((2, 3, 4), (4, 3, 2)), ((1, 6, 1), (6,))]


def _make_reshape(rng, dt):
    return [([rand(rng, a, dt)], {"shape": b}) for a, b in RESHAPES]


entry("reshape", _make_reshape, lambda x, shape: np.array(x.ravel().tolist(), x.dtype).reshape(shape))

PERMS = [((), ()), ((3,), (0,)), ((2, 3), (1, 0)), ((2, 0, 3), (2, 0, 1)), ((1, 2, 3), (1, 2, 0)),
         ((2, 3, 4), (0, 2, 1))]


def _make_transpose(rng, dt):
    return [([rand(rng, s, dt)], {"permutation": p}) for s, p in PERMS]


def _transpose_expect(x, permutation):
    out = np.empty(tuple(x.shape[p] for p in permutation), x.dtype)
    for idx in np.ndindex(*out.shape):
        src = [0] * x.ndim
        for j, p in enumerate(permutation):
            src[p] = idx[j]
        out[idx] = x[tuple(src)]
    return out


entry("transpose", _make_transpose, _transpose_expect)

REVERSALS = [((), ()), ((5,), (0,)), ((0,), (0,)), ((1, 4), (1,)), ((3, 4), (0, 1)), ((2, 3, 5), (2, 0)),
             ((4, 3), ())]


def _make_reverse(rng, dt):
    return [([rand(rng, s, dt)], {"dimensions": d}) for s, d in REVERSALS]


def _reverse_expect(x, dimensions):
    out = np.empty_like(x)
    for idx in np.ndindex(*x.shape):
        src = tuple(x.shape[k] - 1 - i if k in dimensions else i for k, i in enumerate(idx))
        out[idx] = x[src]
    return out


entry("reverse", _make_reverse, _reverse_expect)

ROLLS = [((5,), 0, 1), ((5,), 0, 4), ((0, 3), 1, 2), ((3, 1), 0, 1), ((6, 4), 0, 3), ((6, 4), 1, 1), ((2, 3, 7), 2, 5), ((3, 2), 1, 1)]


def _make_roll(rng, dt):
    return [([rand(rng, s, dt)], {"shift": k, "dimension": d}) for s, d, k in ROLLS]


def _roll_expect(x, shift, dimension):
    out = np.empty_like(x)
    n = x.shape[dimension]
    for idx in np.ndindex(*x.shape):
        src = list(idx)
        src[dimension] = (idx[dimension] - shift) % n
        out[idx] = x[tuple(src)]
    return out


entry("roll", _make_roll, _roll_expect)

SLICES = [((5,), (1,), (4,), (1,)), ((5,), (0,), (5,), (2,)), ((6, 4), (1, 0), (5, 4), (3, 2)),
          ((3,), (1,), (1,), (1,)), ((0,), (0,), (0,), (1,)), ((), (), (), ()),
          ((2, 3), (2, 1), (2, 3), (1, 1)), ((4,), (1,), (4,), (7,)), ((1, 3), (0, 2), (1, 3), (1, 1))]


def _make_slice(rng, dt):
    return [([rand(rng, s, dt)], {"start": a, "limit": b, "stride": c}) for s, a, b, c in SLICES]


def _slice_expect(x, start, limit, stride):
    out = x
    for d, (a, b, c) in enumerate(zip(start, limit, stride)):
        out = np.take(out, np.arange(a, b, c, dtype=np.int64), axis=d)
    return out


entry("slice", _make_slice, _slice_expect)

PADS = [((3,), (1,), (2,), (0,)), ((3,), (0,), (0,), (1,)), ((2, 3), (1, 0), (0, 2), (1, 2)),
        ((0,), (1,), (1,), (2,)), ((), (), (), ()), ((1, 2), (0, 1), (1, 0), (3, 0)),
        ((2, 0), (0, 1), (1, 0), (0, 2))]


def _make_pad(rng, dt):
    return [([rand(rng, s, dt), rand(rng, (), dt)], {"low": lo, "high": hi, "interior": it})
            for s, lo, hi, it in PADS]


def _pad_expect(x, v, low, high, interior):
    out = x
    for d, (lo, hi, it) in enumerate(zip(low, high, interior)):
        parts = []
        for i in range(out.shape[d]):
            parts.append(np.take(out, [i], axis=d))
            if i + 1 < out.shape[d] and it:
                parts.append(np.full(out.shape[:d] + (it,) + out.shape[d + 1:], v, x.dtype))
        mid = np.concatenate(parts, axis=d) if parts else out
        widths = [(0, 0)] * x.ndim
        widths[d] = (lo, hi)
        out = np.pad(mid, widths, constant_values=v)
    return np.asarray(out, dtype=x.dtype)


entry("pad", _make_pad, _pad_expect)

CONCATS = [([(2, 3), (1, 3)], 0), ([(2, 3), (2, 0), (2, 2)], 1), ([(3,)], 0), ([(0, 2), (0, 2)], 0),
           ([(1,), (1,), (1,)], 0), ([(2, 1, 2), (2, 2, 2)], 1)]


def _make_concat(rng, dt):
    return [([rand(rng, s, dt) for s in shapes], {"dimension": d}) for shapes, d in CONCATS]


def _concat_expect(*xs, dimension):
    moved = [np.moveaxis(x, dimension, 0) for x in xs]
    rows = [r for m in moved for r in m]
    shape = (sum(m.shape[0] for m in moved),) + moved[0].shape[1:]
    out = np.array(rows, dtype=xs[0].dtype).reshape(shape) if rows else np.zeros(shape, xs[0].dtype)
    return np.moveaxis(out, 0, dimension)


entry("concatenate", _make_concat, _concat_expect)


# ------------------------------------------------------------------------ reduce
REDUCES = [((2, 3, 4), ()), ((2, 3, 4), (0,)), ((2, 3, 4), (1,)), ((2, 3, 4), (2,)),
           ((2, 3, 4), (0, 2)), ((2, 3, 4), (0, 1, 2)), ((), ()), ((0,), (0,)), ((2, 0), (1,)),
           ((2, 0), (0,)), ((3, 1), (1,))]


def _make_reduce(rng, dt):
    kinds = ("max", "min") if dt == "bool" else ("sum", "prod") if dt.startswith("complex") else ("sum", "max", "min", "prod")
    out = []
    for k in kinds:
        for s, axes in REDUCES:
            # prod: values near 1 keep float32 products accurate and away from 0
            x = rand(rng, s, dt, 0.5, 1.5) if k == "prod" and dt in FLOATS else rand(rng, s, dt)
            out.append(([x], {"kind": k, "axes": axes}))
    if dt in FLOATS:        # a product over rows with no, one and two zeros
        x = np.array([[1.5, 0.5, 2.0], [0.0, 1.5, 0.5], [0.0, 2.0, 0.0]], dtype=dt)
        out += [([x], {"kind": "prod", "axes": (1,)}), ([x], {"kind": "prod", "axes": (0, 1)})]
    return out


IDENTITY = {"sum": lambda dt: 0, "prod": lambda dt: 1,
            "max": lambda dt: (False if dt == np.bool_ else -np.inf if _isf(dt) else np.iinfo(dt).min),
            "min": lambda dt: (True if dt == np.bool_ else np.inf if _isf(dt) else np.iinfo(dt).max)}
COMBINE = {"sum": operator.add, "prod": operator.mul, "max": max, "min": min}


def _reduce_expect(x, kind, axes):
    kept = [d for d in range(x.ndim) if d not in axes]
    out = np.empty(tuple(x.shape[d] for d in kept), x.dtype)
    acc_dt = np.float64 if _isf(x.dtype) else x.dtype.type
    for idx in np.ndindex(*out.shape):
        acc = acc_dt(IDENTITY[kind](x.dtype)) if x.dtype != np.bool_ else IDENTITY[kind](x.dtype)
        for ridx in np.ndindex(*[x.shape[d] for d in axes]):
            full = [0] * x.ndim
            for d, i in zip(kept, idx):
                full[d] = i
            for d, i in zip(axes, ridx):
                full[d] = i
            acc = COMBINE[kind](acc, x[tuple(full)])
        out[idx] = acc
    return out


def _reduce_grad_ok(ops, attrs):
    x = ops[0]
    if attrs["kind"] in ("max", "min") and x.size:
        # no ties within a reduced group
        return len(np.unique(x)) == x.size
    return True


entry("reduce", _make_reduce, _reduce_expect, _reduce_grad_ok)


# ------------------------------------------------------------------------ cumulative
def _make_cumulative(rng, dt):
    out = []
    for shape in [(5,), (3, 4), (2, 3, 4), (0, 3), (1,)]:
        for axis in range(len(shape)):
            for kind in ("sum", "prod", "max", "min"):
                for reverse in (False, True):
                    lo, hi = (0.5, 1.5) if kind == "prod" else (-3.0, 3.0)
                    out.append(([rand(rng, shape, dt, lo, hi)], {"kind": kind, "axis": axis, "reverse": reverse}))
    return out


def _cumulative_expect(x, kind, axis, reverse):
    """A running reduction written out element by element."""
    out = np.empty_like(x)
    n = x.shape[axis]
    for idx in np.ndindex(*[s for d, s in enumerate(x.shape) if d != axis]):
        acc = None
        for i in (range(n - 1, -1, -1) if reverse else range(n)):
            full = list(idx)
            full.insert(axis, i)
            v = x[tuple(full)]
            acc = v if acc is None else COMBINE[kind](acc, v)
            out[tuple(full)] = acc
    return out


# only cumsum is differentiable (the others raise a TraceError in grad)
entry("cumulative", _make_cumulative, _cumulative_expect, lambda ops, attrs: attrs["kind"] == "sum")


# ------------------------------------------------------------------------ dot_general
DOTS = [((2, 3), (3, 4), (), (), (1,), (0,)), ((3,), (3,), (), (), (0,), (0,)),
        ((2,), (3,), (), (), (), ()), ((2, 3, 4), (2, 4, 5), (0,), (0,), (2,), (1,)),
        ((3, 2, 4), (4, 2, 5), (1,), (1,), (2,), (0,)), ((2, 3, 4), (4, 3, 5), (), (), (1, 2), (1, 0)),
        ((2, 0), (0, 3), (), (), (1,), (0,)), ((0, 3), (3, 2), (), (), (1,), (0,)),
        ((), (), (), (), (), ()), ((3,), (2, 3), (), (), (0,), (1,)), ((1, 1), (1, 1), (), (), (0,), (1,))]


def _make_dot(rng, dt):
    return [([rand(rng, a, dt), rand(rng, b, dt)],
             {"lhs_batch": lb, "rhs_batch": rb, "lhs_contract": lc, "rhs_contract": rc})
            for a, b, lb, rb, lc, rc in DOTS]


def _dot_expect(lhs, rhs, lhs_batch, rhs_batch, lhs_contract, rhs_contract):
    letters = iter("abcdefghijklmnop")
    L, R = [None] * lhs.ndim, [None] * rhs.ndim
    out = ""
    for a, b in zip(lhs_batch, rhs_batch):
        L[a] = R[b] = c = next(letters)
        out += c
    for a, b in zip(lhs_contract, rhs_contract):
        L[a] = R[b] = next(letters)
    for i in range(lhs.ndim):
        if L[i] is None:
            L[i] = c = next(letters)
            out += c
    for i in range(rhs.ndim):
        if R[i] is None:
            R[i] = c = next(letters)
            out += c
    acc = np.float64 if _isf(lhs.dtype) else lhs.dtype
    return np.einsum(f"{''.join(L)},{''.join(R)}->{out}", lhs.astype(acc), rhs.astype(acc)).astype(lhs.dtype)


entry("dot_general", _make_dot, _dot_expect)


# ------------------------------------------------------------------------ indexing
def _idx(rng, v, k):
    return np.array(v, dtype=INTS[k % 2])


DSLICES = [((5,), [1], (3,)), ((5,), [4], (3,)), ((5,), [-2], (2,)), ((3, 4), [1, 2], (2, 2)),
           ((3, 4), [0, 0], (0, 4)), ((), [], ()), ((2, 0), [1, 0], (1, 0)), ((3, 4), [9, -9], (3, 1))]


def _clamp(starts, shape, sizes):
    return [min(max(int(s), 0), n - k) for s, n, k in zip(starts, shape, sizes)]


def _make_ds(rng, dt):
    return [([rand(rng, s, dt)] + [_idx(rng, v, k) for k, v in enumerate(st)], {"slice_sizes": sz})
            for s, st, sz in DSLICES]


def _ds_expect(x, *starts, slice_sizes):
    st = _clamp(starts, x.shape, slice_sizes)
    out = np.empty(slice_sizes, x.dtype)
    for idx in np.ndindex(*slice_sizes):
        out[idx] = x[tuple(i + s for i, s in zip(idx, st))]
    return out


entry("dynamic_slice", _make_ds, _ds_expect)

DUS = [((5,), (2,), [1]), ((5,), (3,), [4]), ((5,), (2,), [-1]), ((3, 4), (2, 2), [1, 2]),
       ((3, 4), (0, 4), [2, 0]), ((), (), []), ((3, 4), (3, 4), [5, 5]), ((3, 1), (1, 1), [1, 0])]


def _make_dus(rng, dt):
    return [([rand(rng, s, dt), rand(rng, u, dt)] + [_idx(rng, v, k) for k, v in enumerate(st)], {})
            for s, u, st in DUS]


def _dus_expect(x, u, *starts):
    st = _clamp(starts, x.shape, u.shape)
    out = np.array(x, copy=True)
    for idx in np.ndindex(*u.shape):
        out[tuple(i + s for i, s in zip(idx, st))] = u[idx]
    return out


entry("dynamic_update_slice", _make_dus, _dus_expect)

GATHERS = [((5,), [3, 0, 4], 0), ((3, 4), [[1, 3], [0, 0]], 1), ((3, 4), 2, 0), ((3, 4), [], 1),
           ((2, 3), [-1, 5, 1], 1), ((0, 3), [], 0), ((2, 1, 2), [0, 0, 0], 1)]


def _make_gather(rng, dt):
    return [([rand(rng, s, dt), np.array(i, dtype=INTS[k % 2])], {"axis": a})
            for k, (s, i, a) in enumerate(GATHERS)]


def _gather_expect(x, idx, axis):
    n = x.shape[axis]
    shape = x.shape[:axis] + idx.shape + x.shape[axis + 1:]
    out = np.zeros(shape, x.dtype)
    if n == 0:
        return out
    for o in np.ndindex(*shape):
        i = o[axis:axis + idx.ndim]
        j = min(max(int(idx[i]), 0), n - 1)          # out-of-range indices clamp
        out[o] = x[o[:axis] + (j,) + o[axis + idx.ndim:]]
    return out


entry("gather", _make_gather, _gather_expect)

SCATTERS = [((5,), [3, 0, 3], 0), ((3, 4), [[1, 3], [0, 0]], 1), ((3, 4), 2, 0), ((3, 4), [], 1),
            ((2, 3), [-1, 5, 1], 1), ((2, 1, 2), [0, 0, 0], 1)]


def _make_scatter(rng, dt):
    out = []
    for k, (s, i, a) in enumerate(SCATTERS):
        idx = np.array(i, dtype=INTS[k % 2])
        upd = s[:a] + idx.shape + s[a + 1:]
        out.append(([rand(rng, s, dt), idx, rand(rng, upd, dt)], {"axis": a}))
    return out


def _scatter_expect(x, idx, upd, axis):
    n = x.shape[axis]
    acc = np.float64 if _isf(x.dtype) else x.dtype
    out = np.array(x, dtype=acc, copy=True)
    for o in np.ndindex(*upd.shape):
        i = o[axis:axis + idx.ndim]
        j = min(max(int(idx[i]), 0), n - 1)
        tgt = o[:axis] + (j,) + o[axis + idx.ndim:]
        out[tgt] = (out[tgt] or upd[o]) if x.dtype == np.bool_ else out[tgt] + upd[o]
    return out.astype(x.dtype)


entry("scatter", _make_scatter, _scatter_expect)


# -- control flow (bodies are small Graphs built here; the expectations are Python loops)
CF_SHAPES = [(), (1,), (4,), (2, 3), (0,), (3, 0)]


def _body(in_avals, build):
    """A Graph with inputs of in_avals and outputs build(graph, *inputs)."""
    from spmd.ir import Graph
    g = Graph("body")
    ins = [g.add_input(s, d) for s, d in in_avals]
    out = build(g, *ins)
    g.outputs = list(out) if isinstance(out, (list, tuple)) else [out]
    return g


def _splat(g, c, shape, dt):
    k = g.emit(CONSTANT, value=np.asarray(c, dt))
    return g.emit(BROADCAST_IN_DIM, k, shape=tuple(shape), broadcast_dimensions=()) if shape else k


def _make_while(rng, dt):
    # while min(x) < 6: x = x + k   (k >= 1 captured; an empty x stops at once: min is +inf)
    out = []
    for s in CF_SHAPES:
        x = rand(rng, s, dt)
        k = np.asarray(rng.integers(1, 3), dt)
        av = [(s, dt), ((), dt)]

        def cond(g, x, k, s=s):
            m = g.emit(REDUCE, x, kind="min", axes=tuple(range(len(s))))
            return g.emit(COMPARE, m, _splat(g, 6, (), dt), direction="LT")
        body = _body(av, lambda g, x, k, s=s: g.emit(ADD, x, g.emit(BROADCAST_IN_DIM, k, shape=s,
                                                                        broadcast_dimensions=()) if s else k))
        out.append(([x, k], {"cond": _body(av, cond), "body": body, "num_carry": 1}))
    return out


def _while_expect(x, k, cond, body, num_carry):
    x = x.copy()
    while x.size and x.min() < 6:
        x = x + k
    return x


entry("while", _make_while, _while_expect, nondiff="a data-dependent trip count (as in JAX)")


def _make_cond(rng, dt):
    out = []
    for n, s in enumerate(CF_SHAPES):
        x = rand(rng, s, dt)
        av = [(s, dt)]
        true = _body(av, lambda g, x, s=s: g.emit(MULTIPLY, x, _splat(g, 2, s, dt)))
        false = _body(av, lambda g, x, s=s: g.emit(SUBTRACT, x, _splat(g, 1, s, dt)))
        out.append(([np.asarray(n % 2 == 0), x], {"true": true, "false": false}))
    return out


def _cond_expect(pred, x, true, false):
    return (x * 2 if pred else x - 1).astype(x.dtype)


entry("cond", _make_cond, _cond_expect)


def _make_scan(rng, dt):
    # carry = carry * 2 + x[i] (+ k captured), over the leading dim of xs, either direction
    out = []
    for n, s in enumerate(CF_SHAPES):
        L = n % 3 + 1 if n != 4 else 0
        c, xs, k = rand(rng, s, dt), rand(rng, (L,) + s, dt), rand(rng, s, dt)
        av = [(s, dt), (s, dt), (s, dt)]
        body = _body(av, lambda g, c, x, k, s=s: g.emit(ADD, g.emit(ADD, g.emit(
            MULTIPLY, c, _splat(g, 2, s, dt)), x), k))
        out.append(([c, xs, k], {"body": body, "num_carry": 1, "num_xs": 1, "length": L, "reverse": n % 2 == 1}))
    return out


def _scan_expect(c, xs, k, body, num_carry, num_xs, length, reverse):
    order = range(length - 1, -1, -1) if reverse else range(length)
    for i in order:
        c = (c * 2 + xs[i] + k).astype(c.dtype)
    return c


entry("scan", _make_scan, _scan_expect)


def _make_checkpoint(rng, dt):
    # body(x, k) = sin(x * k) * x (ints: x * k * x); what a policy saves is tested with
    # spmd.checkpoint (tests/frontend/test_recompute_checkpoint.py): those are multi-result samples
    out = []
    for s in CF_SHAPES:
        x, k = rand(rng, s, dt), rand(rng, s, dt)

        def build(g, x, k):
            m = g.emit(MULTIPLY, x, k)
            return g.emit(MULTIPLY, g.emit(SIN, m) if dt in FLOATS else m, x)
        out.append(([x, k], {"body": _body([(s, dt), (s, dt)], build), "saved": 0}))
    return out


def _checkpoint_expect(x, k, body, saved):
    m = x * k
    return ((np.sin(m) if x.dtype.name in FLOATS else m) * x).astype(x.dtype)


entry("checkpoint", _make_checkpoint, _checkpoint_expect)


def _make_barrier(rng, dt):
    return [([rand(rng, s, dt)] + [rand(rng, t, dt) for t in after], {})
            for s, after in (((2, 3), ()), ((4,), ((2,),)), ((), ((3, 1), ())), ((0, 2), ((1,),)), ((1, 3), ()))]


entry("optimization_barrier", _make_barrier, lambda x, *after: x)
import opinfo_linalg  # noqa: E402,F401  (linalg, sort, atan2 entries)


def tolerance(dtype):
    """(rtol, atol) for comparing results of `dtype`; exact for ints and bools."""
    return {"float32": (1e-5, 1e-5), "float64": (1e-12, 1e-12), "float16": (2e-3, 2e-3),
            "bfloat16": (1.6e-2, 1.6e-2), "complex64": (1e-5, 1e-5),
            "complex128": (1e-12, 1e-12)}.get(np.dtype(dtype).name, (0, 0))
