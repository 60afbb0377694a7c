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

import math
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
        split = math.prod(axes_size(mesh, ax) for ax in assign.values())
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


# a loop's strategies are the combinations of a layout per distinct shape of its tensors;
# above this many, its factor strategies serve (each mesh axis on one carry), unplanned
MAX_LOOP_STRATEGIES = 64


def is_loop(op) -> bool:
    """A while or scan: a body run again and again, its carries in and out."""
    return op.attrs.get("num_carry") is not None and hasattr(op.attrs.get("body"), "ops")


def loop_strategies(op, mesh) -> list | None:
    """A loop's strategies: its tensors of one shape share one layout (the carries of an
    iterative solver are laid out alike; a carry's input and result are one tensor, which
    keeps one sharding by GSPMD's rule), every combination of those over its shapes, the
    replicated one first; a scanned array's scanned dim whole (it is read a slice an
    iteration). None where there are more than MAX_LOOP_STRATEGIES. (A factor assignment
    gives each mesh axis to one factor: to one carry only.)"""
    nc, nx = op.attrs["num_carry"], op.attrs.get("num_xs", 0)
    tensors = list(op.operands) + list(op.results)
    shapes = []
    for t in tensors:
        if t.shape not in shapes:
            shapes.append(t.shape)
    choices = [layouts(sh, mesh) for sh in shapes]
    if int(np.prod([len(c) for c in choices])) > MAX_LOOP_STRATEGIES:
        return None
    scanned = set(range(nc, nc + nx))          # (a while has no xs)
    out, seen = [], set()
    for combo in product(*choices):
        by = dict(zip(shapes, combo))
        ops_sh = tuple(_lead_whole(by[o.shape]) if i in scanned else by[o.shape] for i, o in enumerate(op.operands))
        res_sh = tuple(_lead_whole(by[r.shape]) if j >= nc else by[r.shape] for j, r in enumerate(op.results))
        key = tuple((s.spec, s.partial) for s in ops_sh + res_sh)
        if key in seen:
            continue
        seen.add(key)
        out.append(Strategy((), ops_sh, res_sh, 1))
    return out


def _lead_whole(s):
    return s.replace(spec=(None,) + tuple(s.spec[1:])) if s.spec else s
