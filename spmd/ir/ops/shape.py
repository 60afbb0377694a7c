"""Ops that make or move data without arithmetic: constant, iota, broadcast_in_dim,
reshape, transpose, slice, pad, concatenate."""
import numpy as np

from .. import dtypes
from ..factors import einsum_rule, letters, reshape_rule
from .elementwise import ALL, aval, const_like, elementwise_factors
from .names import (
    AND, BROADCAST_IN_DIM, COMPARE, CONSTANT, DOT_GENERAL, IOTA, PAD, REDUCE, RESHAPE, REVERSE,
    ROLL, SELECT, SLICE, SUBTRACT, TRANSPOSE
)
from .registry import OpDef, Reindex, check, producer_is, register, splat, zero_of


def _no_operands_factors(ins, outs, attrs):
    return einsum_rule("->" + letters(len(outs[0].shape)), ins, outs)


def _zero_flops(ins, out, attrs):
    return 0


def _leaf(name, infer, ref, allowed=ALL, **rules):
    register(OpDef(name, family="shape", infer=infer, ref=ref, vjp=lambda g, op, ct: (), factors=_no_operands_factors,
                   flops=_zero_flops, dtypes=allowed, priority=3, fusion="reindex", **rules))


# -- index maps for fused kernels (see OpDef.index_map) ----------------------------------------
def _bcast_index_map(out, shape, attrs):
    # a size-1 operand dim is read at 0 whatever the result index
    return tuple(out[d] if shape[i] != 1 else ((), 0) for i, d in enumerate(attrs["broadcast_dimensions"]))


def _transpose_index_map(out, shape, attrs):
    sub = [None] * len(out)
    for j, p in enumerate(attrs["permutation"]):
        sub[p] = out[j]
    return tuple(sub)


def _slice_index_map(out, shape, attrs):
    return tuple((tuple((var, k * st) for var, k in terms), c * st + s0)
                 for (terms, c), s0, st in zip(out, attrs["start"], attrs["stride"]))


# -- simplification rules (see OpDef.simplify) -----------------------------------------------
def _same(x, r):
    return x.shape == r.shape and x.dtype == r.dtype


def _reshape_simplify(rb, op, ops, uses):
    """A reshape to the same shape goes; a reshape of a reshape is one reshape."""
    x, r = ops[0], op.result
    if _same(x, r):
        return x
    if producer_is(x, RESHAPE):
        inner = x.producer.operands[0]
        if inner.shape == r.shape:
            return inner
        return rb.emit(RESHAPE, inner, loc=op.loc, sharding=r.sharding, shape=r.shape)
    return None


def _transpose_simplify(rb, op, ops, uses):
    """Identity transposes go, a transpose of a transpose is one, and transpose(dot(a, b))
    that swaps the two free blocks is dot(b, a): BLAS reads the operands transposed."""
    from .dot import dims as dot_dims
    x, r = ops[0], op.result
    perm = tuple(op.attrs["permutation"])
    if perm == tuple(range(len(perm))):
        return x
    if producer_is(x, TRANSPOSE):
        inner = x.producer.attrs["permutation"]
        composed = tuple(inner[p] for p in perm)
        if composed == tuple(range(len(perm))):
            return x.producer.operands[0]
        return rb.emit(TRANSPOSE, x.producer.operands[0], loc=op.loc, sharding=r.sharding,
                       permutation=composed)
    if producer_is(x, DOT_GENERAL) and uses[op.operands[0]] == 1:
        d = x.producer
        lb, rb_, lc, rc = (d.attrs[k] for k in ("lhs_batch", "rhs_batch", "lhs_contract", "rhs_contract"))
        if lb:
            return None
        a, b = d.operands
        lf, rf = dot_dims(a.ndim, b.ndim, lb, rb_, lc, rc)
        nl, nr = len(lf), len(rf)
        if perm != tuple(range(nl, nl + nr)) + tuple(range(nl)):
            return None
        return rb.emit(DOT_GENERAL, b, a, loc=d.loc, sharding=r.sharding,
                       lhs_batch=(), rhs_batch=(), lhs_contract=tuple(rc), rhs_contract=tuple(lc))
    return None


def _bcast_simplify(rb, op, ops, uses):
    """An identity broadcast goes; one that only adds dims of size 1, keeping the order of
    x's dims, is a reshape (which a backend may read as a view of x)."""
    x, r = ops[0], op.result
    dims = tuple(op.attrs["broadcast_dimensions"])
    if _same(x, r) and dims == tuple(range(x.ndim)):
        return x
    if r.size == x.size and list(dims) == sorted(dims) and all(x.shape[i] == r.shape[d] for i, d in enumerate(dims)):
        return rb.emit(RESHAPE, x, loc=op.loc, sharding=r.sharding, shape=r.shape)
    return None


def _slice_simplify(rb, op, ops, uses):
    x, a = ops[0], op.attrs
    full = all(s == 0 for s in a["start"]) and all(s == 1 for s in a["stride"])
    return x if _same(x, op.result) and full else None



# constant: the value lives in the attribute (small ones print inline, large ones as hex)
def _constant_infer(value):
    check(isinstance(value, np.ndarray), f"constant value must be an ndarray, got {type(value).__name__}")
    return aval(value.shape, dtypes.canon(value.dtype))


_leaf("constant", _constant_infer, lambda value: value, lowering="literal",
      lowers_complex=True)


def _iota_infer(shape, dtype, dimension):
    check(0 <= dimension < len(shape), f"iota dimension {dimension} out of range for shape {list(shape)}")
    check(all(d >= 0 for d in shape), f"negative dimension in shape {list(shape)}")
    dt = dtypes.canon(dtype)
    check(dt != "bool", "iota of bool is not defined (StableHLO: integer or float)")
    return aval(shape, dt)


def _iota_ref(shape, dtype, dimension):
    ar = np.arange(shape[dimension], dtype=dtype)
    return np.broadcast_to(ar.reshape([-1 if d == dimension else 1 for d in range(len(shape))]), shape).copy()


_leaf("iota", _iota_infer, _iota_ref, ALL[:-1], lowering="position")


# -- broadcast_in_dim ----------------------------------------------------------------------
def _bcast_infer(x, shape, broadcast_dimensions):
    bd = broadcast_dimensions
    check(len(bd) == len(x.shape), f"broadcast_dimensions {list(bd)} must name one result dim "
                                   f"per operand dim ({len(x.shape)})")
    check(all(0 <= d < len(shape) for d in bd) and list(bd) == sorted(set(bd)),
          f"broadcast_dimensions {list(bd)} must be increasing and < {len(shape)}")
    for i, d in enumerate(bd):
        check(x.shape[i] in (1, shape[d]), f"operand dim {i} (size {x.shape[i]}) cannot broadcast "
                                           f"to result dim {d} (size {shape[d]})")
    return aval(shape, x.dtype)


def _bcast_ref(x, shape, broadcast_dimensions):
    src = [1] * len(shape)
    for i, d in enumerate(broadcast_dimensions):
        src[d] = x.shape[i]
    return np.broadcast_to(x.reshape(src), shape)


def _bcast_vjp(g, op, ct):
    x = op.operands[0]
    shape, bd = op.attrs["shape"], op.attrs["broadcast_dimensions"]
    summed = [d for d in range(len(shape)) if d not in bd]
    summed += [d for i, d in enumerate(bd) if x.shape[i] == 1 and shape[d] != 1]
    r = ct
    if summed:
        r = g.emit(REDUCE, ct, kind="sum", axes=tuple(sorted(summed)))
    if r.shape != x.shape:
        r = g.emit(RESHAPE, r, shape=x.shape)
    return (r,)


def _bcast_factors(ins, outs, attrs):
    shape, bd = attrs["shape"], attrs["broadcast_dimensions"]
    out = letters(len(shape))
    src = "".join(out[d] if ins[0].shape[i] == shape[d] else "_" for i, d in enumerate(bd))
    return einsum_rule(f"{src}->{out}", ins, outs)


register(OpDef("broadcast_in_dim", family="shape", infer=_bcast_infer, ref=_bcast_ref, vjp=_bcast_vjp,
               factors=_bcast_factors, flops=_zero_flops, dtypes=ALL, priority=3, linear=((0,),), fusion="reindex",
               simplify=_bcast_simplify, lowering="index_map", lowers_complex=True,
               reindex=Reindex(index_map=_bcast_index_map)))


# -- reshape, transpose --------------------------------------------------------------------
def _reshape_infer(x, shape):
    check(all(d >= 0 for d in shape), f"negative dimension in shape {list(shape)}")
    check(int(np.prod(shape, dtype=np.int64)) == int(np.prod(x.shape, dtype=np.int64)),
          f"cannot reshape {list(x.shape)} ({int(np.prod(x.shape))} elements) to {list(shape)}")
    return aval(shape, x.dtype)


register(OpDef("reshape", family="shape", infer=_reshape_infer, ref=lambda x, shape: x.reshape(shape),
               vjp=lambda g, op, ct: (g.emit(RESHAPE, ct, shape=op.operands[0].shape),),
               factors=lambda ins, outs, attrs: reshape_rule(ins[0].shape, outs[0].shape),
               flops=_zero_flops, dtypes=ALL, priority=0, linear=((0,),), fusion="reindex", simplify=_reshape_simplify,
               lowering="row_major", lowers_complex=True,
               reindex=Reindex(view=True)))


def _transpose_infer(x, permutation):
    check(sorted(permutation) == list(range(len(x.shape))),
          f"permutation {list(permutation)} is not a permutation of {len(x.shape)} dims")
    return aval(tuple(x.shape[p] for p in permutation), x.dtype)


def _transpose_factors(ins, outs, attrs):
    a = letters(len(ins[0].shape))
    return einsum_rule(a + "->" + "".join(a[p] for p in attrs["permutation"]), ins, outs)


register(OpDef("transpose", family="shape", infer=_transpose_infer,
               ref=lambda x, permutation: np.transpose(x, permutation),
               vjp=lambda g, op, ct: (g.emit(TRANSPOSE, ct, permutation=tuple(np.argsort(op.attrs["permutation"]))),),
               factors=_transpose_factors, flops=_zero_flops, dtypes=ALL, priority=0, linear=((0,),), fusion="reindex",
               simplify=_transpose_simplify, lowering="index_map", lowers_complex=True,
               reindex=Reindex(view=True, index_map=_transpose_index_map)))


# -- reverse ---------------------------------------------------------------------------------
def _reverse_infer(x, dimensions):
    dims = tuple(dimensions)
    check(all(0 <= d < len(x.shape) for d in dims) and len(set(dims)) == len(dims),
          f"reverse dimensions {list(dims)} must be distinct dims of a {len(x.shape)}-d value")
    return aval(tuple(x.shape), x.dtype)


def _reverse_index_map(out, shape, attrs):
    """Element i of a reversed dim of size n reads element n - 1 - i."""
    flip = set(attrs["dimensions"])
    return tuple((tuple((var, -k) for var, k in terms), shape[d] - 1 - c) if d in flip else (terms, c)
                 for d, (terms, c) in enumerate(out))


def _reverse_simplify(rb, op, ops, uses):
    """Reversing no dim, or a dim of size 1, moves nothing; reversing twice undoes it."""
    x, r = ops[0], op.result
    dims = tuple(d for d in op.attrs["dimensions"] if r.shape[d] > 1)
    if not dims:
        return x
    if producer_is(x, REVERSE) and set(x.producer.attrs["dimensions"]) == set(op.attrs["dimensions"]):
        return x.producer.operands[0]
    return None


register(OpDef("reverse", family="shape", infer=_reverse_infer, ref=lambda x, dimensions: np.flip(x, tuple(dimensions)),
               vjp=lambda g, op, ct: (g.emit(REVERSE, ct, dimensions=op.attrs["dimensions"]),),
               factors=elementwise_factors, flops=_zero_flops, dtypes=ALL, priority=0, linear=((0,),), fusion="reindex",
               simplify=_reverse_simplify,
               lowering="index_map", lowers_complex=True,
               reindex=Reindex(view=True, index_map=_reverse_index_map)))


# -- roll ------------------------------------------------------------------------------------
def _roll_infer(x, shift, dimension):
    check(0 <= dimension < len(x.shape), f"roll dimension {dimension} out of range for rank {len(x.shape)}")
    n = x.shape[dimension]
    check(0 < shift < n, f"roll shift {shift} must lie in (0, {n}): a whole turn moves nothing")
    return aval(tuple(x.shape), x.dtype)


def _roll_pieces(out, shapes, attrs, offset):
    """Element i of the rolled dim reads i - shift, wrapped: two stretches of the operand."""
    d, s = attrs["dimension"], attrs["shift"]
    n = shapes[0][d]
    terms, c = out[d]
    at = lambda k: out[:d] + ((terms, c + k),) + out[d + 1:]   # noqa: E731
    return [(0, (((terms, c), 0, s),), at(n - s)), (0, (((terms, c), s, n),), at(-s))], None


def _roll_simplify(rb, op, ops, uses):
    """Two rolls of one dim are one (or none, a whole turn)."""
    x = ops[0]
    if producer_is(x, ROLL) and x.producer.attrs["dimension"] == op.attrs["dimension"]:
        n = op.result.shape[op.attrs["dimension"]]
        s = (x.producer.attrs["shift"] + op.attrs["shift"]) % n
        inner = x.producer.operands[0]
        return inner if s == 0 else rb.emit(ROLL, inner, loc=op.loc, sharding=op.result.sharding,
                                            shift=s, dimension=op.attrs["dimension"])
    return None


register(OpDef("roll", family="shape", infer=_roll_infer,
               ref=lambda x, shift, dimension: np.roll(x, shift, axis=dimension),
               vjp=lambda g, op, ct: (g.emit(ROLL, ct, dimension=op.attrs["dimension"],
                                         shift=op.result.shape[op.attrs["dimension"]] - op.attrs["shift"]),),
               factors=elementwise_factors, flops=_zero_flops, dtypes=ALL, priority=0, linear=((0,),), fusion="reindex",
               simplify=_roll_simplify,
               lowering="pieces", lowers_complex=True,
               reindex=Reindex(index_pieces=_roll_pieces)))


# -- slice, pad, concatenate ---------------------------------------------------------------
def slice_size(start, limit, stride):
    return max(0, (limit - start + stride - 1) // stride)


def _slice_infer(x, start, limit, stride):
    n = len(x.shape)
    check(len(start) == len(limit) == len(stride) == n,
          f"start/limit/stride need {n} entries, got {list(start)}, {list(limit)}, {list(stride)}")
    for d in range(n):
        check(0 <= start[d] <= limit[d] <= x.shape[d] and stride[d] >= 1,
              f"dim {d}: slice {start[d]}:{limit[d]}:{stride[d]} out of bounds for size {x.shape[d]}")
    return aval(tuple(slice_size(*t) for t in zip(start, limit, stride)), x.dtype)


def _slice_vjp(g, op, ct):
    x = op.operands[0]
    start, stride = op.attrs["start"], op.attrs["stride"]
    high = []
    for d in range(x.ndim):
        n = ct.shape[d]
        used = start[d] + (n - 1) * stride[d] + 1 if n else start[d]
        high.append(x.shape[d] - used)
    zero = g.emit(CONSTANT, value=np.zeros((), ct.dtype))
    return (g.emit(PAD, ct, zero, low=start, high=tuple(high), interior=tuple(s - 1 for s in stride)),)


def _changed_dims_factors(ins, outs, attrs, x_index=0, extra=""):
    """Operand x and result share letters; dims whose size changes are permute factors."""
    a = letters(len(outs[0].shape))
    changed = "".join(c for c, i, o in zip(a, ins[x_index].shape, outs[0].shape) if i != o)
    specs = [a if k == x_index else "" for k in range(len(ins))]
    return einsum_rule(",".join(specs) + "->" + a, ins, outs, permute=changed)


register(OpDef("slice", family="shape", infer=_slice_infer,
               ref=lambda x, start, limit, stride: x[tuple(slice(*t) for t in zip(start, limit, stride))],
               vjp=_slice_vjp, factors=_changed_dims_factors, flops=_zero_flops, dtypes=ALL, linear=((0,),),
               fusion="reindex", simplify=_slice_simplify,
               lowering="index_map", lowers_complex=True,
               reindex=Reindex(view=True, index_map=_slice_index_map)))


def _pad_infer(x, v, low, high, interior):
    n = len(x.shape)
    check(v.shape == () and v.dtype == x.dtype, f"padding value must be a {x.dtype} scalar, "
                                                f"got {v.dtype}{list(v.shape)}")
    check(len(low) == len(high) == len(interior) == n, f"low/high/interior need {n} entries")
    check(all(p >= 0 for p in (*low, *high, *interior)), "padding amounts must be >= 0")
    return aval(tuple(lo + s + max(s - 1, 0) * it + hi
                       for s, lo, hi, it in zip(x.shape, low, high, interior)), x.dtype)


def _pad_ref(x, v, low, high, interior):
    shape = _pad_infer(x, v, low, high, interior).shape
    out = np.full(shape, v, dtype=x.dtype)
    out[tuple(slice(lo, lo + (s - 1) * (it + 1) + 1 if s else lo, it + 1)
              for s, lo, it in zip(x.shape, low, interior))] = x
    return out


def _pad_vjp(g, op, ct):
    x = op.operands[0]
    low, interior = op.attrs["low"], op.attrs["interior"]
    limit = tuple(lo + (s - 1) * (it + 1) + 1 if s else lo for s, lo, it in zip(x.shape, low, interior))
    dx = g.emit(SLICE, ct, start=low, limit=limit, stride=tuple(i + 1 for i in interior))
    all_axes = tuple(range(ct.ndim))
    total = g.emit(REDUCE, ct, kind="sum", axes=all_axes) if all_axes else ct
    inner = g.emit(REDUCE, dx, kind="sum", axes=all_axes) if all_axes else dx
    return dx, g.emit(SUBTRACT, total, inner)


def _pad_simplify(rb, op, ops, uses):
    """A pad of a constant with its own value everywhere is that value broadcast (the
    write of a constant into a buffer of it: `p[-1, :] = 0` on zeros' padding). A pad of
    an elementwise expression of slices is the expression of the slices' windows, masked:
    `u[1:-1, 1:-1] = 0.25 * (u[2:, 1:-1] + ...)` then computes every term in u's own
    shape and layout, so a split u needs only its neighbours' edges, not the terms'
    shifted shards."""
    x, v = ops
    a, b = splat(x), splat(v)
    if a is not None and b is not None and _same_bits(a, b):
        return rb.emit(BROADCAST_IN_DIM, v, loc=op.loc, sharding=op.result.sharding, shape=op.result.shape,
                       broadcast_dimensions=())
    return _sink_pad(rb, op, x, v)


SINK_LIMIT = 64          # ops of an expression a pad is sunk into


def _sink_pad(rb, op, x, v):
    a = op.attrs
    if any(a["interior"]) or x.producer is None or x.producer.opdef.fusion != "elementwise":
        return None
    tree, leaves = _elementwise_tree(x)
    if tree is None or not any(producer_is(leaf, SLICE) for leaf in leaves):
        return None
    shape, loc = op.result.shape, op.loc
    zero = {}
    new = {}
    for leaf in leaves:
        if producer_is(leaf, SLICE):
            z = zero.get(leaf.dtype)
            if z is None:
                z = zero[leaf.dtype] = rb.emit(CONSTANT, loc=loc, value=np.array(zero_of(leaf.dtype), leaf.dtype))
            new[leaf] = rb.emit(PAD, leaf, z, loc=loc, **a)
        else:                             # a splat: the same value everywhere
            new[leaf] = rb.emit(BROADCAST_IN_DIM, rb.emit(CONSTANT, loc=loc, value=np.array(splat(leaf))),
                                loc=loc, shape=shape, broadcast_dimensions=())
    for t in tree:
        new[t.result] = rb.emit(t.name, *[new[o] for o in t.operands], loc=t.loc, **t.attrs)
    inside = _window_mask(rb, shape, a["low"], x.shape, loc)
    if inside is None:                    # no padding at all
        return new[x]
    fill = rb.emit(BROADCAST_IN_DIM, v, loc=loc, shape=shape, broadcast_dimensions=())
    return rb.emit(SELECT, inside, new[x], fill, loc=loc, sharding=op.result.sharding)


def _elementwise_tree(x):
    """(the elementwise ops computing x from its leaves, in order; the leaves: stride-1
    slices and splats), or (None, None) when another op feeds it or it is too big."""
    order, leaves, seen = [], [], set()

    def visit(w):
        if w in seen:
            return True
        seen.add(w)
        p = w.producer
        if p is not None and p.opdef.fusion == "elementwise" and len(p.results) == 1:
            if len(order) >= SINK_LIMIT or not all(visit(o) for o in p.operands):
                return False
            order.append(p)
            return True
        if producer_is(w, SLICE) and all(s == 1 for s in p.attrs["stride"]) or splat(w) is not None:
            leaves.append(w)
            return True
        return False

    return (order, leaves) if visit(x) else (None, None)


def _window_mask(rb, shape, low, size, loc):
    """bool[shape]: inside [low, low + size) along every dim that has padding."""
    mask = None
    for d, (lo, n, m) in enumerate(zip(low, size, shape)):
        if lo == 0 and n == m:
            continue
        io = rb.emit(IOTA, loc=loc, shape=tuple(shape), dtype="int64", dimension=d)
        for c, direction in ((lo, "GE"), (lo + n, "LT")):
            k = rb.emit(BROADCAST_IN_DIM, rb.emit(CONSTANT, loc=loc, value=np.array(c, np.int64)), loc=loc,
                        shape=tuple(shape), broadcast_dimensions=())
            cmp = rb.emit(COMPARE, io, k, loc=loc, direction=direction)
            mask = cmp if mask is None else rb.emit(AND, mask, cmp, loc=loc)
    return mask


def _same_bits(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.tobytes() == b.tobytes()


def _pad_pieces(out, shapes, attrs, offset):
    """The operand where the index is inside its window, the padding value elsewhere."""
    if any(attrs["interior"]):
        return None
    guard, index = [], []
    for (terms, c), lo, hi, n in zip(out, attrs["low"], attrs["high"], shapes[0]):
        if lo or hi:
            guard.append(((terms, c), lo, lo + n))
        index.append((terms, c - lo))
    return [(0, tuple(guard), tuple(index))], 1


register(OpDef("pad", family="shape", infer=_pad_infer, ref=_pad_ref, vjp=_pad_vjp, factors=_changed_dims_factors,
               flops=_zero_flops, dtypes=ALL, linear=((0, 1),), simplify=_pad_simplify,
               fusion="reindex", lowering="pieces", lowers_complex=True,
               reindex=Reindex(index_pieces=_pad_pieces)))


def _concat_infer(*xs, dimension):
    check(len(xs) >= 1, "concatenate needs at least one operand")
    r = len(xs[0].shape)
    check(0 <= dimension < r, f"dimension {dimension} out of range for rank {r}")
    for x in xs:
        check(x.dtype == xs[0].dtype, f"operand dtypes differ: {[x.dtype for x in xs]}")
        check(len(x.shape) == r and all(x.shape[d] == xs[0].shape[d] for d in range(r) if d != dimension),
              f"operand shapes {[list(x.shape) for x in xs]} differ outside dimension {dimension}")
    shape = list(xs[0].shape)
    shape[dimension] = sum(x.shape[dimension] for x in xs)
    return aval(shape, xs[0].dtype)


def _concat_vjp(g, op, ct):
    d = op.attrs["dimension"]
    outs, off = [], 0
    for x in op.operands:
        start = tuple(off if k == d else 0 for k in range(ct.ndim))
        limit = tuple(off + x.shape[d] if k == d else ct.shape[k] for k in range(ct.ndim))
        outs.append(g.emit(SLICE, ct, start=start, limit=limit, stride=(1,) * ct.ndim))
        off += x.shape[d]
    return tuple(outs)


def _concat_factors(ins, outs, attrs):
    a = letters(len(outs[0].shape))
    return einsum_rule(",".join([a] * len(ins)) + "->" + a, ins, outs, permute=a[attrs["dimension"]])


def _concat_pieces(out, shapes, attrs, offset):
    """Operand k where the index along the dimension falls in its stretch."""
    d = attrs["dimension"]
    pieces, at = [], 0
    for k, shape in enumerate(shapes):
        n = shape[d]
        if n:
            terms, c = out[d]
            pieces.append((k, (((terms, c), at, at + n),), out[:d] + ((terms, c - at),) + out[d + 1:]))
        at += n
    return pieces, None


register(OpDef("concatenate", family="shape", infer=_concat_infer,
               ref=lambda *xs, dimension, out=None: np.concatenate(xs, axis=dimension, out=out),
               vjp=_concat_vjp, factors=_concat_factors, flops=_zero_flops, dtypes=ALL, takes_out=True,
               fusion="reindex",
               lowering="pieces", lowers_complex=True,
               linear=lambda op: [tuple(range(len(op.operands)))],
               reindex=Reindex(joins=lambda attrs: attrs["dimension"], index_pieces=_concat_pieces)))

__all__ = ["slice_size", "const_like"]
