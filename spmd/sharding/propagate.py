"""Sharding propagation: a Sharding on every Value, from a few annotations.

Shardy's model, written once for all ops through their factor rules (ir/factors.py):
for an op, each tensor dim that holds a factor proposes the mesh axes it is split
over; the op's factors take the proposals (where they disagree, the proposal of the
largest tensor wins: keeping the biggest array in place moves the fewest bytes), and
the factors' axes are projected back onto every dim of every operand and result that
is not split yet. Information only flows into unsplit dims, so this terminates.

Sweeps go forward and backward over the graph to a fixed point, in priority order:
annotations are fixed first (in_shardings, out_shardings, sharding_constraint ops);
then pass-through ops (elementwise, transpose, reshape, convert), then contractions and
reductions, then everything else (broadcasts, slices, gathers...). Deterministic: ops
in graph order, ties broken by operand position.

`partial`: the result of a dot_general, a sum reduce or a scatter whose reduction
factor is split carries `partial` over those axes (its per-device values are summands),
unless it is annotated. Every other value is non-partial; the partitioner decides
where pending sums are resolved. Dims a factor rule marks `replicate` are never split.
"""
from __future__ import annotations

import numpy as np

from ..errors import ShardingError
from ..ir import Graph, clone
from .spec import Sharding

PASS_THROUGH = {"transpose", "reshape", "convert", "sharding_constraint"}
CONTRACT = {"dot_general", "reduce"}


def _level(op):
    fam = op.opdef.family
    if fam == "elementwise" or op.name in PASS_THROUGH:
        return 0
    if op.name in CONTRACT:
        return 1
    return 2


def _nbytes(v):
    return v.size * np.dtype(v.dtype).itemsize


class _State:
    def __init__(self, mesh):
        self.mesh = mesh
        self.dims = {}        # Value -> list of axis tuples, one per dim
        self.fixed = {}       # Value -> Sharding (hard constraints)
        self.why = {}         # Value -> [(dim, axes, reason)]
        self.rules = {}

    def get(self, v):
        d = self.dims.get(v)
        if d is None:
            d = self.dims[v] = [()] * v.ndim
        return d

    def fix(self, v, s, reason):
        s = s.for_rank(v.ndim, "annotated value")
        if v in self.fixed and self.fixed[v] != s:
            raise ShardingError(f"value {v} is annotated twice with different shardings: "
                                f"{self.fixed[v].text()} and {s.text()}")
        self.fixed[v] = s
        self.dims[v] = [s.dim_axes(d) for d in range(v.ndim)]
        self.why[v] = [(None, None, reason)]

    def rule(self, op):
        r = self.rules.get(op)
        if r is None:
            r = self.rules[op] = op.opdef.factors([o.aval for o in op.operands], [x.aval for x in op.results],
                                                  op.attrs)
        return r

    # -- one op ----------------------------------------------------------------------------
    def step(self, op) -> bool:
        rule = self.rule(op)
        tensors = list(op.operands) + list(op.results)
        maps = list(rule.operands) + list(rule.results)
        proposals = {}     # factor -> [(weight, -position, axes, value)]
        for pos, (v, fmap) in enumerate(zip(tensors, maps)):
            dims = self.get(v)
            for d, fs in enumerate(fmap):
                for f, axes in _split_among_factors(dims[d], fs, rule.sizes, self.mesh):
                    if axes and f not in rule.replicate:
                        proposals.setdefault(f, []).append((_nbytes(v), -pos, axes, v))
        chosen, used, src = {}, set(), {}
        order = sorted(proposals, key=lambda f: max(p[:2] for p in proposals[f]), reverse=True)
        for f in order:
            for w, negpos, axes, v in sorted(proposals[f], key=lambda p: p[:2], reverse=True):
                if not used & set(axes):
                    chosen[f] = axes
                    used |= set(axes)
                    src[f] = v
                    break
        changed = False
        for v, fmap in zip(tensors, maps):
            if v in self.fixed:
                continue
            dims = self.get(v)
            taken = {a for ax in dims for a in ax}
            for d, fs in enumerate(fmap):
                if dims[d]:
                    continue
                axes = _project(fs, chosen, rule.sizes, self.mesh)
                if axes and not taken & set(axes):
                    dims = list(dims)
                    dims[d] = axes
                    self.dims[v] = dims
                    taken |= set(axes)
                    origin = next(src[f] for f in fs if f in src)
                    self.why.setdefault(v, []).append((d, axes, (op, origin)))
                    changed = True
        return changed

    def partial_axes(self, op):
        """Axes a result is partial over: its split reduction factors."""
        if op.name not in ("dot_general", "scatter") and not (op.name == "reduce" and op.attrs["kind"] == "sum"):
            return ()
        if op.result.dtype == "bool":
            return ()
        rule = self.rule(op)
        axes = []
        for v, fmap in zip(op.operands, rule.operands):
            dims = self.get(v)
            for d, fs in enumerate(fmap):
                for f, ax in _split_among_factors(dims[d], fs, rule.sizes, self.mesh):
                    if f in rule.reduction:
                        axes += [a for a in ax if a not in axes]
        res_used = {a for ax in self.get(op.result) for a in ax}
        return tuple(a for a in self.mesh.axis_names if a in axes and a not in res_used)


def _split_among_factors(axes, factors, sizes, mesh):
    """A dim split over `axes` and holding `factors` (major to minor): which axes split
    which factor. Major axes go to the major factor until its size is used up."""
    out, axes = [], list(axes)
    for i, f in enumerate(factors):
        take, n = [], sizes.get(f, 1)
        while axes:
            k = mesh.axis_size(axes[0])
            last = i == len(factors) - 1
            if n % k == 0 or last:
                take.append(axes.pop(0))
                n = max(n // k, 1)
            else:
                break
        out.append((f, tuple(take)))
        if axes and n != 1:
            break          # the rest cannot be expressed in these factors
    return out


def _project(factors, chosen, sizes, mesh):
    """The axes a dim holding `factors` is split over, given each factor's axes. A minor
    factor only adds axes if every more major one is split all the way."""
    out = []
    for f in factors:
        axes = chosen.get(f, ())
        out += list(axes)
        if int(np.prod([mesh.axis_size(a) for a in axes] or [1])) != sizes.get(f, 1):
            break
    return tuple(out)


def propagate(graph: Graph, mesh, in_shardings, out_shardings) -> Graph:
    g, _ = clone(graph, keep_shardings=False)
    g.mesh = mesh
    st = _State(mesh)
    for v, s in zip(g.inputs, in_shardings):
        if s is not None:
            st.fix(v, s, "in_shardings")
    for i, (v, s) in enumerate(zip(g.outputs, out_shardings)):
        if s is not None and v not in st.fixed:
            st.fix(v, s, f"out_shardings[{i}]")
    for op in g.ops:
        if op.name == "sharding_constraint":
            s = Sharding(mesh, op.attrs["spec"], op.attrs.get("partial", ()))
            st.fix(op.result, s, f"spmd.shard at {op.loc}")
    ops = [op for op in g.ops if op.opdef.factors is not None]
    for level in range(3):
        active = [op for op in ops if _level(op) <= level]
        for _ in range(100):
            changed = False
            for op in active:
                changed |= st.step(op)
            for op in reversed(active):
                changed |= st.step(op)
            if not changed:
                break
    outputs = set(g.outputs)
    for v in g.values():
        if v in st.fixed:
            v.sharding = st.fixed[v]
            continue
        partial = st.partial_axes(v.producer) if v.producer is not None and len(v.producer.results) == 1 else ()
        if v in outputs:
            partial = ()        # what the user gets back is never a pending sum
        v.sharding = Sharding(mesh, tuple(ax if ax else None for ax in st.get(v)), partial)
    g.why = {v: st.why.get(v, []) for v in g.values()}
    return g
