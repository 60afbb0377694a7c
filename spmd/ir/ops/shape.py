"""Ops that make or move data without arithmetic: constant, iota, broadcast_in_dim,
reshape, transpose, slice, pad, concatenate."""
import numpy as np

from .. import dtypes
from ..factors import einsum_rule, letters, reshape_rule
from .elementwise import ALL, _aval, const_like
from .registry import OpDef, check, register


def _no_operands_factors(ins, outs, attrs):
    return einsum_rule("->" + letters(len(outs[0].shape)), ins, outs)


def _zero_flops(ins, out, attrs):
    return 0


def _leaf(name, infer, ref, allowed=ALL):
    register(OpDef(name, "shape", infer, ref, lambda g, op, ct: (), _no_operands_factors,
                   None, _zero_flops, allowed))


# constant: the value lives in the attribute (small ones print inline, large ones as hex)
def _constant_infer(value):
    check(isinstance(value, np.ndarray), f"constant value must be an ndarray, got {type(value).__name__}")
    return _aval(value.shape, dtypes.canon(value.dtype))


_leaf("constant", _constant_infer, lambda value: value)


def _iota_infer(shape, dtype, dimension):
    check(0 <= dimension < len(shape), f"iota dimension {dimension} out of range for shape {list(shape)}")
    check(all(d >= 0 for d in shape), f"negative dimension in shape {list(shape)}")
    dt = dtypes.canon(dtype)
    check(dt != "bool", "iota of bool is not defined (StableHLO: integer or float)")
    return _aval(shape, dt)


def _iota_ref(shape, dtype, dimension):
    ar = np.arange(shape[dimension], dtype=dtype)
    return np.broadcast_to(ar.reshape([-1 if d == dimension else 1 for d in range(len(shape))]), shape).copy()


_leaf("iota", _iota_infer, _iota_ref, ALL[:-1])


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
    return _aval(shape, x.dtype)


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
        r = g.emit("reduce", ct, kind="sum", axes=tuple(sorted(summed)))
    if r.shape != x.shape:
        r = g.emit("reshape", r, shape=x.shape)
    return (r,)


def _bcast_factors(ins, outs, attrs):
    shape, bd = attrs["shape"], attrs["broadcast_dimensions"]
    out = letters(len(shape))
    src = "".join(out[d] if ins[0].shape[i] == shape[d] else "_" for i, d in enumerate(bd))
    return einsum_rule(f"{src}->{out}", ins, outs)


register(OpDef("broadcast_in_dim", "shape", _bcast_infer, _bcast_ref, _bcast_vjp, _bcast_factors,
               None, _zero_flops, ALL))


# -- reshape, transpose --------------------------------------------------------------------
def _reshape_infer(x, shape):
    check(all(d >= 0 for d in shape), f"negative dimension in shape {list(shape)}")
    check(int(np.prod(shape, dtype=np.int64)) == int(np.prod(x.shape, dtype=np.int64)),
          f"cannot reshape {list(x.shape)} ({int(np.prod(x.shape))} elements) to {list(shape)}")
    return _aval(shape, x.dtype)


register(OpDef("reshape", "shape", _reshape_infer, lambda x, shape: x.reshape(shape),
               lambda g, op, ct: (g.emit("reshape", ct, shape=op.operands[0].shape),),
               lambda ins, outs, attrs: reshape_rule(ins[0].shape, outs[0].shape),
               None, _zero_flops, ALL, view=True))


def _transpose_infer(x, permutation):
    check(sorted(permutation) == list(range(len(x.shape))),
          f"permutation {list(permutation)} is not a permutation of {len(x.shape)} dims")
    return _aval(tuple(x.shape[p] for p in permutation), x.dtype)


def _transpose_factors(ins, outs, attrs):
    a = letters(len(ins[0].shape))
    return einsum_rule(a + "->" + "".join(a[p] for p in attrs["permutation"]), ins, outs)


register(OpDef("transpose", "shape", _transpose_infer, lambda x, permutation: np.transpose(x, permutation),
               lambda g, op, ct: (g.emit("transpose", ct, permutation=tuple(np.argsort(op.attrs["permutation"]))),),
               _transpose_factors, None, _zero_flops, ALL, view=True))


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
    return _aval(tuple(slice_size(*t) for t in zip(start, limit, stride)), x.dtype)


def _slice_vjp(g, op, ct):
    x = op.operands[0]
    start, stride = op.attrs["start"], op.attrs["stride"]
    high = []
    for d in range(x.ndim):
        n = ct.shape[d]
        used = start[d] + (n - 1) * stride[d] + 1 if n else start[d]
        high.append(x.shape[d] - used)
    zero = g.emit("constant", value=np.zeros((), ct.dtype))
    return (g.emit("pad", ct, zero, low=start, high=tuple(high), interior=tuple(s - 1 for s in stride)),)


def _changed_dims_factors(ins, outs, attrs, x_index=0, extra=""):
    """Operand x and result share letters; dims whose size changes are permute factors."""
    a = letters(len(outs[0].shape))
    changed = "".join(c for c, i, o in zip(a, ins[x_index].shape, outs[0].shape) if i != o)
    specs = [a if k == x_index else "" for k in range(len(ins))]
    return einsum_rule(",".join(specs) + "->" + a, ins, outs, permute=changed)


register(OpDef("slice", "shape", _slice_infer,
               lambda x, start, limit, stride: x[tuple(slice(*t) for t in zip(start, limit, stride))],
               _slice_vjp, _changed_dims_factors, None, _zero_flops, ALL, view=True))


def _pad_infer(x, v, low, high, interior):
    n = len(x.shape)
    check(v.shape == () and v.dtype == x.dtype, f"padding value must be a {x.dtype} scalar, "
                                                f"got {v.dtype}{list(v.shape)}")
    check(len(low) == len(high) == len(interior) == n, f"low/high/interior need {n} entries")
    check(all(p >= 0 for p in (*low, *high, *interior)), "padding amounts must be >= 0")
    return _aval(tuple(lo + s + max(s - 1, 0) * it + hi
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
    dx = g.emit("slice", ct, start=low, limit=limit, stride=tuple(i + 1 for i in interior))
    all_axes = tuple(range(ct.ndim))
    total = g.emit("reduce", ct, kind="sum", axes=all_axes) if all_axes else ct
    inner = g.emit("reduce", dx, kind="sum", axes=all_axes) if all_axes else dx
    return dx, g.emit("subtract", total, inner)


register(OpDef("pad", "shape", _pad_infer, _pad_ref, _pad_vjp, _changed_dims_factors,
               None, _zero_flops, ALL))


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
    return _aval(shape, xs[0].dtype)


def _concat_vjp(g, op, ct):
    d = op.attrs["dimension"]
    outs, off = [], 0
    for x in op.operands:
        start = tuple(off if k == d else 0 for k in range(ct.ndim))
        limit = tuple(off + x.shape[d] if k == d else ct.shape[k] for k in range(ct.ndim))
        outs.append(g.emit("slice", ct, start=start, limit=limit, stride=(1,) * ct.ndim))
        off += x.shape[d]
    return tuple(outs)


def _concat_factors(ins, outs, attrs):
    a = letters(len(outs[0].shape))
    return einsum_rule(",".join([a] * len(ins)) + "->" + a, ins, outs, permute=a[attrs["dimension"]])


register(OpDef("concatenate", "shape", _concat_infer,
               lambda *xs, dimension: np.concatenate(xs, axis=dimension),
               _concat_vjp, _concat_factors, None, _zero_flops, ALL))

__all__ = ["slice_size", "const_like"]
