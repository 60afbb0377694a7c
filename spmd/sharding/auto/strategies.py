"""The ways one op can be split: its strategies, read off its factor rule.

A strategy gives each mesh axis (of size > 1) to at most one of the op's factors, the
axes of a factor major to minor in mesh order, each factor split evenly (a factor of
size n over axes of k shards needs k | n). From it follow the sharding of every operand
and result (the factors projected onto their dims, rules.factors_to_dim), whether the
result awaits a reduction (a split reduction factor), and how much of the op's work a
device does. A strategy that a tensor cannot express (a factor behind a whole major
factor of a merged dim, a dim the op needs whole) is not offered.

A Value with no producer (an argument) or one the search is told to choose (a result)
has "layouts" instead: each mesh axis on at most one dim, dividing it evenly.
"""
from __future__ import annotations

from itertools import product
from typing import NamedTuple

import numpy as np

from ...ir.mesh import Sharding
from ..rules import axes_size, factors_to_dim, rule_of, tensor_factors


class Strategy(NamedTuple):
    assignment: tuple        # ((factor, axes), ...) in the rule's factor order
    operands: tuple          # a Sharding per operand
    results: tuple           # a Sharding per result (partial where a reduction factor is split)
    split: int               # how many ways the op's work is divided


def _split_axes(mesh):
    return [a for a in mesh.axis_names if mesh.axis_size(a) > 1]


_MEMO = {}


def op_strategies(op, mesh) -> list:
    """Every Strategy of `op` on `mesh`, the unsplit one first (remembered per op name,
    shapes, dtypes and attributes: a step's layers repeat the same ops)."""
    try:
        key = (op.name, tuple((o.shape, str(o.dtype)) for o in op.operands),
               tuple((r.shape, str(r.dtype)) for r in op.results), tuple(sorted(op.attrs.items())), mesh)
        hash(key)
    except TypeError:
        return _strategies(op, mesh)
    got = _MEMO.get(key)
    if got is None:
        if len(_MEMO) > 20000:
            _MEMO.clear()
        got = _MEMO[key] = _strategies(op, mesh)
    return got


def _strategies(op, mesh) -> list:
    rule = rule_of(op)
    factors = [f for f in rule.sizes if f not in rule.replicate]
    axes = _split_axes(mesh)
    tensors = list(op.operands) + list(op.results)
    maps = list(rule.operands) + list(rule.results)
    sum_like = op.opdef.reduction_kind(op.attrs) is not None
    out, seen = [], set()
    for choice in product([None] + list(range(len(factors))), repeat=len(axes)):
        assign = {}
        for a, c in zip(axes, choice):
            if c is not None:
                assign[factors[c]] = assign.get(factors[c], ()) + (a,)
        if any(rule.sizes[f] % axes_size(mesh, ax) for f, ax in assign.items()):
            continue
        shardings, ok = [], True
        for t, fmap in zip(tensors, maps):
            dims = [factors_to_dim(fs, assign, rule.sizes, mesh) for fs in fmap]
            mine = {f: ax for f, ax in assign.items() if any(f in fs for fs in fmap)}
            if tensor_factors(dims, fmap, rule.sizes, mesh) != mine:
                ok = False
                break
            shardings.append(tuple(d or None for d in dims))
        if not ok:
            continue
        partial = ()
        if sum_like and len(op.results) == 1:
            red = {a for f in rule.reduction for a in assign.get(f, ())}
            partial = tuple(a for a in mesh.axis_names if a in red)
        n_in = len(op.operands)
        key = tuple(shardings) + (partial,)
        if key in seen:
            continue
        seen.add(key)
        ops_sh = tuple(Sharding(mesh, s) for s in shardings[:n_in])
        res_sh = tuple(Sharding(mesh, s, partial) for s in shardings[n_in:])
        split = int(np.prod([axes_size(mesh, ax) for ax in assign.values()])) if assign else 1
        out.append(Strategy(tuple((f, assign[f]) for f in rule.sizes if f in assign), ops_sh, res_sh, split))
    return out


def layouts(shape, mesh) -> list:
    """Every even layout of a value of `shape`: each split mesh axis on one dim or none,
    the replicated one first."""
    axes = _split_axes(mesh)
    nd = len(shape)
    out = []
    for choice in product([None] + list(range(nd)), repeat=len(axes)):
        spec = [()] * nd
        for a, d in zip(axes, choice):
            if d is not None:
                spec[d] = spec[d] + (a,)
        if any(axes and shape[d] % axes_size(mesh, spec[d]) for d in range(nd) if spec[d]):
            continue
        out.append(Sharding(mesh, tuple(s or None for s in spec)))
    return out
