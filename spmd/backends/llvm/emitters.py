"""How each kind of op computes one element inside a fused kernel: the `emit` entries of
the lowering table (lowering_table.py).

An emitter is `(cg, op, v, amap) -> (SV, scope)`: the value of op's result v at the index
map `amap` (an affine function of the open loop variables, one (terms, const) per dim of
v), and the loop scope it is computed in. `cg` is the kernel's code generator
(codegen.py): emitters read operands through `cg.emit` at the index map they need them
at, and open loops of their own through it.

A `position` entry is `(cg, op, v, amap) -> position`: v at amap as an integer affine in
the loop indices, or a range test of one (index_sets.py), for the code generator to
decide masks and guards over a region of the index space.
"""
from __future__ import annotations

from ...ir.ops.reduce import identity
from .fuse import splat
from .index_sets import INTS, UNKNOWN, Pos
from .scalar import LL, SV, Unsupported, compute_dtype, is_float, literal

# reduce kind -> the scalar builder method that combines two partial results
REDUCERS = {"sum": "add", "prod": "mul", "max": "max", "min": "min"}


class Split(Exception):
    """The code generator wants `value` materialised by its own kernel (then re-plans)."""

    def __init__(self, value):
        super().__init__(value)
        self.value = value


def contiguous_strides(shape):
    st, acc = [], 1
    for d in reversed(shape):
        st.append(acc)
        acc *= d
    return tuple(reversed(st))


def row_major_offset(amap, shape):
    """The index map of the row-major offset of an index of `shape` (a flat value's index)."""
    coefs, const = {}, 0
    for (terms, c), st in zip(amap, contiguous_strides(shape)):
        const += c * st
        for var, k in terms:
            coefs[var] = coefs.get(var, 0) + k * st
    return ((tuple((var, k) for var, k in coefs.items() if k), const),)


def emit_elementwise(cg, op, v, amap):
    """The op's scalar rule (OpDef.scalar) on its operands at the same index."""
    args = [cg.emit(o, amap) for o in op.operands]
    scope = cg.scope_of(amap)
    # x / s stays a division even when s is hoisted out of the loop: x * (1 / s) is
    # faster but not what numpy computes (1 ulp off, a silent difference)
    x = op.opdef.scalar(cg.builder(scope), *args, **op.attrs)
    return cg.rounded(scope, x, v), scope


def emit_index_map(cg, op, v, amap):
    """The operand at the op's affine index map (OpDef.index_map): no memory traffic."""
    x = op.operands[0]
    return cg.read_at(x, op.opdef.reindex.index_map(amap, x.shape, op.attrs))


def emit_row_major(cg, op, v, amap):
    """The operand's elements in row-major order, in v's shape (reshape)."""
    x = op.operands[0]
    if x.producer is None or x.producer not in cg.member or splat(x) is not None:
        if splat(x) is not None:
            return SV(literal(splat(x), x.dtype), compute_dtype(x.dtype)), cg.body
        # a reshape of a contiguous buffer is the same memory read with other strides
        return cg.load(x, amap, shape=v.shape)
    if x.ndim == 1 and v.ndim != 1:
        # a flat value read as n-d: its index is the row-major offset, an affine map
        return cg.read_at(x, row_major_offset(amap, v.shape))
    rows = [r for r, n in zip(amap, v.shape) if n != 1]
    if [n for n in x.shape if n != 1] != [n for n in v.shape if n != 1]:
        raise Split(x)
    it = iter(rows)
    return cg.read_at(x, tuple(next(it) if n != 1 else ((), 0) for n in x.shape))


def emit_literal(cg, op, v, amap):
    """A constant of one value everywhere; fusion leaves other constants out of kernels."""
    c = splat(v)
    if c is None:
        raise Unsupported("a constant array is read from memory, not computed")
    return SV(literal(c, v.dtype), compute_dtype(v.dtype)), cg.body


def emit_position(cg, op, v, amap):
    """The element's index along the op's dimension (iota)."""
    scope = cg.scope_of(amap)
    terms, c = amap[op.attrs["dimension"]]
    idx = cg.index_expr(scope, terms, c)
    return cg.builder(scope).convert(SV(idx, "int64"), v.dtype), scope


# a float sum or product runs over its innermost reduced axis in LANE_BYTES of partial
# results: element i goes to partial i % lanes, the partials are combined in order at the
# end. The order is the op's own (its shape), not the kernel's: with LLVM free to
# reassociate, the vectoriser chose how many partial sums to keep by what else the loop
# did, so the same sum fused into another kernel (a loss next to a value the backward
# pass keeps; a checkpoint's recomputed forward pass) gave other bits.
LANE_BYTES = 64


def lanes_of(cd, n) -> int:
    """Partial results for a float reduction of n elements of compute dtype cd along its
    innermost reduced axis (1: in order, one by one)."""
    k = LANE_BYTES // (8 if cd == "float64" else 4)
    return k if n % k == 0 and n >= 2 * k else 1


def emit_accumulate(cg, op, v, amap):
    """A reduction: loops of its own over the reduced axes, in the innermost scope its
    index map needs, accumulating into a stack slot (a float sum or product: into
    lanes_of partial results, combined in order at the end; no reassociation, so LLVM
    vectorises across the partials only). Each reduced axis's loop is cut into regions
    like the root's (a sum over a padded stencil), visited in order."""
    x = op.operands[0]
    kind, axes = op.attrs["kind"], op.attrs["axes"]
    scope = cg.scope_of(amap)
    cd = compute_dtype(v.dtype)       # 2-byte floats accumulate in float32
    t = LL[cd]
    threaded = cg.split_next_reduce
    cg.split_next_reduce = False
    split = is_float(cd) and kind in ("sum", "prod")
    last = axes[-1] if axes else None
    n_last = x.shape[last] if axes else 0
    k = lanes_of(cd, n_last) if split and not (threaded and len(axes) == 1) else 1
    if k > 1 and cg.intervals((id(op), last), n_last) != [(0, n_last)]:
        k = 1
    ident = literal(identity(kind, v.dtype), v.dtype)
    if k > 1:
        acc = cg.alloca("%lanes", f"[{k} x {t}]")
        for j in range(k):
            p = cg.fresh()
            scope.insert(f"  {p} = getelementptr inbounds [{k} x {t}], ptr {acc}, i64 0, i64 {j}")
            scope.insert(f"  store {t} {ident}, ptr {p}")
    else:
        acc = cg.alloca("%acc", t)
        scope.insert(f"  store {t} {ident}, ptr {acc}")

    def accumulate(inner, loops, lane=None, row_loop=None):
        rest = iter(amap)
        sub = tuple(loops[d] if d in loops else next(rest) for d in range(x.ndim))
        lines = sum(isinstance(item, str) for item in inner.items)
        val = cg.emit(x, sub)
        if len(axes) == 1 and not threaded:
            cg.keep_row(x, sub, axes[0], row_loop or inner, val,
                        sum(isinstance(item, str) for item in inner.items) - lines, inner)
        b = cg.builder(inner)
        slot = acc
        if lane is not None:
            slot = cg.fresh()
            inner.insert(f"  {slot} = getelementptr inbounds [{k} x {t}], ptr {acc}, i64 0, i64 {lane}")
        cur = cg.fresh()
        inner.insert(f"  {cur} = load {t}, ptr {slot}")
        if split:
            nxt = b.add(SV(cur, cd), val) if kind == "sum" else b.mul(SV(cur, cd), val)
        elif is_float(cd) and kind in ("max", "min"):
            # llvm.maximum / minimum propagate NaN as np.max does and vectorise as a
            # reduction (the select pair of np.maximum does not: a row max ran 18x slower);
            # they order -0.0 below 0.0, where numpy's reductions pick either
            nxt = b.ordered_extreme(kind, SV(cur, cd), val)
        else:
            nxt = getattr(b, REDUCERS[kind])(SV(cur, cd), val)
        inner.insert(f"  store {t} {nxt.name}, ptr {slot}")

    def nest(parent, j, loops):
        if j == len(axes):
            accumulate(parent, loops)
            return
        a = axes[j]
        key = (id(op), a)
        if k > 1 and a == last:
            # chunks of k elements, element c * k + l into partial l
            c = cg.open_loop(parent, n_last // k, 0, n_last // k, key=key)
            lane = cg.open_loop(c, k, key=(id(op), a, "lanes"))
            cg.const_extents.pop()        # (a short loop of its own making: not one to unroll whole)
            accumulate(lane, {**loops, a: (((c.var, k), (lane.var, 1)), 0)}, lane.var, c)
            cg.close_loop(lane)
            cg.close_loop(c)
            return
        for lo, hi in cg.intervals(key, x.shape[a]):
            first = j == 0 and threaded
            s = cg.open_loop(parent, x.shape[a], lo, hi, threaded=first, key=key, full=not first)
            nest(s, j + 1, {**loops, a: (((s.var, 1),), 0)})
            cg.close_loop(s)

    nest(scope, 0, {})
    if k > 1:
        b = cg.builder(scope)
        parts = []
        for j in range(k):
            p, r = cg.fresh(), cg.fresh()
            scope.insert(f"  {p} = getelementptr inbounds [{k} x {t}], ptr {acc}, i64 0, i64 {j}")
            scope.insert(f"  {r} = load {t}, ptr {p}")
            parts.append(SV(r, cd))
        while len(parts) > 1:             # pairwise, in a fixed tree
            parts = [(b.add(u, w) if kind == "sum" else b.mul(u, w)) for u, w in zip(parts[::2], parts[1::2])]
        return cg.rounded(scope, parts[0], v), scope
    r = cg.fresh()
    scope.insert(f"  {r} = load {t}, ptr {acc}")
    return cg.rounded(scope, SV(r, cd), v), scope


def emit_pieces(cg, op, v, amap):
    """A guarded load (OpDef.index_pieces: pad, concatenate, dynamic_slice): the operand
    whose piece holds at this index, at its index map, or the fill. Where the region
    decides the guards this is one plain load; elsewhere each live piece is read at its
    index clamped into the operand (a valid element) and the guards pick one."""
    shapes = [o.shape for o in op.operands]
    pieces, fill = op.opdef.reindex.index_pieces(amap, shapes, op.attrs, cg.offset(op))
    live = []
    for k, guard, index in pieces:
        t = cg.decide(cg.guard(guard))
        if t is False:
            continue
        live.append((k, guard, index, t))
        if t:
            break                     # the pieces are disjoint: no later one holds
    if len(live) == 1 and live[0][3]:
        k, _, index, _ = live[0]
        return cg.read_at(op.operands[k], index)
    scope = cg.scope_of(amap)
    if fill is not None:
        acc, _ = cg.read_at(op.operands[fill], tuple(((), 0) for _ in op.operands[fill].shape))
    else:
        # the pieces cover every index: the last live one needs no test (where none is
        # live, the index is one a select discards: any element will do)
        k, _, index, _ = live.pop() if live else (pieces[-1][0], None, pieces[-1][2], None)
        acc, _ = cg.read_at(op.operands[k], cg.clamped(index, shapes[k]))
    for k, guard, index, t in reversed(live):
        val, _ = cg.read_at(op.operands[k], cg.clamped(index, shapes[k]))
        ok = None if t else cg.guard_value(scope, guard)
        acc = val if ok is None else cg.builder(scope).select(ok, val, acc)
    return acc, scope


# -- positions (index_sets.py) ------------------------------------------------------------------
def position_elementwise(cg, op, v, amap):
    """The op's rule on positions (OpDef.position): + - * of indices, their comparisons."""
    rule = op.opdef.position
    if rule is None:
        return UNKNOWN
    return rule(*[cg.position(o, amap) for o in op.operands], **op.attrs)


def position_index_map(cg, op, v, amap):
    x = op.operands[0]
    return cg.position(x, op.opdef.reindex.index_map(amap, x.shape, op.attrs))


def position_row_major(cg, op, v, amap):
    x = op.operands[0]
    return cg.position(x, tuple(((), 0) for _ in x.shape)) if x.size == 1 else UNKNOWN


def position_of_index(cg, op, v, amap):
    """iota: the element's index along the op's dimension."""
    return Pos.of(amap[op.attrs["dimension"]]) if v.dtype in INTS else UNKNOWN
