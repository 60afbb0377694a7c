"""What the IR knows of an integer value's range from the ops that made it.

A size numpy takes from the data (np.bincount's length, max(x) + 1) is known while
tracing when the values are bounded by how they were made: `np.clip(k, 0, n - 1)`,
`k % n`, `np.arange(n)`, a comparison (0 or 1), a constant. `int_range(v)` walks the ops
that made v and gives (lo, hi), each an int or None where it cannot say; the bound is for
every element, so it holds for any selection of them (x[mask]) too. What a builder knows
beyond its ops (numpy's % by a positive n) the trace records (frontend/value_bounds.py:
`known`) and passes in as `ranges`. The rules are a table keyed by op, beside the registry,
like the partition rules.
"""
from __future__ import annotations

import numpy as np

from .names import (ABS, ADD, AND, ARGSORT, BROADCAST_IN_DIM, COMPARE, CONCATENATE, CONSTANT, CONVERT, DIVIDE,
                    DYNAMIC_SLICE, GATHER, IOTA, MAXIMUM, MINIMUM, MULTIPLY, NEGATE, OPTIMIZATION_BARRIER,
                    REDUCE, REMAINDER, RESHAPE, REVERSE, ROLL, SELECT, SHARDING_CONSTRAINT, SHIFT_RIGHT, SLICE,
                    SUBTRACT, TRANSPOSE)

# ops that move elements without computing new ones: the first operand's elements, some of them
_MOVES = (BROADCAST_IN_DIM, RESHAPE, TRANSPOSE, SLICE, REVERSE, ROLL, DYNAMIC_SLICE,
          GATHER, SHARDING_CONSTRAINT, OPTIMIZATION_BARRIER)


def extremes(value, ranges=None, depth=24):
    """(least, greatest) element of the non-empty integer Value `value`, where the trace
    knows them exactly (recorded as attained, or an np.arange), through ops that keep every
    element (reshape, transpose, a widening convert); else None."""
    for _ in range(depth):
        got = (ranges or {}).get(id(value))
        if got is not None and got[0] is value and got[3]:
            return got[1], got[2]
        op = value.producer
        if op is None or value.size == 0:
            return None
        if op.name == IOTA:
            return 0, op.attrs["shape"][op.attrs["dimension"]] - 1
        if op.name in (RESHAPE, TRANSPOSE) or (op.name == CONVERT and _is_int(op.operands[0])
                                                    and np.dtype(str(value.dtype)).itemsize
                                                    >= np.dtype(str(op.operands[0].dtype)).itemsize):
            value = op.operands[0]
            continue
        return None
    return None


def int_range(value, ranges=None, depth=24):
    """(lo, hi) bounding every element of the integer or bool IR Value `value`, from the
    ops that made it and what `ranges` (a Trace's) records; None for a side the trace
    cannot bound."""
    name = str(value.dtype)
    if name == "bool":
        return 0, 1
    if not _is_int(value):
        return None, None
    lo, hi = _range(value, ranges or {}, depth)
    if ranges and id(value) in ranges and ranges[id(value)][0] is value:
        _, a, b, _ = ranges[id(value)]
        lo, hi = (a if lo is None else max(a, lo)), (b if hi is None else min(b, hi))
    info = np.iinfo(np.dtype(name))
    if any(b is not None and not info.min <= b <= info.max for b in (lo, hi)):
        lo, hi = None, None      # it may wrap around (an overflow, a narrowing convert): anywhere
    # the dtype bounds what the ops do not: a uint8 image is 0..255, any unsigned value is
    # at least 0 (not the 32- and 64-bit ints' far ends: no size is taken from those)
    if info.bits <= 16:
        lo, hi = (info.min if lo is None else lo), (info.max if hi is None else hi)
    elif info.min == 0 and lo is None:
        lo = 0
    return lo, hi


def _range(v, ranges, depth):
    op = v.producer
    if op is None or depth == 0:
        return None, None
    name, ins = op.name, op.operands
    r = lambda x: int_range(x, ranges, depth - 1)      # noqa: E731
    if name == CONSTANT:
        c = np.asarray(op.attrs["value"])
        if c.size == 0 or c.dtype.kind not in "biu":
            return None, None
        return int(c.min()), int(c.max())
    if name == IOTA:
        return 0, max(op.attrs["shape"][op.attrs["dimension"]] - 1, 0)
    if name == COMPARE:
        return 0, 1
    if name == ARGSORT:             # a permutation of the positions along its axis
        return 0, max(ins[0].shape[op.attrs["axis"]] - 1, 0)
    if name in _MOVES or (name == CONVERT and (_is_int(ins[0]) or str(ins[0].dtype) == "bool")):
        return r(ins[0])
    if name == CONCATENATE:
        return _union([r(x) for x in ins])
    if name == SELECT:
        return _union([r(ins[1]), r(ins[2])])
    if name == REDUCE and op.attrs.get("kind") in ("max", "min"):
        return r(ins[0])
    if name in (MAXIMUM, MINIMUM):
        (a, b), (c, d) = r(ins[0]), r(ins[1])
        pick = max if name == MAXIMUM else min
        if name == MAXIMUM:     # at least either's low; at most the larger high
            return _opt(pick, a, c, either=True), _opt(pick, b, d)
        return _opt(pick, a, c), _opt(pick, b, d, either=True)
    # arithmetic: bounded where its operands are on both sides (else it may overflow and
    # wrap around: int_range checks the bounds against the dtype)
    if name in (ADD, SUBTRACT, MULTIPLY):
        (a, b), (c, d) = r(ins[0]), r(ins[1])
        if None in (a, b, c, d):
            return None, None
        if name == ADD:
            return a + c, b + d
        if name == SUBTRACT:
            return a - d, b - c
        ps = [a * c, a * d, b * c, b * d]
        return min(ps), max(ps)
    if name == ABS:
        a, b = r(ins[0])
        if a is not None and a >= 0:
            return a, b
        if a is None or b is None:
            return None, None
        return (0 if a <= 0 <= b else min(abs(a), abs(b))), max(abs(a), abs(b))
    if name == NEGATE:
        a, b = r(ins[0])
        return (None, None) if a is None or b is None else (-b, -a)
    # non-negative values made smaller: a quantized image (img >> 6, img // 64, img & 15)
    if name in (DIVIDE, SHIFT_RIGHT) and _is_int(v):
        (a, b), (c, d) = r(ins[0]), r(ins[1])
        if a is None or b is None or c is None or a < 0 or c < (1 if name == DIVIDE else 0):
            return None, None
        if name == DIVIDE:            # truncating: c >= 1
            return a // (c if d is None else d), b // c
        return (0 if d is None else a >> d), b >> c
    if name == AND and _is_int(v):    # at most a non-negative operand's greatest
        his = [b for a, b in (r(ins[0]), r(ins[1])) if a is not None and a >= 0 and b is not None]
        return (0, min(his)) if his else (None, None)
    if name == REMAINDER:            # C's fmod: the dividend's sign, less than the divisor in size
        (a, b), (c, d) = r(ins[0]), r(ins[1])
        if c is None or d is None or c <= 0:
            return None, None
        top = d - 1
        if a is not None and a >= 0:
            return 0, top if b is None else min(b, top)
        return -top, top
    return None, None


def _is_int(v):
    return str(v.dtype).startswith(("int", "uint"))


def _opt(f, x, y, either=False):
    """f(x, y) where both sides are known; with `either`, the known one where one is."""
    if x is None or y is None:
        return (x if y is None else y) if either else None
    return f(x, y)


def _union(ranges):
    los, his = [a for a, _ in ranges], [b for _, b in ranges]
    return (None if None in los else min(los)), (None if None in his else max(his))
