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
op is not linear (exp, compare...); one all_reduce serves every use of a value. Uneven dims are padded per shard; padding is unspecified, so reductions and
contractions mask it with their identity first (iota + axis_index + select).

Special handlers: constant and iota (local pieces via axis_index), slice / pad /
concatenate on a sharded dim (halo exchange, halo.py), dynamic_slice / gather on a
sharded dim (masked local lookup -> partial result, no gather of the operand),
dynamic_update_slice / scatter on a sharded dim (masked local update, no
communication), and sharding_constraint (a reshard).

The program is the same on every device: rank-dependent behaviour comes only from
axis_index, and nothing here loops over devices.
"""
from __future__ import annotations

import dataclasses
import warnings

import numpy as np

from ..errors import ShardingError, where
from ..ir import Graph
from ..ir.ops.reduce import identity as reduce_identity
from . import halo
from .reshard import Emitter, ReshardWarning, plan_cost, reshard
from .spec import Sharding

def partition(graph: Graph) -> Graph:
    """Global graph with a sharding on every Value -> per-device graph. Inputs are the
    local padded shapes of graph.inputs (same order); outputs the local padded shapes
    of graph.outputs' shardings with no partial left."""
    if graph.mesh is None:
        raise ShardingError("partition: the graph has no mesh (propagate first)")
    return _Partitioner(graph).run()


def _chunk(n, k):
    return -(-n // k) if k > 0 else n


# -- which operands an op is linear in ------------------------------------------------------
def _linear_sets(op):
    """Alternative sets of operand indices the op is jointly linear in: if the operands
    of one set carry a pending sum over axes P, so does the result."""
    n, a = op.name, op.attrs
    if n in ("add", "subtract", "concatenate", "dynamic_update_slice", "pad"):
        return [tuple(range(len(op.operands))) if n == "concatenate" else (0, 1)]
    if n in ("negate", "transpose", "reshape", "broadcast_in_dim", "slice", "dynamic_slice", "gather",
             "sharding_constraint"):
        return [(0,)]
    if n == "reduce":
        return [(0,)] if a["kind"] == "sum" else []
    if n == "convert":
        return [(0,)] if op.operands[0].dtype.startswith("float") and op.result.dtype.startswith("float") else []
    if n == "select":
        return [(1, 2)]
    if n in ("multiply", "dot_general"):
        return [(0,), (1,)]
    if n == "divide":      # integer division truncates: not linear
        return [(0,)] if op.result.dtype.startswith("float") else []
    if n == "scatter":
        return [(0, 2)]
    return []


# -- factor rules, relaxed where a local masked implementation exists ----------------------
def _rule(op):
    opdef = op.opdef
    if opdef.factors is None:
        raise ShardingError(f"{op.name}{where(op.loc)}: the op has no sharding factor rule")
    rule = opdef.factors([o.aval for o in op.operands], [r.aval for r in op.results], op.attrs)
    if op.name in ("gather", "dynamic_slice"):
        # a sharded looked-up dim: each device looks up what it holds, zeros elsewhere -> a partial sum
        rule = dataclasses.replace(rule, reduction=rule.reduction | rule.replicate, replicate=frozenset())
    elif op.name in ("dynamic_update_slice", "scatter"):
        # a sharded updated dim: each device updates what it holds -> no communication
        rule = dataclasses.replace(rule, replicate=frozenset())
    return rule


class _Partitioner:
    def __init__(self, src: Graph):
        self.src = src
        self.mesh = src.mesh
        self.g = Graph(src.name)
        self.g.mesh = self.mesh
        self.em = Emitter(self.g, self.mesh)
        self.env = {}        # global Value -> (local Value, Sharding it is laid out by)
        self.memo = {}       # (local Value, from, to, global shape) -> resharded local Value
        self.op = None

    # -- driver ------------------------------------------------------------------------------
    def run(self):
        for v in self.src.inputs:
            sh = self.sharding_of(v)
            self.env[v] = (self.g.add_input(sh.local_shape(v.shape), v.dtype), sh)
        for op in self.src.ops:
            self.op = op
            self.em.loc = op.loc
            if len(op.results) != 1:
                raise ShardingError(f"{op.name}{where(op.loc)}: ops with {len(op.results)} results cannot be "
                                    f"partitioned yet")
            if op.opdef.family == "collective":
                raise ShardingError(f"{op.name}{where(op.loc)}: the global program already holds a collective; "
                                    f"collectives are inserted by the partitioner")
            handler = SPECIAL.get(op.name, _generic)
            out, sh = handler(self, op)
            self.env[op.result] = (out, sh)
        self.op = None
        outs = []
        for v in self.src.outputs:
            # what the user sees is never partial; the collective is charged to v's line
            self.em.loc = v.producer.loc if v.producer is not None else None
            outs.append(self.get(v, self.sharding_of(v).replace(partial=())))
        self.em.loc = None
        self.g.outputs = outs
        return _dce(self.g)

    def sharding_of(self, v) -> Sharding:
        s = v.sharding
        if s is None:
            return Sharding(self.mesh, (None,) * v.ndim)
        if s.mesh != self.mesh:
            raise ShardingError(f"value {v} has a sharding on mesh {s.mesh}, the graph is on {self.mesh}")
        return s.for_rank(v.ndim)

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

    def sh(self, spec, partial=()):
        return Sharding(self.mesh, tuple(a if a else None for a in spec), partial)

    def axes_size(self, axes):
        return self.mesh.axes_size(axes) if axes else 1

    def finish(self, local, have: Sharding, target: Sharding, shape, dtype, kind="sum"):
        """An op's local result laid out by `have` -> the propagated `target`. Partial
        axes that are not a pending *sum* (max/min/prod, bool) are reduced now. A pending
        sum the target does not have is kept when the split is the target's: the uses
        settle it where they need to, so a sum of partial terms (d x = d q + d k + d v)
        costs one all_reduce, not one per term."""
        if have.partial and (kind != "sum" or dtype == "bool"):
            red = "max" if dtype == "bool" and kind == "sum" else kind
            local = self.em.emit("all_reduce", local, axes=have.partial, reduction=red,
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
        sets = _linear_sets(op)
        carrying = [i for i, (_, h) in enumerate(ins) if h.partial]
        if not carrying or not sets or res.dtype == "bool":
            return (), ()
        best = max(sets, key=lambda s: sum(1 for i in carrying if i in s))
        axes = {a for i in best for a in ins[i][1].partial} - set(used)
        if not axes:
            return (), ()
        P = tuple(a for a in self.mesh.axis_names if a in axes)
        full = tuple(a for a in self.mesh.axis_names if a in set(P) | set(result_partial))
        carry = plan_cost(self.sh(result_spec, full), target, res.shape, res.dtype)
        early = plan_cost(self.sh(result_spec, result_partial), target, res.shape, res.dtype)
        for i in best:
            v = op.operands[i]
            h = ins[i][1]
            if h.partial:
                early += plan_cost(h, h.replace(partial=()), v.shape, v.dtype)
        # on a tie reduce first: the reduced operand may be shared with other uses
        return (best, P) if carry < early else ((), ())


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
            whole = int(np.prod([rule.sizes[f] for f in fs], dtype=np.int64)) == n
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


def _candidates(P, op, rule, ins, target):
    mesh = P.mesh
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


def _choose(P, op, rule, ins, target):
    res = op.result
    best, best_cost = None, None
    for assign in _candidates(P, op, rule, ins, target):
        cost = 0.0
        for i, (_, have) in enumerate(ins):
            v = op.operands[i]
            cost += plan_cost(have.replace(partial=()), P.sh(_spec_of(rule.operands[i], assign)), v.shape, v.dtype)
        red = _reduction_axes(P, rule, assign)
        cost += plan_cost(P.sh(_spec_of(rule.results[0], assign), red), target, res.shape, res.dtype)
        if best_cost is None or cost < best_cost - 1e-9:
            best, best_cost = assign, cost
    return best


def _reduction_axes(P, rule, assign):
    axes = {a for f in rule.reduction for a in assign.get(f, ())}
    return tuple(a for a in P.mesh.axis_names if a in axes)


def _generic(P, op):
    res = op.result
    rule = _rule(op)
    ins = [P.env[o] for o in op.operands]
    target = P.sharding_of(res)
    assign = _choose(P, op, rule, ins, target)
    used = {a for ax in assign.values() for a in ax}
    red = _reduction_axes(P, rule, assign)
    res_spec = _spec_of(rule.results[0], assign)
    kind = op.attrs.get("kind", "sum") if op.name == "reduce" else "sum"
    carry_set, carried = P.carried_partial(op, ins, used, res_spec, red, target)
    locals_, shardings = [], []
    for i, v in enumerate(op.operands):
        partial = carried if i in carry_set else ()
        if op.name == "scatter" and i == 0 and red:
            # the operand is added to once, by the devices at group index 0 of the index axes
            partial = tuple(a for a in P.mesh.axis_names if a in set(partial) | set(red))
        want = P.sh(_spec_of(rule.operands[i], assign), partial)
        shardings.append(want)
        locals_.append(P.get(v, want))
    have = P.sh(res_spec, tuple(a for a in P.mesh.axis_names if a in set(carried) | set(red)))
    local = LOCAL_EMIT.get(op.name, _emit_default)(P, op, rule, assign, locals_, shardings, have)
    return P.finish(local, have, target, res.shape, res.dtype, kind)


def _mask_reduction_dims(P, op, rule, assign, locals_, shardings, fill_of):
    """Padding in a dim that is reduced over must hold the reduction's identity."""
    out = []
    for i, (x, sh, arr) in enumerate(zip(locals_, shardings, rule.operands)):
        v = op.operands[i]
        for d, fs in enumerate(arr):
            if any(f in rule.reduction and assign.get(f) for f in fs):
                x = P.em.mask_dim(x, d, sh.dim_axes(d), v.shape[d], fill_of(v.dtype))
        out.append(x)
    return out


def _zero(dtype):
    return False if dtype == "bool" else 0


def _emit_default(P, op, rule, assign, locals_, shardings, have):
    res = op.result
    attrs = dict(op.attrs)
    local_shape = have.local_shape(res.shape)
    if op.name in ("broadcast_in_dim", "reshape"):
        attrs["shape"] = local_shape
    if op.name == "reduce":
        kind = attrs["kind"]
        locals_ = _mask_reduction_dims(P, op, rule, assign, locals_, shardings,
                                       lambda dt: reduce_identity(kind, dt))
    elif rule.reduction:
        locals_ = _mask_reduction_dims(P, op, rule, assign, locals_, shardings, _zero)
    return P.em.emit(op.name, *locals_, **attrs)


def _emit_iota(P, op, rule, assign, locals_, shardings, have):
    a = op.attrs
    d = a["dimension"]
    shape = have.local_shape(op.result.shape)
    axes = have.dim_axes(d)
    if not axes:
        return P.em.emit("iota", shape=shape, dtype=a["dtype"], dimension=d)
    pos = P.em.positions(shape, d, axes, _chunk(op.result.shape[d], P.axes_size(axes)))
    return pos if a["dtype"] == "int64" else P.em.emit("convert", pos, dtype=a["dtype"])


def _clamped_start(P, s, n, w):
    """A start index scalar as int64, clamped so the window [s, s+w) fits in n."""
    em = P.em
    if s.dtype != "int64":
        s = em.emit("convert", s, dtype="int64")
    s = em.emit("minimum", s, em.const(n - w, "int64"))
    return em.emit("maximum", s, em.const(0, "int64"))


def _clip(P, x, lo, hi):
    em = P.em
    x = em.emit("maximum", x, em.full(lo, x.shape, x.dtype))
    return em.emit("minimum", x, em.full(hi, x.shape, x.dtype))


def _in_range(P, x, lo, hi):
    return P.em.and_(P.em.compare(x, lo, "GE"), P.em.compare(x, hi, "LT"))


def _emit_dynamic_slice(P, op, rule, assign, locals_, shardings, have):
    """Sharded looked-up dims: take what this device holds of the window, zeros for the
    rest; the sum over the dim's axes is the window (the result is partial)."""
    em = P.em
    x, *starts = locals_
    xv = op.operands[0]
    sizes = list(op.attrs["slice_sizes"])
    sx = shardings[0]
    local_starts = list(starts)
    for d, w in enumerate(sizes):
        axes = sx.dim_axes(d)
        n = xv.shape[d]
        if w == n or not axes:
            if w == n:
                sizes[d] = x.shape[d]
            continue
        c = x.shape[d]
        s = _clamped_start(P, starts[d], n, w)
        rel = em.emit("iota", shape=(w,), dtype="int64", dimension=0)
        rel = em.emit("add", rel, em.bcast(em.emit("subtract", s, em.affine(axes, c, 0)), (w,)))
        ok = _in_range(P, rel, 0, c)
        x = em.emit("gather", x, _clip(P, rel, 0, max(c - 1, 0)), axis=d) if c else \
            em.full(_zero(x.dtype), tuple(w if k == d else s_ for k, s_ in enumerate(x.shape)), x.dtype)
        x = em.select(em.bcast(ok, x.shape, (d,)), x, _zero(x.dtype))
        local_starts[d] = em.const(0, "int64")
    if tuple(sizes) == tuple(x.shape):
        return x
    return em.emit("dynamic_slice", x, *local_starts, slice_sizes=tuple(sizes))


def _emit_dynamic_update_slice(P, op, rule, assign, locals_, shardings, have):
    """Sharded updated dims: each device writes the part of the window it holds."""
    em = P.em
    x, u, *starts = locals_
    xv, uv = op.operands[0], op.operands[1]
    sx = shardings[0]
    local_starts = list(starts)
    mask = None
    for d in range(xv.ndim):
        axes = sx.dim_axes(d)
        n, w = xv.shape[d], uv.shape[d]
        if w == n or not axes:
            continue
        if w == 0:
            return x
        c = x.shape[d]
        s = _clamped_start(P, starts[d], n, w)
        rel = em.positions((c,), 0, axes, c)          # global index of each local row
        rel = em.emit("subtract", rel, em.bcast(s, (c,)))
        ok = _in_range(P, rel, 0, w)
        u = em.emit("gather", u, _clip(P, rel, 0, w - 1), axis=d)
        mask = em.and_(mask, em.bcast(ok, x.shape, (d,)))
        local_starts[d] = em.const(0, "int64")
    y = em.emit("dynamic_update_slice", x, u, *local_starts)
    return y if mask is None else em.emit("select", mask, y, x)


def _take_rel(P, idx, n, axes, c):
    """Indices into a dim of size n split over axes: (local index clipped, in-this-shard mask)."""
    em = P.em
    gi = idx if idx.dtype == "int64" else em.emit("convert", idx, dtype="int64")
    gi = _clip(P, gi, 0, max(n - 1, 0))
    rel = em.emit("subtract", gi, em.bcast(em.affine(axes, c, 0), gi.shape))
    return _clip(P, rel, 0, max(c - 1, 0)), _in_range(P, rel, 0, c)


def _emit_gather(P, op, rule, assign, locals_, shardings, have):
    em = P.em
    x, idx = locals_
    ax = op.attrs["axis"]
    axes = shardings[0].dim_axes(ax)
    if not axes:
        return em.emit("gather", x, idx, axis=ax)
    rel, ok = _take_rel(P, idx, op.operands[0].shape[ax], axes, x.shape[ax])
    y = em.emit("gather", x, rel, axis=ax)
    ok = em.bcast(ok, y.shape, tuple(range(ax, ax + idx.ndim)))
    return em.select(ok, y, _zero(y.dtype))


def _emit_scatter(P, op, rule, assign, locals_, shardings, have):
    em = P.em
    locals_ = _mask_reduction_dims(P, op, rule, assign, locals_, shardings, _zero)
    x, idx, upd = locals_
    ax = op.attrs["axis"]
    axes = shardings[0].dim_axes(ax)
    if axes:
        idx, ok = _take_rel(P, idx, op.operands[0].shape[ax], axes, x.shape[ax])
        upd = em.select(em.bcast(ok, upd.shape, tuple(range(ax, ax + idx.ndim))), upd, _zero(upd.dtype))
    return em.emit("scatter", x, idx, upd, axis=ax)


LOCAL_EMIT = {
    "iota": _emit_iota,
    "dynamic_slice": _emit_dynamic_slice,
    "dynamic_update_slice": _emit_dynamic_update_slice,
    "gather": _emit_gather,
    "scatter": _emit_scatter,
}


# -- special handlers ---------------------------------------------------------------------
def _constant(P, op):
    """The whole constant on every device, then a local slice to the result's sharding."""
    res = op.result
    local = P.em.emit("constant", value=op.attrs["value"])
    rep = P.sh((None,) * res.ndim)
    return P.reshard(local, rep, P.sharding_of(res), res.shape), P.sharding_of(res)


def _sharding_constraint(P, op):
    target = P.sharding_of(op.result)
    return P.get(op.operands[0], target), target


def _carry_all(P, op, spec):
    """Slice/pad/concatenate are linear and never grow much: operands keep their
    pending sums (over axes the result does not split)."""
    axes = {a for o in op.operands for a in P.env[o][1].partial} - {a for ax in spec for a in ax}
    if op.result.dtype == "bool":
        return ()
    return tuple(a for a in P.mesh.axis_names if a in axes)


def _gather_fallback(P, x, cur_shape, spec, partial, d):
    """Gather dim d of x (split by `spec`): the route when a halo would take too many hops."""
    warnings.warn(f"spmd: {P.what()} moves data across many shards of dim {d} of {x.dtype}"
                  f"{list(cur_shape)}; gathering that dim instead of a halo exchange",
                  ReshardWarning, stacklevel=4)
    whole = list(spec)
    whole[d] = ()
    return P.reshard(x, P.sh(spec, partial), P.sh(whole, partial), cur_shape), whole


def _slice(P, op):
    res, xv = op.result, op.operands[0]
    target = P.sharding_of(res)
    spec = [target.dim_axes(d) for d in range(res.ndim)]
    partial = _carry_all(P, op, spec)
    x = P.get(xv, P.sh(spec, partial))
    start, limit, stride = op.attrs["start"], op.attrs["limit"], op.attrs["stride"]
    em = P.em
    # dims that are whole on every device: one local slice
    st = [0 if spec[d] else start[d] for d in range(xv.ndim)]
    lim = [x.shape[d] if spec[d] else limit[d] for d in range(xv.ndim)]
    sd = [1 if spec[d] else stride[d] for d in range(xv.ndim)]
    if (st, lim, sd) != ([0] * xv.ndim, list(x.shape), [1] * xv.ndim):
        x = em.emit("slice", x, start=tuple(st), limit=tuple(lim), stride=tuple(sd))
    cur = [res.shape[d] if not spec[d] else xv.shape[d] for d in range(xv.ndim)]
    for d in range(xv.ndim):
        n, m = xv.shape[d], res.shape[d]
        if not spec[d] or (start[d] == 0 and stride[d] == 1 and m == n):
            continue
        k = P.axes_size(spec[d])
        c_out = _chunk(m, k)
        plan = halo.window_plan(k, x.shape[d], n, c_out, m, stride[d], start[d])
        if plan is None:
            x, whole = _gather_fallback(P, x, tuple(cur), spec, partial, d)
            x = em.slice_dim(x, d, start[d], limit[d], stride[d])
            cur[d] = m
            x = P.reshard(x, P.sh(whole, partial), P.sh(spec, partial), tuple(cur))
        else:
            x = halo.window_emit(em, x, d, spec[d], k, plan, c_out, m, stride[d], start[d], n)
            cur[d] = m
    return P.finish(x, P.sh(spec, partial), target, res.shape, res.dtype)


def _pad(P, op):
    res, xv, vv = op.result, op.operands[0], op.operands[1]
    target = P.sharding_of(res)
    spec = [target.dim_axes(d) for d in range(res.ndim)]
    partial = _carry_all(P, op, spec)
    x = P.get(xv, P.sh(spec, partial))
    v = P.get(vv, P.sh((), partial))
    low, high, interior = op.attrs["low"], op.attrs["high"], op.attrs["interior"]
    em = P.em
    # whole dims pad locally; split dims get their interior padding locally (each shard
    # also pads after its last element, so shards stay equal) and their edges by a window
    lo = [0 if spec[d] else low[d] for d in range(xv.ndim)]
    hi = [interior[d] if spec[d] else high[d] for d in range(xv.ndim)]
    if any(lo) or any(hi) or any(interior):
        x = em.emit("pad", x, v, low=tuple(lo), high=tuple(hi), interior=tuple(interior))
    # global sizes as laid out now: split dims not yet done hold k equal chunks
    cur = [res.shape[d] if not spec[d] else x.shape[d] * P.axes_size(spec[d]) for d in range(xv.ndim)]
    for d in range(xv.ndim):
        m = res.shape[d]
        if not spec[d] or (low[d] == 0 and high[d] == 0 and interior[d] == 0):
            cur[d] = m
            continue
        k = P.axes_size(spec[d])
        n = xv.shape[d]
        n_src = n + max(n - 1, 0) * interior[d]     # the interior-padded source size
        c_out = _chunk(m, k)
        plan = halo.window_plan(k, x.shape[d], n_src, c_out, m, 1, -low[d])
        if plan is None:
            # shards are equal after the local interior padding: gather them whole
            gshape = tuple(cur[:d]) + (x.shape[d] * k,) + tuple(cur[d + 1:])
            xs, whole = _gather_fallback(P, x, gshape, spec, partial, d)
            xs = em.slice_dim(xs, d, 0, n_src)
            xs = em.pad_dim(xs, d, low[d], high[d], v)
            cur[d] = m
            x = P.reshard(xs, P.sh(whole, partial), P.sh(spec, partial), tuple(cur))
        else:
            x = halo.window_emit(em, x, d, spec[d], k, plan, c_out, m, 1, -low[d], n_src, fill=v)
            cur[d] = m
    return P.finish(x, P.sh(spec, partial), target, res.shape, res.dtype)


def _concatenate(P, op):
    res = op.result
    target = P.sharding_of(res)
    spec = [target.dim_axes(d) for d in range(res.ndim)]
    partial = _carry_all(P, op, spec)
    d = op.attrs["dimension"]
    xs = [P.get(o, P.sh(spec, partial)) for o in op.operands]
    em = P.em
    if not spec[d]:
        out = xs[0] if len(xs) == 1 else em.emit("concatenate", *xs, dimension=d)
        return P.finish(out, P.sh(spec, partial), target, res.shape, res.dtype)
    k = P.axes_size(spec[d])
    m = res.shape[d]
    c_out = _chunk(m, k)
    plans, off = [], 0
    for o, x in zip(op.operands, xs):
        n = o.shape[d]
        plans.append(None if n == 0 else halo.window_plan(k, x.shape[d], n, c_out, m, 1, -off))
        off += n
    if any(p is None for p, o in zip(plans, op.operands) if o.shape[d]):
        whole = list(spec)
        whole[d] = ()
        gathered = [_gather_fallback(P, x, o.shape, spec, partial, d)[0] if o.shape[d] else x
                    for o, x in zip(op.operands, xs)]
        out = em.emit("concatenate", *gathered, dimension=d)
        out = P.reshard(out, P.sh(whole, partial), P.sh(spec, partial), res.shape)
        return P.finish(out, P.sh(spec, partial), target, res.shape, res.dtype)
    out, pos, off = None, None, 0
    for o, x, plan in zip(op.operands, xs, plans):
        n = o.shape[d]
        if n:
            y = halo.window_emit(em, x, d, spec[d], k, plan, c_out, m, 1, -off, n)
            if out is None:
                out = y
            else:
                if pos is None:
                    pos = em.positions(y.shape, d, spec[d], c_out)
                out = em.emit("select", em.compare(pos, off, "GE"), y, out)
        off += n
    if out is None:
        out = em.full(_zero(res.dtype), P.sh(spec).local_shape(res.shape), res.dtype)
    return P.finish(out, P.sh(spec, partial), target, res.shape, res.dtype)


SPECIAL = {
    "constant": _constant,
    "sharding_constraint": _sharding_constraint,
    "slice": _slice,
    "pad": _pad,
    "concatenate": _concatenate,
}


def _dce(g: Graph) -> Graph:
    """Drop ops nothing needs (a reshard planned for a cost estimate, an unused
    axis_index). Every rank drops the same ops, so collectives stay matched."""
    live = set(g.outputs)
    keep = []
    for op in reversed(g.ops):
        if any(r in live for r in op.results):
            keep.append(op)
            live.update(op.operands)
    g.ops = keep[::-1]
    return g


__all__ = ["partition"]
