"""Sharding factor rules (the Shardy model), in the IR's own terms.

An op's rule names a *factor* for every dimension of every operand and result. A
dimension maps to a tuple of factors, major to minor (a reshape that merges two dims
maps the merged dim to both factors). Sharding a factor over a mesh axis shards every
dimension that holds it. Factor kinds:

- pass-through (default): sharded alike on operands and results, no communication;
- reduction: appears on operands only (a contracted or reduced dim, the looked-up dim
  of gather and dynamic_slice: each device reads what it holds, zeros elsewhere); if it
  is sharded, the result is partial over those mesh axes;
- replicate: the op needs this dim whole (the part of a reshape that shares no factor
  with the other side); propagation never splits such a dim;
- permute: may stay sharded, but the partitioner must move data across shard borders
  (slice, pad, concatenate on that dim: halo exchange).
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class FactorRule:
    operands: tuple          # per operand: per dim: tuple of factor names
    results: tuple           # per result: per dim: tuple of factor names
    sizes: dict = field(default_factory=dict)   # factor -> size
    reduction: frozenset = frozenset()
    replicate: frozenset = frozenset()
    permute: frozenset = frozenset()

    @property
    def factors(self):
        return tuple(self.sizes)

    def kind(self, f):
        if f in self.reduction:
            return "reduction"
        if f in self.replicate:
            return "replicate"
        if f in self.permute:
            return "permute"
        return "pass"


def einsum_rule(spec, avals_in, avals_out, reduction="", replicate="", permute="") -> FactorRule:
    """A rule from an einsum-like spec, one letter a dim: "bmk,bkn->bmn".

    `_` marks a dim with no factor (a size-1 dim that is broadcast, or a dim that is
    not sharded through this op). Sizes are read off the shapes.
    """
    lhs, rhs = spec.split("->")
    ins = lhs.split(",") if lhs or avals_in else []
    outs = rhs.split(",") if avals_out else []
    sizes = {}

    def dims(letters, aval):
        assert len(letters) == len(aval.shape), (spec, aval)
        out = []
        for c, n in zip(letters, aval.shape):
            if c == "_":
                out.append(())
            else:
                sizes[c] = max(sizes.get(c, 0), n)
                out.append((c,))
        return tuple(out)

    ops = tuple(dims(s, a) for s, a in zip(ins, avals_in))
    res = tuple(dims(s, a) for s, a in zip(outs, avals_out))
    return FactorRule(ops, res, sizes, frozenset(reduction), frozenset(replicate), frozenset(permute))


LETTERS = "abcdefghijklmnopqrstuvwxyz"


def letters(n, start=0):
    return LETTERS[start:start + n]


def reshape_rule(in_shape, out_shape) -> FactorRule:
    """Decompose a reshape into factors common to both sides, so a split on a merged
    dim can move to its major component and back. Where sizes share no factor the
    rest is marked replicate."""
    in_f = [[] for _ in in_shape]
    out_f = [[] for _ in out_shape]
    sizes, replicate = {}, set()
    if 0 in in_shape:     # an empty array: nothing to split, no factor to share
        return FactorRule((tuple(map(tuple, in_f)),), (tuple(map(tuple, out_f)),), sizes)
    i = j = 0
    ri = in_shape[0] if in_shape else 1
    rj = out_shape[0] if out_shape else 1
    n = 0

    def new(size):
        nonlocal n
        name = f"f{n}"
        n += 1
        sizes[name] = size
        return name

    from math import gcd
    while i < len(in_shape) and j < len(out_shape):
        if ri == 1:
            i += 1
            ri = in_shape[i] if i < len(in_shape) else 1
            continue
        if rj == 1:
            j += 1
            rj = out_shape[j] if j < len(out_shape) else 1
            continue
        g = ri if rj % ri == 0 else rj if ri % rj == 0 else gcd(ri, rj)
        if g == 1:
            f = new(ri)
            replicate.add(f)
            in_f[i].append(f)
            for k in range(i + 1, len(in_shape)):
                if in_shape[k] > 1:
                    in_f[k].append(new(in_shape[k]))
                    replicate.add(in_f[k][-1])
            break
        f = new(g)
        in_f[i].append(f)
        out_f[j].append(f)
        ri //= g
        rj //= g
    return FactorRule((tuple(map(tuple, in_f)),), (tuple(map(tuple, out_f)),), sizes,
                      frozenset(), frozenset(replicate), frozenset())
