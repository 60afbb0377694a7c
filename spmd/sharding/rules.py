"""Helpers over an op's FactorRule (ir/factors.py): the projections between dimension
shardings and factor shardings (Shardy's ShardingProjection), and the checks a rule
must pass.

A dim holds factors major to minor, e.g. the merged dim of reshape [8,4,16] -> [32,16]
holds (f0 = 8, f1 = 4). A split of that dim over mesh axes ("data", "model") gives the
major axes to the major factor until its size is used up: data (2) splits f0 into
4-sized pieces, model (2) too, so both axes land on f0 and f1 stays whole. Going back,
a minor factor only contributes its axes to a dim once every more major factor of that
dim is split all the way; otherwise the dim's shards would not be contiguous.
"""
from __future__ import annotations

import itertools

import numpy as np

from ..ir.factors import FactorRule


_SIZES = {}     # id(mesh) -> (mesh, {axis: size}); holding the mesh keeps its id unique


def _axis_sizes(mesh) -> dict:
    e = _SIZES.get(id(mesh))
    if e is None or e[0] is not mesh:
        e = _SIZES[id(mesh)] = (mesh, dict(zip(mesh.axis_names, mesh.shape)))
    return e[1]


def axes_size(mesh, axes) -> int:
    """The number of shards `axes` make (mesh.axes_size, without numpy: it is called
    in propagation's inner loop)."""
    sizes = _axis_sizes(mesh)
    n = 1
    for a in axes:
        n *= sizes[a]
    return n


def op_key(op):
    """What an op's factor rule is a function of, as a number: its name, its operands'
    and results' shapes and dtypes, its attributes (each with its type: 1 and True are
    equal keys but not equal attributes; an array by its dtype, shape and bytes). The
    same number for the same of all these, in this process; None where an attribute
    cannot be a key or is a graph (a loop's body: its contents may change, its identity
    not). (A number: the memos keyed by it hash an int, not the nested tuple.)"""
    attrs = []
    for k in sorted(op.attrs):
        v = op.attrs[k]
        t = type(v)
        if t is np.ndarray:
            v = (v.dtype.str, v.shape, v.tobytes())
        elif hasattr(v, "ops"):
            return None
        attrs.append((k, t, v))
    key = (op.name, tuple((o.shape, o.dtype) for o in op.operands), tuple((r.shape, r.dtype) for r in op.results),
           tuple(attrs))
    try:
        n = _KEYS.get(key)
    except TypeError:
        return None
    if n is None:
        if len(_KEYS) > _KEYS_MAX:
            _KEYS.clear()         # (the numbers go on from where they were: none is given twice)
        n = _KEYS[key] = next(_NUMBERS)
    return n


_KEYS = {}      # op_key's tuples -> their numbers
_KEYS_MAX = 1 << 16
_NUMBERS = itertools.count()

_RULES = {}     # op_key -> FactorRule: a program's layers repeat the same ops, and spmd.AUTO
                # propagates and partitions one program several times
_RULES_MAX = 1 << 15


def rule_of(op, key=None) -> FactorRule:
    """The op's factor rule on its own operand and result shapes (`key`: its op_key,
    where the caller has it)."""
    key = op_key(op) if key is None else key
    if key is None:
        return op.opdef.factors([o.aval for o in op.operands], [r.aval for r in op.results], op.attrs)
    rule = _RULES.get(key)
    if rule is None:
        if len(_RULES) > _RULES_MAX:
            _RULES.clear()
        rule = _RULES[key] = op.opdef.factors([o.aval for o in op.operands], [r.aval for r in op.results], op.attrs)
    return rule


def dim_to_factors(axes, factors, sizes, mesh) -> list:
    """A dim split over `axes` (major to minor) and holding `factors` (major to minor):
    [(factor, axes it is split over)]. Axes that cannot be expressed in the factors (a
    major factor that does not divide evenly by the next axis) are left out. The last
    factor takes whatever remains: an uneven split is allowed (the partitioner pads)."""
    out, axes = [], list(axes)
    for i, f in enumerate(factors):
        take, n = [], sizes.get(f, 1)
        last = i == len(factors) - 1
        while axes:
            k = axes_size(mesh, axes[:1])
            if n % k == 0 or last:
                take.append(axes.pop(0))
                n = max(n // k, 1)
            else:
                break
        out.append((f, tuple(take)))
        if axes and n != 1:
            break          # the rest of the dim's axes do not fit these factors
    return out


def factors_to_dim(factors, assignment, sizes, mesh) -> tuple:
    """The axes a dim holding `factors` is split over, given `assignment` (factor ->
    axes). A minor factor only adds its axes once every more major one is split all
    the way."""
    out = []
    for i, f in enumerate(factors):
        axes = tuple(assignment.get(f, ()))
        k, n = axes_size(mesh, axes), sizes.get(f, 1)
        if i < len(factors) - 1:
            # an uneven split of a major factor is not a contiguous split of this dim
            # ([6,4] -> [24] with the 6 split 4 ways holds rows {0,1},{2,3},{4,5},{} of
            # the input but elements 0-5, 6-11, ... of the merged dim): keep the major
            # axes that divide it
            while axes and n % k:
                axes = axes[:-1]
                k = axes_size(mesh, axes)
        out += axes
        if k != n:
            break
    return tuple(out)


def tensor_factors(dims, fmap, sizes, mesh) -> dict:
    """{factor: axes} of one tensor: its dims' axes projected onto its factors."""
    per = {}
    for axes, fs in zip(dims, fmap):
        for f, ax in dim_to_factors(axes, fs, sizes, mesh):
            if ax:
                per[f] = ax
    return per


def dim_cap(factors, rule: FactorRule, sizes=None):
    """How far the op lets a dim holding `factors` be split: None when it does not
    care, else the product of the factor sizes before the first `replicate` factor
    (1: the dim must stay whole). A split of the dim must divide the cap."""
    sizes = rule.sizes if sizes is None else sizes
    cap = 1
    for f in factors:
        if f in rule.replicate:
            return cap
        cap *= sizes.get(f, 1)
    return None


def check_rule(rule: FactorRule, avals_in, avals_out) -> list:
    """What is wrong with a rule for these operand/result shapes (empty: nothing).
    Used by the registry test, so that no op can carry a malformed rule."""
    bad = []
    if len(rule.operands) != len(avals_in):
        bad.append(f"{len(rule.operands)} operand maps for {len(avals_in)} operands")
    if len(rule.results) != len(avals_out):
        bad.append(f"{len(rule.results)} result maps for {len(avals_out)} results")
    seen_in, seen_out = set(), set()
    for maps, avals, seen, side in ((rule.operands, avals_in, seen_in, "operand"),
                                    (rule.results, avals_out, seen_out, "result")):
        for i, (fmap, a) in enumerate(zip(maps, avals)):
            if len(fmap) != len(a.shape):
                bad.append(f"{side} {i}: {len(fmap)} dims mapped, rank is {len(a.shape)}")
                continue
            used = [f for fs in fmap for f in fs]
            if len(set(used)) != len(used):
                bad.append(f"{side} {i}: a factor appears twice in one tensor: {fmap}")
            for d, (fs, n) in enumerate(zip(fmap, a.shape)):
                for f in fs:
                    if f not in rule.sizes:
                        bad.append(f"{side} {i} dim {d}: factor {f!r} has no size")
                prod = 1
                for f in fs:
                    prod *= rule.sizes.get(f, 1)
                # the factors of a dim never claim more than the dim holds; a dim may hold
                # less (an unnamed whole remainder), and a broadcast dim of size 1 holds none.
                # A permute factor (slice, pad, concatenate) has the size of its largest dim.
                if fs and n > 0 and not set(fs) & rule.permute and (prod > n or n % prod):
                    bad.append(f"{side} {i} dim {d}: factors {fs} of sizes {prod} do not fit size {n}")
            seen.update(used)
    for f in rule.reduction:
        if f in seen_out:
            bad.append(f"reduction factor {f!r} appears in a result")
        if f not in seen_in:
            bad.append(f"reduction factor {f!r} appears in no operand")
    for f in set(rule.sizes) - seen_in - seen_out:
        bad.append(f"factor {f!r} appears in no tensor")
    for kinds in ((rule.reduction, rule.replicate), (rule.reduction, rule.permute), (rule.replicate, rule.permute)):
        if kinds[0] & kinds[1]:
            bad.append(f"factors {sorted(kinds[0] & kinds[1])} have two kinds")
    return bad
