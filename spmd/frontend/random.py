"""Counter-based random numbers: the same numbers on any mesh and any backend.

    key = spmd.random.key(0)
    k_init, k_drop = spmd.random.split(key)
    w = spmd.random.normal(k_init, (784, 256)) * 0.01
    mask = spmd.random.bernoulli(k_drop, 0.9, h.shape)      # inside or outside spmd.jit

A key is an int64 array of shape (2,) holding two 32-bit words. Element i (its flat,
row-major index in the *global* array) of a draw is Threefry-2x32 (20 rounds; Salmon et
al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011) of the counter (i mod 2^32,
i div 2^32) under the key. Inside spmd.jit the counters are `iota`s, which the
partitioner gives each device for its own shard: every device makes its part of the
array locally, with no communication, and the numbers do not depend on the mesh.
The arithmetic is 32-bit words kept in int64 (add then mask; rotations as a multiply
and a divide), so it runs on every backend. Outside of tracing the same code runs on
numpy arrays.

Keys are values: pass one into a jitted step as an argument and split it there (or
outside) for the next step; drawing twice from one key gives the same numbers.
"""
from __future__ import annotations

import numpy as np

from ..ir.ops.names import CONSTANT, DIVIDE, IOTA
from . import core
from .trace import Tracer, current_trace

_M32 = 0xFFFFFFFF
_ROT = (13, 15, 26, 6, 17, 29, 16, 24)
_PARITY = 0x1BD11BDA


def _add(a, b):
    return np.bitwise_and(np.add(a, b), _M32)


def _shr(x, s):
    """x >> s for 0 <= x < 2^63: a truncating integer divide (one IR op; numpy's
    floor_divide would add the fix-up for negative operands)."""
    if isinstance(x, Tracer):
        return core.binary(DIVIDE, x, 1 << s)
    return np.right_shift(x, s)


def _rotl(x, r):
    # x < 2^32 and r < 31, so x * 2^r fits in int64
    return np.bitwise_or(np.bitwise_and(np.multiply(x, 1 << r), _M32), _shr(x, 32 - r))


def threefry2x32(k0, k1, c0, c1):
    """Threefry-2x32-20 of counters (c0, c1) under key (k0, k1): two words in [0, 2^32)."""
    ks = (k0, k1, np.bitwise_xor(np.bitwise_xor(k0, k1), _PARITY))
    x0, x1 = _add(c0, ks[0]), _add(c1, ks[1])
    for r in range(20):
        x0 = _add(x0, x1)
        x1 = np.bitwise_xor(_rotl(x1, _ROT[r % 8]), x0)
        if r % 4 == 3:
            i = r // 4 + 1
            x0 = _add(x0, ks[i % 3])
            x1 = _add(_add(x1, ks[(i + 1) % 3]), i)
    return x0, x1


def key(seed) -> np.ndarray:
    """A key from an integer seed (any size: its low and high 32-bit words)."""
    seed = int(seed)
    if seed < 0:
        raise ValueError(f"spmd.random.key: seed must be non-negative, got {seed}")
    return np.array([seed & _M32, (seed >> 32) & _M32], dtype=np.int64)


def _words(k):
    if isinstance(k, Tracer):
        if k.shape != (2,):
            raise ValueError(f"spmd.random: a key has shape (2,), got {list(k.shape)}")
        return k[0], k[1]
    k = np.asarray(k)
    if k.shape != (2,) or k.dtype.kind not in "iu":
        raise ValueError(f"spmd.random: a key is an integer array of shape (2,) (spmd.random.key(seed)), "
                         f"got {k.dtype}{list(k.shape)}")
    return np.int64(k[0]), np.int64(k[1])


def _counters(shape, k):
    """The flat global index of every element of `shape`: iotas while tracing."""
    shape = tuple(int(s) for s in shape)
    t = k._tr if isinstance(k, Tracer) else current_trace()
    if t is None:
        i = np.arange(int(np.prod(shape, dtype=np.int64)), dtype=np.int64).reshape(shape)
    else:
        i = None
        stride = 1
        for d in reversed(range(len(shape))):
            io = Tracer(t.emit(IOTA, shape=shape, dtype="int64", dimension=d), t)
            term = io if stride == 1 else np.multiply(io, stride)
            i = term if i is None else np.add(i, term)
            stride *= shape[d]
        if i is None:
            i = Tracer(t.emit(CONSTANT, value=np.zeros((), np.int64)), t)
    return np.bitwise_and(i, _M32), _shr(i, 32)


def bits(k, shape, salt=0):
    """Two arrays of 32-bit words (as int64) of `shape` from key k."""
    k0, k1 = _words(k)
    c0, c1 = _counters(shape, k)
    if salt:
        c1 = np.bitwise_xor(c1, salt)
    return threefry2x32(k0, k1, c0, c1)


def split(k, num=2):
    """num new keys from k (shape (num, 2)); k itself should not be drawn from again."""
    x0, x1 = bits(k, (num,), salt=0x53504C54)
    return np.stack([x0, x1], axis=1)


def fold_in(k, data):
    """A new key from k and an integer (a step number, a rank)."""
    k0, k1 = _words(k)
    x0, x1 = threefry2x32(k0, k1, np.bitwise_and(data, _M32), np.int64(0x464F4C44))
    return np.stack([x0, x1]) if isinstance(x0, Tracer) else np.array([x0, x1], dtype=np.int64)


def _shape(shape):
    if shape is None:
        return ()
    return (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(s) for s in shape)


def uniform(k, shape=None, low=0.0, high=1.0, dtype="float64"):
    """Uniform in [low, high): 53 random bits per float64, 24 per float32."""
    shape = _shape(shape)
    x0, x1 = bits(k, shape)
    if np.dtype(dtype) == np.float32:
        u = np.multiply(_shr(x0, 8).astype("float32"), np.float32(2.0 ** -24))
    elif np.dtype(dtype) == np.float64:
        hi = _shr(x0, 6)                               # 26 bits
        lo = _shr(x1, 5)                               # 27 bits
        m = np.add(np.multiply(hi, 1 << 27), lo)
        u = np.multiply(m.astype("float64"), 2.0 ** -53)
    else:
        raise TypeError(f"spmd.random.uniform: dtype must be float32 or float64, got {dtype}")
    if low == 0.0 and high == 1.0:
        return u
    return np.add(np.multiply(u, np.subtract(high, low)), low).astype(dtype)


# Box-Muller's log and cos are written below in +, -, *, / and sqrt, which IEEE rounds
# exactly, so numpy, every backend and every host's libm give the same bits (numpy's SIMD
# log and a compiled kernel's libm log differ in the last bit on about one value in 500).
# Each sum is a separate multiply and add: a fused multiply-add would round differently.
_LN2_HI = float.fromhex("0x1.62e42fee00000p-1")      # ln 2's leading 32 bits: k * _LN2_HI is exact
_LN2_LO = float.fromhex("0x1.a39ef35793c76p-33")     # ln 2 - _LN2_HI
_SQRT2 = float.fromhex("0x1.6a09e667f3bcdp+0")
_ATANH_TERMS = tuple(2.0 / (2 * j + 3) for j in range(11))   # 2 atanh(s) = 2s + s*z*(2/3 + 2z/5 + ...)


def _horner(x, coeffs):
    acc = coeffs[-1]
    for c in reversed(coeffs[:-1]):
        acc = np.add(np.multiply(acc, x), c)
    return acc


def _log_of_word(n):
    """log(n / 2^32) for integers 1 <= n <= 2^32 (float64, within an ulp or two)."""
    m = n.astype("float64")                       # exact: n < 2^53
    e = np.multiply(m, 0.0)
    for s in (16, 8, 4, 2, 1):                    # m = 2^e * m' with m' in [1, 2): exact steps
        big = np.greater_equal(m, float(2 ** s))
        m = np.where(big, np.multiply(m, 2.0 ** -s), m)
        e = np.where(big, np.add(e, float(s)), e)
    up = np.greater(m, _SQRT2)                    # m' in [sqrt(1/2), sqrt(2)): |s| below 0.172
    m = np.where(up, np.multiply(m, 0.5), m)
    e = np.subtract(np.where(up, np.add(e, 1.0), e), 32.0)
    f = np.subtract(m, 1.0)                       # exact (Sterbenz)
    s = np.divide(f, np.add(f, 2.0))
    z = np.multiply(s, s)
    r = np.multiply(z, _horner(z, _ATANH_TERMS))
    half_ff = np.multiply(np.multiply(f, f), 0.5)
    log1pf = np.subtract(f, np.subtract(half_ff, np.multiply(s, np.add(half_ff, r))))
    return np.add(np.multiply(e, _LN2_HI), np.add(log1pf, np.multiply(e, _LN2_LO)))


_SIN_TERMS = tuple((-1) ** (j + 1) / float(np.prod(np.arange(2, 2 * j + 4, dtype=np.float64))) for j in range(8))
_COS_TERMS = tuple((-1) ** (j + 1) / float(np.prod(np.arange(1, 2 * j + 3, dtype=np.float64)))
                   for j in range(9))
_TURN = 2 * np.pi * 2.0 ** -32                   # a word's step of angle


def _cos_of_word(w):
    """cos(2 pi w / 2^32) for integers 0 <= w < 2^32: the quadrant and the reflection
    about pi/4 are taken on the integer, so the polynomials see angles in [0, pi/4]."""
    q = _shr(w, 30)
    r = np.bitwise_and(w, (1 << 30) - 1)
    over = np.greater(r, 1 << 29)
    a = np.multiply(np.where(over, np.subtract(1 << 30, r), r).astype("float64"), _TURN)
    z = np.multiply(a, a)
    sin_a = np.add(a, np.multiply(np.multiply(a, z), _horner(z, _SIN_TERMS)))
    cos_a = np.add(1.0, np.multiply(z, _horner(z, _COS_TERMS)))
    odd = np.equal(np.bitwise_and(q, 1), 1)
    v = np.where(np.not_equal(odd, over), sin_a, cos_a)
    negative = np.logical_or(np.equal(q, 1), np.equal(q, 2))
    return np.where(negative, np.negative(v), v)


def normal(k, shape=None, loc=0.0, scale=1.0, dtype="float64"):
    """Standard normal (Box-Muller of the element's two words), scaled and shifted."""
    shape = _shape(shape)
    x0, x1 = bits(k, shape, salt=0x4E4F524D)
    z = np.multiply(np.sqrt(np.multiply(_log_of_word(np.add(x0, 1)), -2.0)), _cos_of_word(x1))
    if loc != 0.0 or scale != 1.0:
        z = np.add(np.multiply(z, scale), loc)
    return z.astype(dtype)


def integers(k, low, high=None, shape=None, dtype="int64"):
    """Integers in [low, high) (numpy's Generator.integers; high=None means [0, low))."""
    if high is None:
        low, high = 0, low
    if int(high) <= int(low):
        raise ValueError(f"spmd.random.integers: high ({high}) must be greater than low ({low})")
    u = uniform(k, shape)
    return np.add(np.floor(np.multiply(u, float(int(high) - int(low)))).astype("int64"), int(low)).astype(dtype)


def bernoulli(k, p=0.5, shape=None):
    """True with probability p."""
    return np.less(uniform(k, shape), p)


def permutation(k, x):
    """A random permutation of range(x), or of an array's first axis. (Ranks by pairwise
    comparison of random keys: O(n^2) work, meant for n up to a few thousand.)"""
    n = int(x) if isinstance(x, (int, np.integer)) else x.shape[0]
    u = uniform(k, (n,))
    ui, uj = np.reshape(u, (n, 1)), np.reshape(u, (1, n))
    ii = np.arange(n).reshape(n, 1)
    jj = np.arange(n).reshape(1, n)
    before = np.logical_or(np.less(uj, ui), np.logical_and(np.equal(uj, ui), jj < ii))
    rank = np.sum(before, axis=1)                       # where element i goes
    perm = np.zeros_like(rank)
    perm[rank] = np.arange(n)
    if isinstance(x, (int, np.integer)):
        return perm
    return x[perm]


__all__ = ["key", "split", "fold_in", "uniform", "normal", "integers", "bernoulli", "permutation", "bits",
           "threefry2x32"]
