"""Sharding propagation: a Sharding on every Value, from a few annotations.

    propagate(graph, mesh, in_shardings, out_shardings) -> a new Graph (a clone) in
    which every Value has `.sharding`, a Sharding of its rank on `mesh`.

Written once for all ops through their factor rules (ir/factors.py, Shardy's model).
One step on an op:

1. project each operand's and result's dim shardings onto the op's factors
   (rules.py): which mesh axes each tensor splits each factor over;
2. choose axes for every factor: the candidates are what the tensors propose (and
   their major prefixes); where they conflict -- two tensors split one factor
   differently, or two factors want one mesh axis -- the candidate whose loss would
   move the most bytes is kept (cost.py: the cheaper tensor is the one resharded);
   ties go to the longer split, then to the earlier tensor, then to the earlier factor;
3. project the factors' axes back onto every dim of every tensor that is not an
   annotation. A dim only ever grows: unsplit -> split, or (data) -> (data, model);
   a dim already split some other way keeps its split (the partitioner reshards
   there). Since every change adds an axis to a dim, this terminates.

Sweeps go forward then backward over the ops until nothing changes, in priority
order, each level adding ops to the ones before it (Shardy's op-priority propagation):

    0  pass-through: elementwise, transpose, reshape, convert, sharding_constraint
    1  contractions and reductions: dot_general, reduce
    2  the other data movement: slice, pad, concatenate, dynamic_slice,
       dynamic_update_slice, gather, scatter
    3  broadcasts and the ops that make values: broadcast_in_dim, iota, constant

Annotations -- in_shardings, out_shardings and sharding_constraint results
(spmd.shard) -- are fixed before the first sweep and never change: they are hard
constraints. Everything is deterministic: ops in graph order, factors in rule order.

What the result means, for the partitioner:

- `spec`: the axes each dim is split over (major to minor). A dim that does not
  divide evenly may be split (shards are padded). A dim holding a factor an op's rule
  marks `replicate` (a reshape's part that shares no factor with the other side) is
  never split, on the Values that op touches, unless the user annotated the Value so.
  A dim that a gather or dynamic_slice indexes is a reduction factor of that op: a
  split never flows into it through the op, but one that comes from elsewhere stays
  (the partitioner looks up locally and sums, or gathers, whichever is cheaper).
  Values of ops without a factor rule (collectives never appear in a global program)
  are left replicated.
- `partial`: only on the result of a dot_general, a sum reduce or a scatter whose
  reduction factor is split (over exactly those axes, minus any the result itself is
  split over), and on annotated values whose annotation says so. Such a value holds,
  per device, a summand: the sum over the partial axes is the value. It stays a
  pending sum: nothing here says where it is summed; the partitioner settles it where
  a consumer needs (e.g. data-parallel weight gradients are partial over `data` until
  the update uses them). Every other Value, and every graph output, is not partial.
- Graph outputs carry their out_shardings. When the output Value already has another
  fixed sharding (an input returned as is, a value returned twice, or one pinned by
  spmd.shard), a sharding_constraint op is added to make the output a Value of its own.

`graph.annotations` ({Value: "in_shardings for x" | "spmd.shard at f.py:3" |
"out_shardings[0]"}) and `graph.why` ({Value: [(dim, axes added, op, source Value,
source dim)]}) record where each split came from; spmd.explain prints them.
"""
from __future__ import annotations

from ..errors import ShardingError, where
from ..ir import Graph, Op, Value, clone
import numpy as np

from ..ir.ops.names import SHARDING_CONSTRAINT
from .cost import reshard_cost
from .rules import axes_size, dim_cap, factors_to_dim, op_key, rule_of, tensor_factors
from ..ir.mesh import Sharding

# Propagation._saved's answers (bounded: cleared when full)
_SAVED = {}
_SAVED_MAX = 200_000
# _State.choose's answers, per op_key, mesh and its tensors' splits (bounded alike)
_CHOSEN = {}
_CHOSEN_MAX = 200_000

LEVELS = 4


def level(op) -> int:
    """The op's propagation priority (0 first): its OpDef's `priority`."""
    return op.opdef.priority


def _sum_like(op) -> bool:
    """Does a split reduction factor leave the result a pending *sum*? (Contractions and
    scatter-add. gather and dynamic_slice on a split dim also can -- a masked lookup --
    but whether that beats gathering the operand is the partitioner's local choice, so
    their results are not declared partial.)"""
    return op.result.dtype != "bool" and op.opdef.reduction_kind(op.attrs) == "sum"


class _State:
    def __init__(self, mesh):
        self.mesh = mesh
        self.dims = {}         # Value -> [axes per dim]
        self.fixed = {}        # Value -> Sharding (annotations)
        self.annotations = {}  # Value -> why it is fixed
        self.why = {}          # Value -> [(dim, axes added, op, source Value, source dim)]
        self.rules = {}        # Op -> (FactorRule, its op_key)
        self.caps = {}         # (Value, dim) -> largest split the ops using it allow (None: any)
        self.users = {}        # Value -> the ops with a factor rule that read or make it
        self.settled = set()   # ops whose last step changed nothing, no tensor of theirs changed since

    def get(self, v):
        d = self.dims.get(v)
        if d is None:
            d = self.dims[v] = [()] * v.ndim
        return d

    def fix(self, v, s: Sharding, reason):
        self.fixed[v] = s
        self.dims[v] = [s.dim_axes(d) for d in range(v.ndim)]
        self.annotations[v] = reason

    def rule(self, op):
        return self.keyed(op)[0]

    def keyed(self, op):
        """(the op's FactorRule, its op_key)."""
        r = self.rules.get(op)
        if r is None:
            key = op_key(op)
            r = self.rules[op] = (rule_of(op, key), key)
        return r

    def add_caps(self, op):
        rule = self.rule(op)
        if not rule.replicate:
            return
        for v, fmap in zip(list(op.operands) + list(op.results), list(rule.operands) + list(rule.results)):
            for d, fs in enumerate(fmap):
                c = dim_cap(fs, rule)
                if c is not None:
                    old = self.caps.get((v, d))
                    self.caps[(v, d)] = c if old is None else np.gcd(old, c)

    def allowed(self, v, d, axes) -> bool:
        cap = self.caps.get((v, d))
        return cap is None or cap % axes_size(self.mesh, axes) == 0

    # -- one op ----------------------------------------------------------------------------
    def add_users(self, op):
        for t in list(op.operands) + list(op.results):
            self.users.setdefault(t, []).append(op)

    def choose(self, op):
        """-> ({factor: axes}, {factor: (source Value, source dim)}) for this op now."""
        tensors = list(op.operands) + list(op.results)
        chosen, source, _ = self.chosen(op, tensors)
        return dict(chosen), {f: (tensors[pos], d) for f, (pos, d) in source.items()}

    def chosen(self, op, tensors):
        """(choose's factors, its sources as (position in `tensors`, dim), per tensor per
        dim the axes the factors give that dim: factors_to_dim). Remembered per op_key,
        mesh and the splits of the op's tensors, which are all it reads (a program's
        layers repeat the same ops, and spmd.AUTO propagates one program several times)."""
        rule, key = self.keyed(op)
        if key is None:
            return self._chosen(rule, tensors)
        key = (key, self.mesh, tuple(tuple(self.get(t)) for t in tensors))
        got = _CHOSEN.get(key)
        if got is None:
            if len(_CHOSEN) > _CHOSEN_MAX:
                _CHOSEN.clear()
            got = _CHOSEN[key] = self._chosen(rule, tensors)
        return got

    def _chosen(self, rule, tensors):
        chosen, source = self._choose(rule, tensors)
        maps = list(rule.operands) + list(rule.results)
        news = tuple(tuple(factors_to_dim(fs, chosen, rule.sizes, self.mesh) for fs in fmap) for fmap in maps) \
            if chosen else ()
        return chosen, source, news

    def _choose(self, rule, tensors):
        mesh, sizes = self.mesh, rule.sizes
        maps = list(rule.operands) + list(rule.results)
        per = [tensor_factors(self.get(t), fmap, sizes, mesh) for t, fmap in zip(tensors, maps)]
        cands = []
        for fi, f in enumerate(sizes):
            if f in rule.replicate:
                continue
            options = []
            for p in per:
                ax = p.get(f, ())
                for n in range(len(ax), 0, -1):
                    if ax[:n] not in options:
                        options.append(ax[:n])
            for c in options:
                # saved: the bytes committing f to c saves, over not splitting f at all;
                # the source is the tensor that proposed it and gains the most
                saved, best = 0.0, None
                for pos, (t, fmap, p) in enumerate(zip(tensors, maps, per)):
                    have = p.get(f, ())
                    if not have:
                        continue
                    s = self._saved(t, fmap, p, f, have, c, sizes)
                    saved += s
                    related = c[:len(have)] == have or have[:len(c)] == c
                    if related and (best is None or s > best[0]):
                        best = (s, pos, next(d for d, fs in enumerate(fmap) if f in fs))
                cands.append((-saved, -len(c), best[1], fi, f, c, (best[1], best[2])))
        cands.sort(key=lambda x: x[:4])
        chosen, source, used = {}, {}, set()
        for *_, f, c, src in cands:
            if f in chosen or used & set(c):
                continue
            chosen[f] = c
            source[f] = src
            used |= set(c)
        return chosen, source

    def _saved(self, t, fmap, per, f, have, c, sizes):
        """Bytes a device would move to reshard tensor t from splitting factor f over
        `have` to not splitting it, minus those to splitting it over `c`. Remembered per
        everything it reads (a program's layers repeat the same tensors and factors, and
        spmd.AUTO propagates one program several times)."""
        fmap = tuple(tuple(fs) for fs in fmap)
        key = (self.mesh, tuple(t.shape), str(t.dtype), fmap, tuple(sorted(per.items())), f, have, c,
               tuple(sizes[x] for fs in fmap for x in fs))
        got = _SAVED.get(key)
        if got is None:
            if len(_SAVED) > _SAVED_MAX:
                _SAVED.clear()
            got = _SAVED[key] = self._saved_bytes(t, fmap, per, f, have, c, sizes)
        return got

    def _saved_bytes(self, t, fmap, per, f, have, c, sizes):
        def dims_with(axes):
            p = dict(per)
            p[f] = axes
            return [factors_to_dim(fs, p, sizes, self.mesh) if f in fs else factors_to_dim(fs, per, sizes, self.mesh)
                    for fs in fmap]
        def sharding(dims):
            # splitting f over c takes c from any other dim of t that holds it
            own = [d for d, fs in enumerate(fmap) if f in fs]
            dims = [tuple(a) if d in own else tuple(x for x in a if x not in c) for d, a in enumerate(dims)]
            return Sharding(self.mesh, tuple(a or None for a in dims))
        try:
            base = sharding(dims_with(have))
        except ShardingError:        # not a layout t can have: nothing to keep
            return float("-inf")
        drop = reshard_cost(base, sharding(dims_with(())), t.shape, t.dtype)
        keep = reshard_cost(base, sharding(dims_with(c)), t.shape, t.dtype)
        return drop - keep

    def step(self, op) -> bool:
        # a step only depends on its tensors' splits: skip it while they are as they were
        # the last time it changed nothing (a change to a tensor's splits unsettles its users)
        if op in self.settled:
            return False
        changed = self._step(op)
        if not changed:
            self.settled.add(op)
        return changed

    def _step(self, op) -> bool:
        rule = self.rule(op)
        tensors = list(op.operands) + list(op.results)
        chosen, source, news = self.chosen(op, tensors)
        if not chosen:
            return False
        changed = False
        for t, fmap, tnew in zip(tensors, list(rule.operands) + list(rule.results), news):
            if t in self.fixed:
                continue
            dims = list(self.get(t))
            for d, fs in enumerate(fmap):
                new = tnew[d]
                cur = dims[d]
                if len(new) <= len(cur) or new[:len(cur)] != cur:
                    continue
                others = {a for k, ax in enumerate(dims) if k != d for a in ax} | set(cur)
                add = []
                for a in new[len(cur):]:
                    if a in others or not self.allowed(t, d, cur + tuple(add) + (a,)):
                        break
                    add.append(a)
                if not add:
                    continue
                dims[d] = cur + tuple(add)
                f = next(f for f in fs if chosen.get(f) and (set(chosen[f]) & set(add)))
                pos, sd = source[f]
                self.why.setdefault(t, []).append((d, tuple(add), op, tensors[pos], sd))
                self.settled.difference_update(self.users.get(t, ()))
                changed = True
            self.dims[t] = dims
        return changed

    def partial_axes(self, op) -> tuple:
        """The axes the result of a sum-like contraction is partial over: its split
        reduction factors, as the op's final factor choice has them."""
        if len(op.results) != 1 or not _sum_like(op):
            return ()
        chosen, _ = self.choose(op)
        rule = self.rule(op)
        axes = {a for f in rule.reduction for a in chosen.get(f, ())}
        res_used = {a for ax in self.get(op.result) for a in ax}
        return tuple(a for a in self.mesh.axis_names if a in axes and a not in res_used)


def _annotation(mesh, v, s, what):
    if not isinstance(s, Sharding):
        raise ShardingError(f"{what}: expected a Sharding, got {s!r}")
    if s.mesh != mesh:
        raise ShardingError(f"{what}: sharding {s.text()} is on {s.mesh!r}, the program on {mesh!r}")
    if len(s.spec) > v.ndim:
        raise ShardingError(f"{what}: sharding {s.text()} has {len(s.spec)} entries but the value has "
                            f"shape {list(v.shape)}")
    return s.for_rank(v.ndim)


def propagate(graph: Graph, mesh, in_shardings, out_shardings, hints=None) -> Graph:
    """A copy of `graph` with a Sharding on every Value (see the module docstring).

    Loops (ops holding a `body` with a `num_carry`, ir/ops/control.py): a carried value
    keeps one sharding. Propagation iterates to a fixed point over the bodies: where the
    outer program leaves a carry unsplit but its body splits it (x = zeros_like(b) that
    the body updates with sharded values), the carry takes the body's sharding and the
    program is propagated again.

    `hints`: {(op index, result index): Sharding} of values to keep, as spmd.shard keeps
    its value's (spmd.AUTO's search gives the interior layouts it chose this way)."""
    given = dict(hints or {})
    hints = dict(given)
    for _ in range(4):
        g = _propagate(graph, mesh, in_shardings, out_shardings, hints, given)
        new = _carry_hints(g, mesh)
        if all(k in hints for k in new):
            return g
        hints.update({k: v for k, v in new.items() if k not in hints})
    return g


def _carry_hints(g, mesh) -> dict:
    """{(op index, result index): Sharding} for loop carries left unsplit whose body splits them."""
    out = {}
    for oi, op in enumerate(g.ops):
        body, nc = op.attrs.get("body"), op.attrs.get("num_carry")
        if body is None or not nc or not hasattr(body, "ops"):
            continue
        nx = op.attrs.get("num_xs", 0)
        carry = [r.sharding.for_rank(r.ndim) for r in op.results[:nc]]
        ins = [c if not c.is_replicated else None for c in carry]
        for o in op.operands[nc:nc + nx]:
            s = o.sharding.for_rank(o.ndim).replace(partial=())
            ins.append(Sharding(mesh, (None,) + tuple(s.spec[1:])))
        ins += [o.sharding.for_rank(o.ndim).replace(partial=()) for o in op.operands[nc + nx:]]
        try:
            bg = _propagate(body, mesh, ins, [], {})
        except ShardingError:
            continue
        for i, (c, v) in enumerate(zip(carry, bg.outputs[:nc])):
            s = v.sharding.for_rank(v.ndim).replace(partial=())
            if c.is_replicated and not s.is_replicated:
                out[(oi, i)] = s
    return out


def _propagate(graph: Graph, mesh, in_shardings, out_shardings, hints, given=()) -> Graph:
    g, _ = clone(graph, keep_shardings=False)
    g.mesh = mesh
    st = _State(mesh)
    names = getattr(in_shardings, "names", None) or [f"in_shardings[{i}]" for i in range(len(g.inputs))]
    out_names = getattr(out_shardings, "names", None) or [f"out_shardings[{i}]" for i in range(len(g.outputs))]
    in_shardings = list(in_shardings) + [None] * (len(g.inputs) - len(in_shardings))
    out_shardings = list(out_shardings) + [None] * (len(g.outputs) - len(out_shardings))

    for i, (v, s) in enumerate(zip(g.inputs, in_shardings)):
        if s is not None:
            st.fix(v, _annotation(mesh, v, s, names[i]), names[i])
    for op in g.ops:
        if op.name == "sharding_constraint":
            s = _annotation(mesh, op.result, Sharding(mesh, op.attrs["spec"], op.attrs.get("partial", ())),
                            f"spmd.shard{where(op.loc)}")
            st.fix(op.result, s, f"spmd.shard{where(op.loc)}")
    for (oi, ri), s in hints.items():
        why = "spmd.AUTO's choice" if (oi, ri) in given else "the loop carry its body splits"
        st.fix(g.ops[oi].results[ri], s, f"{why}{where(g.ops[oi].loc)}")
    for i, (v, s) in enumerate(zip(g.outputs, out_shardings)):
        if s is None:
            continue
        s = _annotation(mesh, v, s, out_names[i])
        if v in st.fixed and st.fixed[v] != s:
            # the Value is pinned already: the output becomes a resharded copy of it
            op = Op(SHARDING_CONSTRAINT, [v], {"spec": s.spec, "partial": s.partial}, [], v.producer.loc
                    if v.producer is not None else None)
            op.results = (Value(v.shape, v.dtype, op, 0),)
            g.ops.append(op)
            v = g.outputs[i] = op.result
        if v not in st.fixed:
            st.fix(v, s, out_names[i])

    ops = [op for op in g.ops if op.opdef.factors is not None]
    for op in ops:
        st.add_caps(op)
        st.add_users(op)
    for lv in range(LEVELS):
        active = [op for op in ops if level(op) <= lv]
        while True:
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
        partial = ()
        if v.producer is not None and v.producer.opdef.factors is not None and v not in outputs:
            partial = st.partial_axes(v.producer)
        v.sharding = Sharding(mesh, tuple(ax if ax else None for ax in st.get(v)), partial)
    g.annotations = dict(st.annotations)
    g.why = {v: list(st.why.get(v, [])) for v in g.values()}
    return g


__all__ = ["propagate", "level"]
