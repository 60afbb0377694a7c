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
- `InRange`, `Both`, `Either`, `Negated`: range tests of positions (`lo <= pos < hi`) and
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


# A value that may differ per device is an int (the same on all) or a tuple of ints, one
# per device (plain Python: these are a handful of small numbers, asked thousands of times
# while a kernel is generated).
def each(f, *xs):
    """f applied per device."""
    n = next((len(x) for x in xs if isinstance(x, tuple)), None)
    if n is None:
        return f(*xs)
    return tuple(f(*[x[d] if isinstance(x, tuple) else x for x in xs]) for d in range(n))


def per_device(values):
    """An int when every device has the same value, else a tuple."""
    values = tuple(int(v) for v in np.atleast_1d(values))
    return values[0] if len(set(values)) == 1 else values


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
        return Pos(tuple(coefs.items()), each(lambda a, b: a + sign * b, self.const, other.const))

    def __add__(self, other):
        return self._merge(other, 1) if isinstance(other, Pos) else UNKNOWN

    def __sub__(self, other):
        return self._merge(other, -1) if isinstance(other, Pos) else UNKNOWN

    def __neg__(self):
        return Pos(tuple((v, -k) for v, k in self.terms), each(lambda a: -a, self.const))

    def __mul__(self, other):
        if not isinstance(other, Pos):
            return UNKNOWN
        a, b = (self, other) if not other.terms else (other, self)
        if a.terms:
            return UNKNOWN                    # a product of two index variables
        if b.terms and isinstance(a.const, tuple):
            return UNKNOWN                    # coefficients that differ per device
        prod = each(lambda x, y: x * y, a.const, b.const)
        return Pos(tuple((v, k * a.const) for v, k in b.terms), prod)

    def convert(self, dtype):
        return self if dtype in INTS else UNKNOWN

    def compare(self, other, direction):
        if not isinstance(other, Pos):
            return UNKNOWN
        d = self - other
        if direction == "GE":
            return InRange(d, 0, None)
        if direction == "GT":
            return InRange(d, 1, None)
        if direction == "LT":
            return InRange(d, None, 0)
        if direction == "LE":
            return InRange(d, None, 1)
        if direction == "EQ":
            return InRange(d, 0, 1)
        if direction == "NE":
            return Negated(InRange(d, 0, 1))
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


class InRange(_Cond):
    """lo <= pos < hi (None: no bound)."""

    def __init__(self, pos, lo, hi):
        self.pos, self.lo, self.hi = pos, lo, hi


def known(value: bool):
    """A test that always (or never) holds: a constant mask."""
    return InRange(Pos(), None, None) if value else InRange(Pos(), 0, 0)


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
            lo, hi = each(lambda x, y: x + k * y, lo, a), each(lambda x, y: x + k * y, hi, b)
        else:
            lo, hi = each(lambda x, y: x + k * y, lo, b), each(lambda x, y: x + k * y, hi, a)
    return lo, hi


def _empty(pos, ranges):
    """Is some variable's range empty (a loop with no iterations)?"""
    return any(anywhere(each(lambda a, b: a > b, *ranges[v])) for v, _ in pos.terms)


def anywhere(t) -> bool:
    """Is a per-device truth true on some device?"""
    return any(t) if isinstance(t, tuple) else bool(t)


def _test(lo, hi, tlo, thi):
    inside = (tlo is None or lo >= tlo) and (thi is None or hi < thi)
    outside = (tlo is not None and hi < tlo) or (thi is not None and lo >= thi)
    return 1 if inside else 0 if outside else -1


def _both(a, b):
    return 0 if a == 0 or b == 0 else 1 if a == 1 and b == 1 else -1


def _either(a, b):
    return 1 if a == 1 or b == 1 else 0 if a == 0 and b == 0 else -1


def truth(cond, ranges):
    """1 (holds everywhere in the region), 0 (nowhere), -1 (it depends): an int when all
    devices agree, else a tuple of them per device."""
    if isinstance(cond, InRange):
        if cond.lo is not None and cond.hi is not None and cond.hi <= cond.lo:
            return 0
        if _empty(cond.pos, ranges):
            return 1
        lo, hi = bounds(cond.pos, ranges)
        return per_device_code(each(lambda a, b: _test(a, b, cond.lo, cond.hi), lo, hi))
    if isinstance(cond, Both):
        return per_device_code(each(_both, truth(cond.a, ranges), truth(cond.b, ranges)))
    if isinstance(cond, Either):
        return per_device_code(each(_either, truth(cond.a, ranges), truth(cond.b, ranges)))
    if isinstance(cond, Negated):
        return each(lambda a: a if a == -1 else 1 - a, truth(cond.a, ranges))
    return -1


def per_device_code(t):
    return t[0] if isinstance(t, tuple) and len(set(t)) == 1 else t


def decided(t):
    """True / False when every device agrees on a decided value, else None."""
    return True if t == 1 else False if t == 0 else None


def tests(cond):
    """The range tests in a condition."""
    if isinstance(cond, InRange):
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
        if a != b:
            return set()
        rest = each(lambda x, y: x + k * y, rest, a)
    out = set()
    for bound in (test.lo, test.hi):
        if bound is None:
            continue
        # the first var value from which coef * var + rest >= bound holds (coef > 0), or
        # stops holding (coef < 0)
        at = each(lambda r: -(-(bound - r) // coef) if coef > 0 else (bound - r) // coef + 1, rest)
        out.update(at if isinstance(at, tuple) else (at,))
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
            return None if self.mesh is None else per_device(d.device_values(self.mesh, **op.attrs))
        if d.fusion not in ("elementwise", "reindex") or d.needs_comm or d.subgraphs:
            return None
        args = []
        for o in op.operands:
            a = self.of(o)
            if a is None:
                return None
            args.append(a)
        if d.fusion == "reindex":
            return args[0] if len(args) == 1 and d.reindex.index_pieces is None else None
        try:
            with np.errstate(all="ignore"):
                r = d.ref(*[np.asarray(a, dtype=o.dtype) for a, o in zip(args, op.operands)], **op.attrs)
        except Exception:          # noqa: BLE001 - then it is simply not known
            return None
        r = np.asarray(r)
        return per_device(r.reshape(-1)) if r.dtype.kind in "iu" else None
