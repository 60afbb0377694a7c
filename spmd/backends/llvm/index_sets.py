"""Index-set splitting: what the code generator knows about a kernel's positions and masks.

A stencil step on a split grid reads its operands through pads, concatenations and
dynamic slices (each a *guarded* load: an operand or a fill, picked by a range test of
the index) and masks its result with selects whose predicates are range tests of
positions (`iota + axis_index * chunk >= 1`). All of these are constant over large
boxes of the index space. The code generator splits each loop's range at the points
where some test changes (its *breakpoints*) and emits the loop nest once per region with
every test it can decide there replaced by its value: the interior of a Jacobi step is
then a clean affine loop nest that LLVM vectorises, and the boundary strips are small
loops of their own.

Here are the values that analysis computes with:

- `Pos`: an integer affine in the kernel's index variables, `const + sum(coef * var)`.
  `const` may be an int64 array with one entry per device of the mesh (a value built
  from `axis_index`): the program is the same on every device, so a test is decided
  only where it has the same value on all of them.
- `Test`, `Both`, `Either`, `Negated`: range tests of positions (`lo <= pos < hi`) and
  their conjunctions, disjunctions and negations.
- `UNKNOWN`: anything else (data, or arithmetic that leaves affine functions).

The ops' `position` rules (OpDef.position) build these with Python's operators.
Variables have ranges (inclusive bounds, ints or per-device arrays): a loop variable its
region's, a clamped index the clamp's, a dynamic slice's start its values per device.
"""
from __future__ import annotations

import numpy as np

MAX_INTERVALS = 9         # pieces a loop is split into at most
MAX_REGIONS = 64          # regions of a loop nest (the product over its loops) at most


class _Value:
    """Operators every abstract value has: anything not defined below is UNKNOWN."""

    def __add__(self, other):
        return UNKNOWN

    __sub__ = __mul__ = __and__ = __or__ = __add__

    def __neg__(self):
        return UNKNOWN

    __invert__ = __neg__

    def compare(self, other, direction):
        return UNKNOWN

    def convert(self, dtype):
        return UNKNOWN


class _Unknown(_Value):
    """Not a position: data, or arithmetic that leaves affine functions. A test of it is
    undecided, but `undecided & False` is still False."""

    def __and__(self, other):
        return Both(self, other) if isinstance(other, _Cond) else UNKNOWN

    def __or__(self, other):
        return Either(self, other) if isinstance(other, _Cond) else UNKNOWN

    def __repr__(self):
        return "UNKNOWN"


UNKNOWN = _Unknown()
INTS = ("int32", "int64")


class Pos(_Value):
    __slots__ = ("terms", "const")

    def __init__(self, terms=(), const=0):
        self.terms = tuple((v, int(k)) for v, k in terms if k)      # ((var, coef), ...)
        self.const = const                                          # int | int64[devices]

    @staticmethod
    def of(component):
        """The position of an index map's component (terms, const)."""
        terms, c = component
        return Pos(terms, c)

    def _merge(self, other, sign):
        coefs = dict(self.terms)
        for v, k in other.terms:
            coefs[v] = coefs.get(v, 0) + sign * k
        return Pos(tuple(coefs.items()), self.const + sign * other.const)

    def __add__(self, other):
        return self._merge(other, 1) if isinstance(other, Pos) else UNKNOWN

    def __sub__(self, other):
        return self._merge(other, -1) if isinstance(other, Pos) else UNKNOWN

    def __neg__(self):
        return Pos(tuple((v, -k) for v, k in self.terms), -self.const)

    def __mul__(self, other):
        if not isinstance(other, Pos):
            return UNKNOWN
        a, b = (self, other) if not other.terms else (other, self)
        if a.terms:
            return UNKNOWN                    # a product of two index variables
        if b.terms and np.ndim(a.const):
            return UNKNOWN                    # coefficients that differ per device
        if b.terms:
            return Pos(tuple((v, k * int(a.const)) for v, k in b.terms), b.const * a.const)
        return Pos((), a.const * b.const)

    def convert(self, dtype):
        return self if dtype in INTS else UNKNOWN

    def compare(self, other, direction):
        if not isinstance(other, Pos):
            return UNKNOWN
        d = self - other
        if direction == "GE":
            return Test(d, 0, None)
        if direction == "GT":
            return Test(d, 1, None)
        if direction == "LT":
            return Test(d, None, 0)
        if direction == "LE":
            return Test(d, None, 1)
        if direction == "EQ":
            return Test(d, 0, 1)
        if direction == "NE":
            return Negated(Test(d, 0, 1))
        return UNKNOWN

    def __repr__(self):
        return " + ".join([f"{k}*{v}" for v, k in self.terms] + [str(self.const)])


class _Cond(_Value):
    def __and__(self, other):
        return Both(self, other) if isinstance(other, (_Cond, _Unknown)) else UNKNOWN

    def __or__(self, other):
        return Either(self, other) if isinstance(other, (_Cond, _Unknown)) else UNKNOWN

    def __invert__(self):
        return Negated(self)

    def convert(self, dtype):
        return self if dtype == "bool" else UNKNOWN


class Test(_Cond):
    """lo <= pos < hi (None: no bound)."""

    def __init__(self, pos, lo, hi):
        self.pos, self.lo, self.hi = pos, lo, hi


def known(value: bool):
    """A test that always (or never) holds: a constant mask."""
    return Test(Pos(), None, None) if value else Test(Pos(), 0, 0)


class Both(_Cond):
    def __init__(self, a, b):
        self.a, self.b = a, b


class Either(_Cond):
    def __init__(self, a, b):
        self.a, self.b = a, b


class Negated(_Cond):
    def __init__(self, a):
        self.a = a


# -- deciding tests over a region ------------------------------------------------------------------
def bounds(pos, ranges):
    """(min, max) of a position over the variables' ranges (per device where they differ)."""
    lo = hi = pos.const
    for v, k in pos.terms:
        a, b = ranges[v]
        if k > 0:
            lo, hi = lo + k * a, hi + k * b
        else:
            lo, hi = lo + k * b, hi + k * a
    return lo, hi


def _empty(pos, ranges):
    """Is some variable's range empty (a loop with no iterations)?"""
    return any(np.any(np.asarray(ranges[v][0]) > np.asarray(ranges[v][1])) for v, _ in pos.terms)


def truth(cond, ranges, ndev):
    """Per device: 1 (holds everywhere in the region), 0 (nowhere), -1 (it depends)."""
    if isinstance(cond, Test):
        if (cond.lo is not None and cond.hi is not None and cond.hi <= cond.lo):
            return np.zeros(ndev, np.int8)
        if _empty(cond.pos, ranges):
            return np.ones(ndev, np.int8)
        lo, hi = bounds(cond.pos, ranges)
        lo, hi = np.broadcast_to(lo, (ndev,)), np.broadcast_to(hi, (ndev,))
        inside = np.ones(ndev, bool)
        outside = np.zeros(ndev, bool)
        if cond.lo is not None:
            inside &= lo >= cond.lo
            outside |= hi < cond.lo
        if cond.hi is not None:
            inside &= hi < cond.hi
            outside |= lo >= cond.hi
        return np.where(inside, 1, np.where(outside, 0, -1)).astype(np.int8)
    if isinstance(cond, Both):
        a, b = truth(cond.a, ranges, ndev), truth(cond.b, ranges, ndev)
        return np.where((a == 0) | (b == 0), 0, np.where((a == 1) & (b == 1), 1, -1)).astype(np.int8)
    if isinstance(cond, Either):
        a, b = truth(cond.a, ranges, ndev), truth(cond.b, ranges, ndev)
        return np.where((a == 1) | (b == 1), 1, np.where((a == 0) & (b == 0), 0, -1)).astype(np.int8)
    if isinstance(cond, Negated):
        a = truth(cond.a, ranges, ndev)
        return np.where(a == -1, -1, 1 - a).astype(np.int8)
    return np.full(ndev, -1, np.int8)


def decided(t):
    """True / False when every device agrees on a decided value, else None."""
    if np.all(t == 1):
        return True
    if np.all(t == 0):
        return False
    return None


def tests(cond):
    """The range tests in a condition."""
    if isinstance(cond, Test):
        return [cond]
    if isinstance(cond, (Both, Either)):
        return tests(cond.a) + tests(cond.b)
    if isinstance(cond, Negated):
        return tests(cond.a)
    return []


def breakpoints(test, var, ranges):
    """Where `test` may change its value along `var` (the other variables fixed: each
    must have one value per device), as a set of ints; empty if it cannot say."""
    coef = dict(test.pos.terms).get(var, 0)
    if not coef:
        return set()
    rest = test.pos.const
    for v, k in test.pos.terms:
        if v == var:
            continue
        a, b = ranges[v]
        if np.any(np.asarray(a) != np.asarray(b)):
            return set()
        rest = rest + k * np.asarray(a)
    out = set()
    for bound in (test.lo, test.hi):
        if bound is None:
            continue
        num = bound - np.asarray(rest, dtype=np.int64)
        # the first var value from which k * var + rest >= bound holds (k > 0), or stops
        # holding (k < 0)
        at = -(-num // coef) if coef > 0 else num // coef + 1
        out.update(int(x) for x in np.atleast_1d(at))
    return out


# -- the regions of a loop ---------------------------------------------------------------------------
def intervals(points, extent):
    """[lo, hi) pieces of range(extent) cut at the breakpoints inside it."""
    cuts = sorted(p for p in set(points) if 0 < p < extent)
    edges = [0] + cuts + [extent]
    return [(a, b) for a, b in zip(edges, edges[1:]) if a < b]


def coarsened(points, extent):
    """Three pieces at most: the longest interval and what lies either side of it (where
    the tests are then evaluated element by element). The breakpoints that make them."""
    iv = intervals(points, extent)
    lo, hi = max(iv, key=lambda t: t[1] - t[0])
    return {p for p in (lo, hi) if 0 < p < extent}


def capped(splits, extents, nests):
    """Breakpoints per loop key, within MAX_INTERVALS per loop and MAX_REGIONS per nest
    (`nests`: lists of keys whose loops nest, e.g. a kernel's root loops)."""
    out = {}
    for key, pts in splits.items():
        n = extents[key]
        out[key] = set(pts) if len(intervals(pts, n)) <= MAX_INTERVALS else coarsened(pts, n)
    for keys in nests:
        total = 1
        for k in keys:
            total *= len(intervals(out.get(k, ()), extents[k]))
        if total > MAX_REGIONS:
            for k in keys:
                if k in out:
                    out[k] = coarsened(out[k], extents[k])
    return out


# -- values per device ------------------------------------------------------------------------------
class DeviceValues:
    """The value of an integer scalar on each device of the mesh, where it is a function of
    the device's place in it only (axis_index and arithmetic of it), else None."""

    def __init__(self, mesh, splat):
        self.ndev = 1 if mesh is None else mesh.size
        self.mesh = mesh
        self.splat = splat
        self.memo = {}

    def of(self, v):
        if v in self.memo:
            return self.memo[v]
        self.memo[v] = None                 # (a cycle cannot occur in SSA; this is for depth)
        r = self._of(v)
        self.memo[v] = r
        return r

    def _of(self, v):
        if v.dtype not in INTS or v.size != 1:
            return None
        c = self.splat(v)
        if c is not None:
            return int(c)
        op = v.producer
        if op is None:
            return None
        d = op.opdef
        if d.device_values is not None:
            return None if self.mesh is None else np.asarray(d.device_values(self.mesh, **op.attrs), np.int64)
        if d.fusion not in ("elementwise", "reindex") or d.needs_comm or d.subgraphs:
            return None
        args = []
        for o in op.operands:
            a = self.of(o)
            if a is None:
                return None
            args.append(a)
        if d.fusion == "reindex":
            return args[0] if len(args) == 1 and d.index_pieces is None else None
        try:
            with np.errstate(all="ignore"):
                r = d.ref(*[np.asarray(a, dtype=o.dtype) for a, o in zip(args, op.operands)], **op.attrs)
        except Exception:          # noqa: BLE001 - then it is simply not known
            return None
        r = np.asarray(r)
        if r.dtype.kind not in "iu":
            return None
        r = r.astype(np.int64).reshape(-1)
        return int(r[0]) if r.size == 1 else r
