"""numpy's contractions on Tracers, each one dot_general (StableHLO's: batch and
contracting dimensions of both operands): matmul and @, dot, vdot, inner, outer,
tensordot, einsum (contracted left to right, summing each letter as soon as no later
operand or the output needs it)."""
from __future__ import annotations

import numpy as np

from ..errors import ShapeError, user_loc
from ..ir.ops.names import BROADCAST_IN_DIM, DOT_GENERAL, IOTA
from . import core
from . import elementwise as ew
from . import functionalize as fz
from . import indexing
from . import reductions as red
from . import shapes
from .trace import Tracer


def _dot_general(a, b, lc, rc, lb=(), rb=()):
    dt = core.result_dtype(a, b)
    if dt == "bool":     # numpy: a logical or of ands, i.e. an integer dot product != 0
        return ew.not_equal(_dot_general(core.astype(a, "int64"), core.astype(b, "int64"), lc, rc, lb, rb), 0)
    a, b = core.asarray(a, dt), core.asarray(b, dt)
    return core.emit(a._tr, DOT_GENERAL, a, b, lhs_batch=tuple(lb), rhs_batch=tuple(rb),
                 lhs_contract=tuple(lc), rhs_contract=tuple(rc))


def _check_contract(name, a, b, da, db):
    if a.shape[da] != b.shape[db]:
        raise ShapeError(f"{name} at {user_loc()}: {list(a.shape)} and {list(b.shape)} do not contract "
                         f"(dim {da} is {a.shape[da]}, dim {db} is {b.shape[db]})")


def matmul(a, b):
    a, b = [core.asarray(v, core.result_dtype(a, b), core.trace_of(a, b)) for v in (a, b)]
    if a.ndim == 0 or b.ndim == 0:
        raise ShapeError(f"matmul at {user_loc()}: operands must not be 0-d, got {list(a.shape)}, {list(b.shape)}")
    if a.ndim == 1 and b.ndim == 1:
        _check_contract("matmul", a, b, 0, 0)
        return _dot_general(a, b, (0,), (0,))
    if b.ndim <= 2:
        db = 0 if b.ndim == 1 else 0
        _check_contract("matmul", a, b, a.ndim - 1, db)
        return _dot_general(a, b, (a.ndim - 1,), (db,))
    if a.ndim == 1:
        _check_contract("matmul", a, b, 0, b.ndim - 2)
        return _dot_general(a, b, (0,), (b.ndim - 2,))
    _check_contract("matmul", a, b, a.ndim - 1, b.ndim - 2)
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a = core.broadcast_to(a, batch + a.shape[-2:])
    b = core.broadcast_to(b, batch + b.shape[-2:])
    nb = len(batch)
    return _dot_general(a, b, (nb + 1,), (nb,), range(nb), range(nb))


def dot(a, b, out=None):
    core.no_extra("dot", (), {"out": out})
    a, b = [core.asarray(v, core.result_dtype(a, b), core.trace_of(a, b)) for v in (a, b)]
    if a.ndim == 0 or b.ndim == 0:
        return ew.multiply(a, b)
    db = 0 if b.ndim == 1 else b.ndim - 2
    _check_contract("dot", a, b, a.ndim - 1, db)
    return _dot_general(a, b, (a.ndim - 1,), (db,))


def vdot(a, b):
    return dot(shapes.ravel(ew.conjugate(a)), shapes.ravel(b))     # numpy conjugates the first argument


def inner(a, b):
    a, b = core.asarray(a), core.asarray(b)
    if a.ndim == 0 or b.ndim == 0:
        return ew.multiply(a, b)
    _check_contract("inner", a, b, a.ndim - 1, b.ndim - 1)
    return _dot_general(a, b, (a.ndim - 1,), (b.ndim - 1,))


def outer(a, b):
    return ew.multiply(shapes.reshape(shapes.ravel(a), (-1, 1)), shapes.ravel(b))


def tensordot(a, b, axes=2):
    a, b = core.asarray(a), core.asarray(b)
    if isinstance(axes, int):
        la, lb_ = list(range(a.ndim - axes, a.ndim)), list(range(axes))
    else:
        la, lb_ = [np.atleast_1d(x).tolist() for x in axes]
    return _dot_general(a, b, [x % a.ndim for x in la], [x % b.ndim for x in lb_])


def _einsum_sublists(args):
    """numpy's interleaved form einsum(op0, sublist0, op1, sublist1, ..., [sublistout])
    as a subscripts string and the operands: 0-25 are 'a'-'z', 26-51 'A'-'Z', Ellipsis '...'."""
    def letters(sub):
        out = ""
        for k in sub:
            if k is Ellipsis:
                out += "..."
            elif isinstance(k, (int, np.integer)) and not isinstance(k, bool) and 0 <= k < 52:
                out += chr(ord("a") + k) if k < 26 else chr(ord("A") + k - 26)
            else:
                raise ValueError(f"einsum: subscript {k!r} in a sublist is not an integer in "
                                 f"[0, 52) or Ellipsis (at {user_loc()})")
        return out
    n = len(args) // 2
    ops, subs = list(args[0:2 * n:2]), [letters(s) for s in args[1:2 * n:2]]
    spec = ",".join(subs)
    if len(args) % 2:
        spec += "->" + letters(args[-1])
    return spec, ops


def einsum(subscripts, *operands, optimize=None, **kw):
    core.no_extra("einsum", (), kw)
    if not isinstance(subscripts, str):
        subscripts, operands = _einsum_sublists((subscripts,) + operands)
    specs, out = _einsum_specs(subscripts, len(operands))
    if len(operands) == 1 and isinstance(operands[0], Tracer) and set(out) == set(specs[0]) \
            and len(specs[0]) == operands[0].ndim:
        return _einsum_view(operands[0], specs[0], out, subscripts)
    t = core.trace_of(*operands)
    dt = core.result_dtype(*operands)
    ts = [core.asarray(x, dt, t) for x in operands]
    for i, (s, x) in enumerate(zip(specs, ts)):
        if len(s) != x.ndim:
            raise ShapeError(f"einsum {subscripts!r}: {s!r} names {len(s)} dims of an operand of "
                             f"shape {list(x.shape)} (at {user_loc()})")
        ts[i], specs[i] = _einsum_diagonals(x, s, subscripts)
    # contract left to right; a letter is summed once no later operand or the output needs it
    acc, acc_s = _einsum_sum_unused(ts[0], specs[0], set("".join(specs[1:])) | set(out))
    for k in range(1, len(ts)):
        acc, acc_s = _einsum_contract(acc, acc_s, ts[k], specs[k], set("".join(specs[k + 1:])) | set(out))
    acc, acc_s = _einsum_sum_unused(acc, acc_s, set(out))
    return shapes.transpose(acc, [acc_s.index(c) for c in out])


def _einsum_view(x, spec, out, subscripts):
    """One operand, nothing summed: numpy's result is a view of it (its diagonals over the
    repeated letters, transposed), and a write through it writes the operand."""
    def value(v):
        y, s = _einsum_diagonals(v, spec, subscripts)
        return shapes.transpose(y, [s.index(c) for c in out])

    def back(t, src, new):
        # the new values spread over src's shape (each letter at its first dim, repeated
        # along the others), selected where every repeated letter's indices agree
        letters = "".join(c for i, c in enumerate(spec) if c not in spec[:i])
        spread = core.emit(t, BROADCAST_IN_DIM, shapes.transpose(Tracer(new, t), [out.index(c) for c in letters]),
                           shape=src.shape, broadcast_dimensions=tuple(spec.index(c) for c in letters))
        on = None
        for c in letters:
            dims = [d for d, e in enumerate(spec) if e == c]
            first = core.emit(t, IOTA, shape=src.shape, dtype="int64", dimension=dims[0])
            for d in dims[1:]:
                eq = ew.equal(first, core.emit(t, IOTA, shape=src.shape, dtype="int64", dimension=d))
                on = eq if on is None else ew.logical_and(on, eq)
        return spread.value if on is None else ew.where(on, spread, Tracer(src, t)).value

    return fz.derived_view(x, value(x), "np.einsum's result", lambda t, v: value(Tracer(v, t)).value, back,
                           lambda a: np.einsum(subscripts, a))


def _einsum_diagonals(x, spec, subscripts):
    """An operand whose letters repeat ('ii', 'iji'), as numpy reads it: its diagonal over
    each repeated letter, that letter once, last."""
    while len(set(spec)) != len(spec):
        c = next(c for c in spec if spec.count(c) > 1)
        dims = [d for d, e in enumerate(spec) if e == c]
        n = x.shape[dims[0]]
        if any(x.shape[d] != n for d in dims):
            raise ShapeError(f"einsum {subscripts!r}: dimensions in operand for collapsing index {c!r} don't "
                             f"match ({[x.shape[d] for d in dims]}) (at {user_loc()})")
        rest = [d for d in range(x.ndim) if d not in dims]
        y = shapes.transpose(x, rest + dims)
        i = np.arange(n, dtype=np.int64)
        x = indexing.getitem(y, (Ellipsis,) + (i,) * len(dims))      # x[..., i, i]: the diagonal
        spec = "".join(spec[d] for d in rest) + c
    return x, spec


def _einsum_specs(subscripts, n):
    """The operands' letters and the output's (numpy's implicit output: the letters that
    appear once, sorted)."""
    if "..." in subscripts:
        raise NotImplementedError(f"einsum with '...' is not supported in spmd (at {user_loc()})")
    subscripts = subscripts.replace(" ", "")
    if "->" in subscripts:
        ins, out = subscripts.split("->")
    else:
        ins = subscripts
        counts = {c: ins.count(c) for c in ins if c != ","}
        out = "".join(sorted(c for c, n in counts.items() if n == 1))
    specs = ins.split(",")
    if len(specs) != n:
        raise ShapeError(f"einsum {subscripts!r} names {len(specs)} operands, got {n} (at {user_loc()})")
    return specs, out


def _einsum_contract(acc, acc_s, b, bs, later):
    """acc (letters acc_s) with b (letters bs) as one dot_general: the letters both have
    and a later operand or the output needs are batch dims, the others contracted."""
    b, bs = _einsum_sum_unused(b, bs, set(acc_s) | later)
    batch = [c for c in acc_s if c in bs and c in later]
    contract = [c for c in acc_s if c in bs and c not in later]
    for c in batch + contract:
        _check_contract("einsum", acc, b, acc_s.index(c), bs.index(c))
    acc = _dot_general(acc, b, [acc_s.index(c) for c in contract], [bs.index(c) for c in contract],
                       [acc_s.index(c) for c in batch], [bs.index(c) for c in batch])
    return acc, "".join(batch) + "".join(c for c in acc_s if c not in bs) + "".join(c for c in bs if c not in acc_s)


def _einsum_sum_unused(x, spec, keep):
    drop = [i for i, c in enumerate(spec) if c not in keep]
    if not drop:
        return x, spec
    # einsum sums in the operands' dtype (np.sum would widen int32)
    return red.sum(x, tuple(drop), dtype=x.dtype), "".join(c for c in spec if c in keep)
