"""The SPMD partitioner: a global Graph whose Values carry shardings -> the one
per-device Graph every rank runs (GSPMD's idea; the op handling follows Shardy's
factor rules).

For each op, generically (`_generic`):

1. Read the op's factor rule (ir/factors.py). Choose which mesh axes split each factor:
   candidates come from the result's propagated sharding and from each operand's
   current sharding; the one whose operand and result reshards move the fewest bytes
   wins (this is XLA's dot handler's choice among batch-, contracting- and
   free-dim-partitioned forms, and the mixed ones on 2-d meshes, in one rule).
2. Reshard each operand to what the choice implies (reshard.py plans the collectives).
3. Emit the op on local shapes. A sharded reduction factor makes the result partial
   over its axes (a sum pending); max/min/prod reductions and bool values are
   all-reduced at once, since `partial` means a pending sum.
4. Reshard the result to its propagated sharding; a pending sum is kept, though, when
   the split is the propagated one: its uses settle it where they need to.

Partial operands flow through ops that are linear in them (add, dot, transpose...)
when that moves fewer bytes than reducing them first, and are reduced first where the
op is not linear (exp, compare...); one all_reduce serves every use of a value. Uneven
dims are padded per shard; padding is unspecified, so reductions and contractions mask
it with their identity first (iota + axis_index + select).

Ops the generic handling does not fit have rules of their own, in partition_rules/
(one module per op family, tables keyed by op name): a rule for the whole op (`OPS`:
constant, slice / pad / concatenate / reverse / roll on a split dim by halo exchange,
fft, cumulative, control flow, sharding_constraint, debug_print) or for the local
computation of step 3 (`LOCAL`: iota's positions, dynamic_slice / gather on a split dim
as a masked local lookup -> a partial result, dynamic_update_slice / scatter as a masked
local update, no communication). A rule sees the partitioner as a PartitionContext
(partition_rules/partition_context.py).

The program is the same on every device: rank-dependent behaviour comes only from
axis_index, and nothing here loops over devices.
"""
from __future__ import annotations

import math
import dataclasses

from ..errors import ShardingError, where
from ..ir import Graph
from ..ir.graph import Aval
from ..ir.ops.names import ALL_REDUCE
from ..ir.ops.reduce import identity as reduce_identity
from .cost import reshard_cost
from .gathers import received_bytes, warn_gather, whole_dims_gathered
from .partition_rules import LOCAL, OPS, PartitionContext
from .reshard import Emitter, reshard
from .rules import op_key, rule_of
from ..ir.mesh import Sharding


def partition(graph: Graph) -> Graph:
    """Global graph with a sharding on every Value -> per-device graph. Inputs are the
    local padded shapes of graph.inputs (same order); outputs the local padded shapes
    of graph.outputs' shardings with no partial left."""
    if graph.mesh is None:
        raise ShardingError("partition: the graph has no mesh (propagate first)")
    return Partitioner(graph).run()


def linear_sets(op):
    """Alternative sets of operand indices the op is jointly linear in (its OpDef's
    `linear`): if the operands of one set carry a pending sum over some axes, so does the result."""
    lin = op.opdef.linear
    return list(lin(op) if callable(lin) else lin)


def reduction_kind(op) -> str:
    """The reduction a split reduction factor of op leaves pending (a masked lookup's is a sum)."""
    return op.opdef.reduction_kind(op.attrs) or "sum"


# -- factor rules, relaxed where a local masked implementation exists ----------------------
def _rule(op, key=None):
    opdef = op.opdef
    if opdef.factors is None:
        raise ShardingError(f"{op.name}{where(op.loc)}: the op has no sharding factor rule")
    rule = rule_of(op, key)
    if opdef.split_replicate == "partial":
        # a sharded looked-up dim: each device looks up what it holds, zeros elsewhere -> a partial sum
        rule = dataclasses.replace(rule, reduction=rule.reduction | rule.replicate, replicate=frozenset())
    elif opdef.split_replicate == "local":
        # a sharded updated dim: each device updates what it holds -> no communication
        rule = dataclasses.replace(rule, replicate=frozenset())
    return rule


class Partitioner(PartitionContext):
    """The partitioner: the driver (`run`), and the context the rules of partition_rules/
    receive (the members PartitionContext declares, documented there)."""

    def __init__(self, src: Graph):
        self.src = src
        self.mesh = src.mesh
        self.g = Graph(src.name)
        self.g.mesh = self.mesh
        self.em = Emitter(self.g, self.mesh)
        self.env = {}        # global Value -> (local Value, Sharding it is laid out by)
        self.memo = {}       # (local Value, from, to, global shape) -> resharded local Value
        self.cache = {}      # what handlers share between ops (keys of their own)
        self.op = None
        self._users = None
        self._noted = 0      # ops of self.g whose collectives are charged to a global op

    # -- driver ------------------------------------------------------------------------------
    def run(self):
        # collective -> the global op it was emitted for (or the output Value it makes),
        # so that spmd.explain can say which op of the user's needed it
        self.g.needed_by = {}
        for v in self.src.inputs:
            sh = self.sharding_of(v)
            self.env[v] = (self.g.add_input(sh.local_shape(v.shape), v.dtype), sh)
        for op in self.src.ops:
            self.op = op
            self.em.loc = op.loc
            rule = OPS.get(op.name, _generic)
            if len(op.results) != 1 and rule is _generic:
                raise ShardingError(f"{op.name}{where(op.loc)}: ops with {len(op.results)} results cannot be "
                                    f"partitioned yet")
            if op.opdef.family == "collective":
                raise ShardingError(f"{op.name}{where(op.loc)}: the global program already holds a collective; "
                                    f"collectives are inserted by the partitioner")
            if op.opdef.inlined:
                raise ShardingError(f"{op.name}{where(op.loc)}: stands for its body, which the compiler puts in "
                                    f"its place before propagation (passes/inline.py); partitioning the op itself "
                                    f"would leave its body unpartitioned")
            got = rule(self, op)
            self._note_collectives(op)
            if isinstance(got, list):     # a rule of a (multi-result) op: one pair a result
                for r, pair in zip(op.results, got):
                    self.env[r] = pair
                continue
            self.env[op.result] = got
        self.op = None
        outs = []
        for v in self.src.outputs:
            # what the user sees is never partial; the collective is charged to v's line
            self.em.loc = v.producer.loc if v.producer is not None else None
            outs.append(self.get(v, self.sharding_of(v).replace(partial=())))
            self._note_collectives(v)
        self.em.loc = None
        self.g.outputs = outs
        g = _dce(self.g)
        kept = set(g.ops)
        g.needed_by = {op: src for op, src in g.needed_by.items() if op in kept}
        return g

    def _note_collectives(self, src):
        """Charge the collectives emitted since the last note to `src`: a global op, or
        a global Value the program outputs."""
        for op in self.g.ops[self._noted:]:
            if op.opdef.collective.reshards is not None:
                self.g.needed_by.setdefault(op, src)
        self._noted = len(self.g.ops)

    def users(self, v) -> list:
        """The ops of the global graph that read v, in program order."""
        if self._users is None:
            self._users = {}
            for op in self.src.ops:
                for o in op.operands:
                    uses = self._users.setdefault(o, [])
                    if not uses or uses[-1] is not op:
                        uses.append(op)
        return self._users.get(v, [])

    def sharding_of(self, v) -> Sharding:
        s = v.sharding
        if s is None:
            return Sharding(self.mesh, (None,) * v.ndim)
        if s.mesh != self.mesh:
            raise ShardingError(f"value {v} has a sharding on mesh {s.mesh}, the graph is on {self.mesh}")
        return s.for_rank(v.ndim)

    def loc(self):
        """The user line of what is being partitioned."""
        return self.op.loc if self.op is not None else self.em.loc

    def what(self):
        if self.op is not None:
            return f"{self.op.name}{where(self.op.loc)}"
        return f"a program output{where(self.em.loc)}"

    def get(self, v, want: Sharding):
        lv, have = self.env[v]
        return self.reshard(lv, have, want, v.shape)

    def reshard(self, lv, have, want, shape):
        if have == want:
            return lv
        # one local Value can stand for two global values (a slice that keeps every
        # local element), so the key holds the global shape too
        key = (lv, have, want, tuple(shape))
        out = self.memo.get(key)
        if out is None:
            out = self.memo[key] = reshard(self.em, lv, have, want, shape, what=self.what())
        return out

    def lower_subgraph(self, g: Graph, in_shardings, out_shardings) -> Graph:
        """A control-flow body (a global sub-graph) -> its per-device graph, with its inputs
        and outputs pinned to the given shardings (a loop carry keeps one sharding; a
        predicate is replicated): propagation, then partitioning, as for a program."""
        from .propagate import propagate       # (it copies g: the global body stays as it is)
        return partition(propagate(g, self.mesh, list(in_shardings), list(out_shardings)))

    def sh(self, spec, partial=()):
        return Sharding(self.mesh, tuple(a if a else None for a in spec), partial)

    def axes_size(self, axes):
        return self.mesh.axes_size(axes) if axes else 1

    def carry_all(self, op, spec):
        """For ops that are linear in every operand and never grow much (slice, pad,
        concatenate): operands keep their pending sums over axes the result does not split."""
        axes = {a for o in op.operands for a in self.env[o][1].partial} - {a for ax in spec for a in ax}
        if op.result.dtype == "bool":
            return ()
        return tuple(a for a in self.mesh.axis_names if a in axes)

    def gather_fallback(self, x, cur_shape, spec, partial, d):
        """Gather dim d of x (split by `spec`): the route when a halo would take too many hops."""
        warn_gather(self.what(), Aval(tuple(cur_shape), x.dtype), self.sh(spec, partial),
                    "it moves data across many shards of that dim: a gather instead of a halo exchange",
                    self.loc(), [d])
        whole = list(spec)
        whole[d] = ()
        return self.reshard(x, self.sh(spec, partial), self.sh(whole, partial), cur_shape), whole

    def warn_gathered(self, v, have, why, dims=None):
        """A rule that gathers split dims of global value v (laid out by `have`; all of
        them if dims is None) whole says so, through the one warning of such gathers
        (gathers.py)."""
        warn_gather(self.what(), v, have, why, self.loc(), dims)

    def mask_reduction_dims(self, op, rule, assign, locals_, shardings, kind="sum"):
        """Padding in a dim that is reduced over must hold the reduction's identity."""
        out = []
        for i, (x, sh, arr) in enumerate(zip(locals_, shardings, rule.operands)):
            v = op.operands[i]
            for d, fs in enumerate(arr):
                if any(f in rule.reduction and assign.get(f) for f in fs):
                    x = self.em.mask_dim(x, d, sh.dim_axes(d), v.shape[d], reduce_identity(kind, v.dtype))
            out.append(x)
        return out

    def finish(self, local, have: Sharding, target: Sharding, shape, dtype, kind="sum"):
        """An op's local result laid out by `have` -> the propagated `target`. Partial
        axes that are not a pending *sum* (max/min/prod, bool) are reduced now. A pending
        sum the target does not have is kept when the split is the target's: the uses
        settle it where they need to, so a sum of partial terms (d x = d q + d k + d v)
        costs one all_reduce, not one per term."""
        if have.partial and (kind != "sum" or dtype == "bool"):
            red = "max" if dtype == "bool" and kind == "sum" else kind
            local = self.em.emit(ALL_REDUCE, local, axes=have.partial, reduction=red,
                                 group_size=self.axes_size(have.partial))
            have = have.replace(partial=())
        if have.spec == target.spec and set(target.partial) <= set(have.partial):
            return local, have
        return self.reshard(local, have, target, shape), target

    # -- partial operands --------------------------------------------------------------------
    def carried_partial(self, op, ins, used, result_spec, result_partial, target):
        """Which operand set carries its pending sum into the result (and over which
        axes), or () if reducing the operands first moves fewer bytes."""
        res = op.result
        sets = linear_sets(op)
        carrying = [i for i, (_, h) in enumerate(ins) if h.partial]
        if not carrying or not sets or res.dtype == "bool":
            return (), ()
        best = max(sets, key=lambda s: sum(1 for i in carrying if i in s))
        axes = {a for i in best for a in ins[i][1].partial} - set(used)
        if not axes:
            return (), ()
        pending = tuple(a for a in self.mesh.axis_names if a in axes)
        full = tuple(a for a in self.mesh.axis_names if a in set(pending) | set(result_partial))
        carry = reshard_cost(self.sh(result_spec, full), target, res.shape, res.dtype)
        early = reshard_cost(self.sh(result_spec, result_partial), target, res.shape, res.dtype)
        for i in best:
            v = op.operands[i]
            h = ins[i][1]
            if h.partial:
                early += reshard_cost(h, h.replace(partial=()), v.shape, v.dtype)
        # on a tie reduce first: the reduced operand may be shared with other uses
        return (best, pending) if carry < early else ((), ())


# -- the generic, factor-driven handler -----------------------------------------------------
def _split_factors(factors, sizes):
    """The factors of a dim that a split can land on: those of size > 1 (a size-1 dim
    split over devices keeps its one factor: only one shard holds the element)."""
    return [f for f in factors if sizes[f] > 1] or list(factors)[:1]


def _dim_assign(mesh, factors, axes, sizes):
    """Split a dim's axes among its factors (major to minor), or None if the split does
    not fit the factors (a minor factor may only be split once the major ones are whole)."""
    fs = _split_factors(factors, sizes)
    axes = list(axes)
    out, i = {}, 0
    for idx, f in enumerate(fs):
        last = idx == len(fs) - 1
        take, prod = [], 1
        while i < len(axes):
            s = mesh.axis_size(axes[i])
            if not last and sizes[f] % (prod * s):
                break
            take.append(axes[i])
            prod *= s
            i += 1
        if take:
            out[f] = tuple(take)
        if not last and prod != sizes[f]:
            break
    return out if i == len(axes) else None


def _arrays(rule):
    return list(rule.operands) + list(rule.results)


def _violation(mesh, rule, assign, shapes):
    """A factor whose axes make some dim's split not the standard padded layout, or None.

    A dim holding factors (f1, f2, ...) major to minor may split f2 only once f1 is split
    all the way; the last split factor must divide evenly unless it is the dim's only
    factor (a dim whose factors do not cover it has an unnamed whole minor part)."""
    for arr, shape in zip(_arrays(rule), shapes):
        for dim, n in zip(arr, shape):
            fs = _split_factors(dim, rule.sizes)
            whole = math.prod(rule.sizes[f] for f in fs) == n
            for idx, f in enumerate(fs):
                g = mesh.axes_size(assign[f]) if assign.get(f) else 1
                later = [x for x in fs[idx + 1:] if assign.get(x)]
                if later and g != rule.sizes[f]:
                    return later[-1]
                only = len(fs) == 1 and whole
                if g > 1 and not later and not only and rule.sizes[f] % g:
                    return f
    return None


def _repair(mesh, rule, assign, shapes):
    assign = dict(assign)
    while True:
        f = _violation(mesh, rule, assign, shapes)
        if f is None:
            return assign
        del assign[f]


def _spec_of(arr, assign):
    return tuple(tuple(a for f in dim for a in assign.get(f, ())) for dim in arr)


def _candidates(ctx, op, rule, ins, target):
    mesh = ctx.mesh
    shapes = [o.shape for o in op.operands] + [r.shape for r in op.results]
    allowed = {f for f in rule.sizes if rule.kind(f) in ("pass", "reduction")}
    sources = [(rule.results[0], target)] + [(rule.operands[i], ins[i][1]) for i in range(len(ins))]
    cands = []
    for p in range(len(sources)):
        order = [sources[p]] + sources[:p] + sources[p + 1:]
        assign, used = {}, set()
        for arr, sh in order:
            for d, fs in enumerate(arr):
                da = _dim_assign(mesh, fs, sh.dim_axes(d), rule.sizes)
                for f, ax in (da or {}).items():
                    if f in assign or f not in allowed or used & set(ax):
                        continue
                    assign[f] = ax
                    used |= set(ax)
        assign = _repair(mesh, rule, assign, shapes)
        cands.append(assign)
        # GSPMD's other option for a sharded contraction: gather it instead
        cands.append({f: ax for f, ax in assign.items() if f not in rule.reduction})
    cands.append({})
    out = []
    for c in cands:
        if c not in out:
            out.append(c)
    return out


# _choose's answers per op_key and the shardings it reads (bounded: cleared when full): a
# program's layers repeat the same ops, and spmd.AUTO partitions one program several times
_CHOSEN = {}
_CHOSEN_MAX = 100_000


def _choose(ctx, op, rule, ins, target, key=None):
    """The assignment {factor: axes} of the fewest reshard bytes among _candidates'."""
    if key is None:
        return _cheapest(ctx, op, rule, ins, target)
    key = (key, tuple(have for _, have in ins), target)
    got = _CHOSEN.get(key)
    if got is None:
        if len(_CHOSEN) > _CHOSEN_MAX:
            _CHOSEN.clear()
        got = _CHOSEN[key] = _cheapest(ctx, op, rule, ins, target)
    return dict(got)


def _cheapest(ctx, op, rule, ins, target):
    res = op.result
    best, best_cost = None, None
    for assign in _candidates(ctx, op, rule, ins, target):
        cost = 0.0
        for i, (_, have) in enumerate(ins):
            v = op.operands[i]
            cost += reshard_cost(have.replace(partial=()), ctx.sh(_spec_of(rule.operands[i], assign)), v.shape, v.dtype)
        red = _reduction_axes(ctx, rule, assign)
        cost += reshard_cost(ctx.sh(_spec_of(rule.results[0], assign), red), target, res.shape, res.dtype)
        if best_cost is None or cost < best_cost - 1e-9:
            best, best_cost = assign, cost
    return best


def _reduction_axes(ctx, rule, assign):
    axes = {a for f in rule.reduction for a in assign.get(f, ())}
    return tuple(a for a in ctx.mesh.axis_names if a in axes)


def _generic(ctx: Partitioner, op):
    res = op.result
    key = op_key(op)
    rule = _rule(op, key)
    ins = [ctx.env[o] for o in op.operands]
    target = ctx.sharding_of(res)
    if target.is_replicated and all(sh.is_replicated for _, sh in ins):
        # every candidate is taken from these shardings: none splits anything (a per-point
        # loop's scalar arithmetic, thousands of ops, skips the search)
        assign = {}
    else:
        assign = _choose(ctx, op, rule, ins, target, key)
    used = {a for ax in assign.values() for a in ax}
    red = _reduction_axes(ctx, rule, assign)
    res_spec = _spec_of(rule.results[0], assign)
    kind = reduction_kind(op)
    carry_set, carried = ctx.carried_partial(op, ins, used, res_spec, red, target)
    locals_, shardings = [], []
    for i, v in enumerate(op.operands):
        partial = carried if i in carry_set else ()
        if i == op.opdef.accumulates_into and red:
            # the operand is added to once, by the devices at group index 0 of the index axes
            partial = tuple(a for a in ctx.mesh.axis_names if a in set(partial) | set(red))
        want = ctx.sh(_spec_of(rule.operands[i], assign), partial)
        if op.opdef.needs_whole:
            _warn_gathered(ctx, op, i, rule, ins[i][1], want)
        shardings.append(want)
        locals_.append(ctx.get(v, want))
    have = ctx.sh(res_spec, tuple(a for a in ctx.mesh.axis_names if a in set(carried) | set(red)))
    local = LOCAL.get(op.name, _emit_default)(ctx, op, rule, assign, locals_, shardings, have)
    return ctx.finish(local, have, target, res.shape, res.dtype, kind)


def _warn_gathered(ctx, op, i, rule, have, want):
    """An op that needs some dims whole (OpDef.needs_whole) gets one that arrived split,
    here or upstream (propagation keeps a split out of what the op reads, so a transpose
    or reshape before it gathers): the gather is the plan, but never a silent one."""
    v = op.operands[i]
    whole = [d for d, fs in enumerate(rule.operands[i]) if fs and all(rule.kind(f) == "replicate" for f in fs)]
    why = f"{op.opdef.needs_whole}; split another dim (a batch dim) to keep it local"
    dims = [d for d in whole if set(have.dim_axes(d)) - set(want.dim_axes(d))]
    if dims:
        warn_gather(ctx.what(), v, have, why, op.loc, dims)
        return
    up = whole_dims_gathered(op, i, [d for d in whole if not want.dim_axes(d)],
                             ctx.src.annotations)
    if up is not None:
        u, dims = up
        have = u.sharding.for_rank(u.ndim)
        # the op's operand is what arrives whole: its bytes, split over the devices u's dims were
        warn_gather(ctx.what(), u, have, why, op.loc, dims, nbytes=received_bytes(v.shape, v.dtype, have, dims))


def _emit_default(ctx, op, rule, assign, locals_, shardings, have):
    """The op itself on local shapes; an attr that names the result's shape gets the local one."""
    attrs = dict(op.attrs)
    if "shape" in attrs:
        attrs["shape"] = have.local_shape(op.result.shape)
    if rule.reduction:
        locals_ = ctx.mask_reduction_dims(op, rule, assign, locals_, shardings, reduction_kind(op))
    return ctx.em.emit(op.name, *locals_, **attrs)


def _dce(g: Graph) -> Graph:
    """Drop ops nothing needs (a reshard planned for a cost estimate, an unused
    axis_index), but not those run for their effect (a debug print). Every rank drops
    the same ops, so collectives stay matched."""
    live = set(g.outputs)
    keep = []
    for op in reversed(g.ops):
        if op.opdef.effect or any(r in live for r in op.results):
            keep.append(op)
            live.update(op.operands)
    g.ops = keep[::-1]
    return g


__all__ = ["partition", "Partitioner"]
