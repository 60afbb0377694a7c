"""numpy indexing on Tracers, reads and writes (see numpy's "Indexing on ndarrays").

Basic indexing (ints, slices with any step, None, ..., traced integer scalars) gives a
*view*: a chain of slice / dynamic_slice / reverse / reshape steps from the base
(functionalize.py), so writes through it reach the base. Advanced indexing (integer
arrays, lists, ranges, several of them broadcast together, concrete boolean masks)
gives a copy: the indexed dims are moved to the front, merged, and looked up with one
`gather` of a flat index; as in numpy the broadcast index dims replace the indexed dims
when those were side by side in the key, else they go first. A write through advanced
indices is a `scatter` of the values and of a hit count, then a `select`. A traced
boolean mask selects in place: x[mask] is a masked value (masked.py) that elementwise
math, reductions and a write back through the mask take, and `x[x > 0] = 0` is a select.
"""
from __future__ import annotations

import builtins

import numpy as np

from ..errors import TraceError, user_loc
from ..ir.ops.names import ARGSORT, GATHER, SCATTER
from . import core, index_bounds, masked, shapes
from .masked import same_value
from . import elementwise as ew
from . import reductions as red
from . import functionalize as fz
from .functionalize import as_view, fresh, no_plain_write, view_of, write
from .trace import Tracer
from .views import fwd


# -- the key --------------------------------------------------------------------------------
def _entry(k, t):
    """One key entry -> (kind, value); kinds: none ellipsis slice int scalar array mask."""
    if k is None:
        return "none", None
    if k is Ellipsis:
        return "ellipsis", None
    if isinstance(k, slice):
        for v in (k.start, k.stop, k.step):
            if isinstance(v, Tracer):
                raise NotImplementedError(f"a slice with a traced bound has a data-dependent shape; use a "
                                          f"fixed-size window x[np.arange(w) + start] or np.take "
                                          f"(at {user_loc()})")
        return "slice", k
    if isinstance(k, masked.Masked):
        if k.positions_of() is not None:
            return "positions", k
        k = k.compact("indexing with it")
    if isinstance(k, (list, tuple)) and len(k) == 1 and isinstance(k[0], masked.Masked) \
            and k[0].positions_of() is not None:
        return "positions_row", k[0]          # numpy: np.asarray((i,)), the positions as one row
    if isinstance(k, (bool, np.bool_)):
        raise NotImplementedError(f"indexing with a bool scalar (x[True]) is not supported in spmd; use "
                                  f"x[None] (at {user_loc()})")
    if isinstance(k, (int, np.integer)):
        return "int", int(k)
    if isinstance(k, range):
        k = np.arange(k.start, k.stop, k.step, dtype=np.int64)
    if isinstance(k, (list, tuple)):
        if _has_tracer(k):
            k = core.asarray(k, t=t)
        else:
            k = np.asarray(k)
            if k.size == 0:
                k = k.astype(np.int64)
    if isinstance(k, (np.ndarray, Tracer)):
        dt = np.dtype(k.dtype)
        if dt == np.bool_:
            return ("mask", k) if isinstance(k, Tracer) else ("bool", k)
        if dt.kind not in "iu":
            raise IndexError(f"arrays used as indices must be of integer (or boolean) type, got {dt} "
                             f"(at {user_loc()})")
        if k.ndim == 0:
            return ("scalar", k) if isinstance(k, Tracer) else ("int", int(k))
        return "array", k
    raise IndexError(f"only integers, slices (`:`), ellipsis (`...`), numpy.newaxis (`None`) and integer "
                     f"or boolean arrays are valid indices; got {type(k).__name__} {k!r} (at {user_loc()})")


def _as_masks(x, ents):
    """np.nonzero(m)[0] as an index along a dim of m's length selects what m selects:
    the entry is the mask m (the positions in a row, (i,), are m after a None, where numpy
    puts that row's unit dim: before the key's index entries, when they are side by side).
    Elsewhere the positions are compacted (their length taken from the data)."""
    kinds = [k for k, _ in ents]
    adv = [j for j, k in enumerate(kinds) if k not in ("slice", "none", "ellipsis")]
    side_by_side = adv == list(range(adv[0], adv[-1] + 1)) if adv else True
    ellipsis = "ellipsis" in kinds
    out, d = [], 0
    for j, (k, v) in enumerate(ents):
        if k in ("positions", "positions_row"):
            m = v.positions_of()
            fits = not ellipsis and d < x.ndim and x.shape[d] == m.shape[0] and builtins.all(
                kk in ("slice", "int", "scalar", "none") for i, kk in enumerate(kinds) if i != j)
            if not fits or (k == "positions_row" and not side_by_side):
                c = v.compact("indexing with it")
                out.append(_entry(c if k == "positions" else [c], x._tr))
            elif k == "positions":
                out.append(("mask", m))
            else:
                out.insert(adv[0], ("none", None))
                out.append(("mask", m))
        else:
            out.append((k, v))
        d += v.ndim if k in ("bool", "mask") else k not in ("none", "ellipsis")
    return out


def _has_tracer(xs):
    return builtins.any(isinstance(e, Tracer) or (isinstance(e, (list, tuple)) and _has_tracer(e)) for e in xs)


def parse(x, key):
    """The key as a list of (kind, value) with the ellipsis expanded to full slices and
    concrete boolean masks turned into their integer index arrays (np.nonzero)."""
    key = key if isinstance(key, tuple) else (key,)
    ents = _as_masks(x, [_entry(k, x._tr) for k in key])
    if builtins.sum(1 for k, _ in ents if k == "ellipsis") > 1:
        raise IndexError(f"an index can only have a single ellipsis ('...') (at {user_loc()})")
    used = builtins.sum(v.ndim if k in ("bool", "mask") else 1 for k, v in ents if k not in ("none", "ellipsis"))
    if used > x.ndim:
        raise IndexError(f"too many indices for array: array is {x.ndim}-dimensional, but {used} were "
                         f"indexed (at {user_loc()})")
    out, d = [], 0
    for k, v in ents:
        if k == "ellipsis":
            for _ in range(x.ndim - used):
                out.append(("slice", slice(None)))
                d += 1
        elif k == "bool":
            if v.shape != x.shape[d:d + v.ndim]:
                raise IndexError(f"boolean index did not match indexed array along dimensions "
                                 f"{list(range(d, d + v.ndim))}: array is {list(x.shape)}, boolean index is "
                                 f"{list(v.shape)} (at {user_loc()})")
            out += [("array", i.astype(np.int64)) for i in np.nonzero(v)]
            d += v.ndim
        elif k == "mask":
            out.append((k, v))
            d += v.ndim
        else:
            out.append((k, v))
            d += k != "none"
    out += [("slice", slice(None))] * (x.ndim - d)
    has_ellipsis = builtins.any(k == "ellipsis" for k, _ in ents)
    return out, has_ellipsis


# -- basic indexing: a view -----------------------------------------------------------------
def _basic_steps(x, ents):
    """The view chain of a key of none/slice/int/scalar entries: a static strided slice,
    a dynamic window at the traced integers, a reversal of the negative-step dims, and
    a reshape that drops the integer-indexed dims and adds the None ones."""
    start, limit, stride, reverse, dyn, final = [], [], [], [], [], []
    d = 0
    for kind, k in ents:
        if kind == "none":
            final.append(1)
            continue
        s, e, st, m = _window(kind, k, x.shape[d], d)
        if st < 0:          # slice the covered range forward, reverse it after
            s, e, st = (s + (m - 1) * st, s + 1, -st) if m else (0, 0, 1)
            reverse.append(d)
        if kind == "slice":
            final.append(m)
        elif kind == "scalar":
            dyn.append((d, k))
        start.append(s), limit.append(builtins.max(s, e)), stride.append(st)
        d += 1
    steps = []
    shape = list(x.shape)
    if (tuple(start), tuple(limit), tuple(stride)) != ((0,) * x.ndim, x.shape, (1,) * x.ndim):
        steps.append(("slice", (tuple(start), tuple(limit), tuple(stride))))
        shape = [len(range(s, e, st)) for s, e, st in zip(start, limit, stride)]
    if dyn:
        steps.append(_dynamic_window(x, shape, dyn))
        shape = list(steps[-1][1][1])
    if reverse:
        steps.append(("reverse", tuple(reverse)))
    if tuple(final) != tuple(shape):
        steps.append(("reshape", tuple(final)))
    return steps


def _window(kind, k, n, d):
    """(start, stop, step, count) of one entry on an axis of size n (a traced integer: the
    whole axis, narrowed by the dynamic step)."""
    if kind == "slice":
        s, e, st = k.indices(n)
        return s, e, st, len(range(s, e, st))
    if kind == "int":
        if not -n <= k < n:
            raise IndexError(f"index {k} is out of bounds for axis {d} with size {n} (at {user_loc()})")
        return k % n, k % n + 1, 1, 1
    return 0, n, 1, n


def _dynamic_window(x, shape, dyn):
    """The ("dyn", (starts, sizes)) step: a window of 1 at each traced integer (negative
    ones counted from the end; out of range, numpy's IndexError after the run:
    index_bounds.py)."""
    starts = [core.asarray(0, "int64", x._tr).value] * len(shape)
    sizes = list(shape)
    for dim, k in dyn:
        i = core.astype(k, "int64")
        index_bounds.check(i, shape[dim], dim)
        starts[dim] = ew.where(ew.less(i, 0), ew.add(i, shape[dim]), i).value
        sizes[dim] = 1
    return "dyn", (tuple(starts), tuple(sizes))


def _basic_view(x, ents):
    steps = _basic_steps(x, ents)
    v = x.value
    for s in steps:
        v = fwd(x._tr, s, v)
    return view_of(x, v, steps)


# -- advanced indexing ------------------------------------------------------------------------
def _split(x, ents):
    """(the basic view y, the positions of the advanced dims in y, their index entries,
    whether the advanced entries were side by side in the key)."""
    basic, pos, adv, where_ = [], [], [], []
    p = 0
    for i, (kind, k) in enumerate(ents):
        if kind in ("int", "scalar", "array"):
            basic.append(("slice", slice(None)))
            pos.append(p)
            adv.append((kind, k))
            where_.append(i)
        else:
            basic.append((kind, k))
        p += 1
    adjacent = where_ == list(range(where_[0], where_[0] + len(where_)))
    return _basic_view(x, basic), pos, adv, adjacent


def _flat_index(y, pos, adv):
    """The advanced indices broadcast together and merged into one index into the
    advanced dims of y flattened (row-major): an ndarray if all are known, else a Tracer."""
    t = y._tr
    sizes = [y.shape[p] for p in pos]
    known = builtins.all(not isinstance(k, Tracer) for _, k in adv)
    idx = []
    for (kind, k), n, p in zip(adv, sizes, pos):
        if isinstance(k, Tracer):
            k = core.astype(k, "int64")
            index_bounds.check(k, n, p)
            idx.append(ew.where(ew.less(k, 0), ew.add(k, n), k))
        else:
            k = np.asarray(k, dtype=np.int64)
            if k.size and (k.min() < -n or k.max() >= n):
                bad = k.min() if k.min() < -n else k.max()
                raise IndexError(f"index {bad} is out of bounds for axis {p} with size {n} (at {user_loc()})")
            idx.append(np.where(k < 0, k + n, k))
    try:
        bshape = np.broadcast_shapes(*[np.shape(i) if not isinstance(i, Tracer) else i.shape for i in idx])
    except ValueError:
        raise IndexError(f"shape mismatch: indexing arrays could not be broadcast together with shapes "
                         f"{' '.join(str(tuple(np.shape(i))) for i in idx)} (at {user_loc()})") from None
    flat, mult = None, 1
    for i, n in zip(reversed(idx), reversed(sizes)):
        term = i * mult if known else (ew.multiply(i, mult) if mult != 1 else i)
        flat = term if flat is None else (flat + term if known else ew.add(flat, term))
        mult *= n
    if known:
        flat = np.broadcast_to(np.asarray(flat, np.int64), bshape)
    else:
        flat = core.broadcast_to(core.asarray(flat, "int64", t), bshape)
    return flat, bshape, int(np.prod(sizes, dtype=np.int64))


def _merged(y, pos):
    """y with its advanced dims moved to the front and merged into one: (value, perm, shape)."""
    rest = [d for d in range(y.ndim) if d not in pos]
    perm = list(pos) + rest
    yt = shapes.transpose(y, perm)
    n = int(np.prod([y.shape[p] for p in pos], dtype=np.int64))
    return shapes.reshape(yt, (n,) + tuple(y.shape[d] for d in rest)), perm, yt.shape


def _place(r, nb, first, adjacent):
    """Put the nb broadcast index dims (at the front of r) where numpy does: in place of
    the indexed dims when they were side by side in the key, else first."""
    if not adjacent or first == 0:
        return r, None
    perm = list(range(nb, nb + first)) + list(range(nb)) + list(range(nb + first, r.ndim))
    return shapes.transpose(r, perm), perm


def getitem(x, key):
    x = core.asarray(x)
    sels = _selections(x, key)
    if sels is not None and len(sels) == x.ndim:
        return _get_selected(x, sels)
    ents, has_ellipsis = parse(x, key)
    kinds = {k for k, _ in ents}
    if "mask" in kinds:
        plan = _mask_plan(x, ents, read=True)
        return masked.Masked(plan, fresh(plan.view))          # numpy's copy, kept in place
    if "array" not in kinds:
        v = _basic_view(x, ents)
        if v.ndim == 0 and not has_ellipsis:
            return fresh(v)          # x[i, j] is a numpy scalar: a copy, not a view
        if v.ndim == 0 and fz.is_scalar(v):
            return fz.new_array(v)   # s[...] of a numpy scalar s: a 0-d array
        return v
    y, pos, adv, adjacent = _split(x, ents)
    flat, bshape, n = _flat_index(y, pos, adv)
    if n == 0 and int(np.prod(bshape, dtype=np.int64)):
        raise IndexError(f"index out of bounds: indexing an empty dimension (at {user_loc()})")
    m, _, _ = _merged(y, pos)
    idx = flat if isinstance(flat, Tracer) else core.asarray(flat, t=x._tr)
    r = core.emit(x._tr, GATHER, m, idx, axis=0) if n else \
        core.zeros_like(m, shape=tuple(bshape) + m.shape[1:])
    r, _ = _place(r, len(bshape), pos[0], adjacent)
    return fresh(r)


def _mask_read_error():
    raise TraceError(
        f"x[mask] with a traced boolean mask and other index arrays or None at {user_loc()}: the result's "
        f"shape depends on the data, which spmd.jit cannot know when it compiles. Keep the shape instead: "
        f"np.where(mask, x, 0) (then reduce: np.sum(np.where(mask, x, 0))), or select with the mask alone "
        f"and slices (x[mask] and x[mask, 1:] take elementwise math, reductions, and writing back through "
        f"the mask), or run this part eagerly outside spmd.jit.")


def setitem(x, key, value):
    """x[key] = value, numpy's way: value is broadcast to x[key]'s shape and cast to x's
    dtype (unsafe casting, as numpy's assignment), and the write reaches x's base."""
    if not isinstance(x, Tracer):
        no_plain_write("x[...] = traced value", user_loc())
    core.check_int_fits(value, x.dtype)
    x._ensure_buffer()          # written into: an array, which its views below write through
    sels = _selections(x, key)
    if sels is not None and _selected_value(sels[0], value, x.ndim - len(sels)) is not None:
        _set_selected(x, sels, _selected_value(sels[0], value, x.ndim - len(sels)))
        return
    ents, _ = parse(x, key)
    kinds = {k for k, _ in ents}
    if "mask" not in kinds and isinstance(value, masked.Masked):
        # x[idx] = y[mask]: numpy's compacted selection (its length from the data)
        value = value.compact("writing it into x[...]")
    if "mask" in kinds:
        _set_masked(x, ents, value)
    elif "array" not in kinds:
        v = fz.view_to_write(x, _basic_steps(x, ents))
        write(v, _fit(value, v, x._tr).value)
    else:
        _set_advanced(x, ents, value)


# -- x[idx[m]]: indices that are a selection through a traced mask ---------------------------
def _selections(x, key):
    """The key's index arrays when it is x[i[m]], x[i[m], j[m]] or x[i[m], :] -- leading
    selections through one traced mask (masked.Masked, aligned), then full slices -- else None."""
    key = key if isinstance(key, tuple) else (key,)
    n = 0
    while n < len(key) and isinstance(key[n], masked.Masked):
        n += 1
    if n == 0 or n > x.ndim or builtins.any(not (isinstance(k, slice) and k == slice(None)) for k in key[n:]):
        return None
    sels = key[:n]
    lead = sels[0]
    if lead.plan.n_first or lead.dtype.kind not in "iu" or \
            builtins.any(s.dtype.kind not in "iu" or not lead.aligned(s) for s in sels):
        return None
    return sels


def _selected_value(lead, value, nrest):
    """The value written through the selection `lead`, laid out with lead's positions
    (then x's remaining dims), where that does not depend on the data: a scalar or an array
    broadcasting over x's remaining dims alone, or a selection through the same mask (numpy
    pairs the i-th selected index with the i-th selected value: the same position). Else None."""
    if isinstance(value, masked.Masked):
        a, b = lead.plan, value.plan
        if (a.p, a.k, a.n_first) != (b.p, b.k, b.n_first) or b.sel[:len(a.sel)] != a.sel or \
                not same_value(a.mask.value, b.mask.value):
            return None
        return value.vals
    if isinstance(value, (Tracer, np.ndarray, list, tuple)) and np.ndim(value) > nrest:
        return None
    return value


def _kept(sels):
    """The selections' positions that numpy's compacted selection has (the mask broadcast)."""
    lead = sels[0]
    return core.broadcast_to(lead.plan.mask_in_view, lead.vals.shape)


def _selected_entries(x, sels, keep):
    # an unselected position may hold any integer: index 0 there (its write is dropped)
    ents = [("array", ew.where(keep, core.astype(s.vals, "int64"), 0)) for s in sels]
    return ents + [("slice", slice(None))] * (x.ndim - len(sels))


def _get_selected(x, sels):
    """x[i[m], j[m]] (every dim of x indexed): a selection through m again, read in place
    (a gather at every position; the unselected ones are never read back)."""
    lead = sels[0]
    keep = _kept(sels)
    r = getitem(x, tuple(k for _, k in _selected_entries(x, sels, keep)))
    return masked.Masked(lead.plan, r, lead.loc)


def _set_selected(x, sels, value):
    """x[i[m]] = v[m]: a scatter at every position of the selection with the unselected
    positions' writes dropped. Compaction keeps order, so where an index repeats among the
    selected positions the last one written wins, as in numpy."""
    t = x._tr
    keep = _kept(sels)
    y, pos, adv, adjacent = _split(x, _selected_entries(x, sels, keep))
    flat, bshape, n = _flat_index(y, pos, adv)
    m, perm, tshape = _merged(y, pos)
    val = _index_first(value, m, bshape, pos, adjacent, t, x.dtype)
    if not n or not int(np.prod(bshape, dtype=np.int64)):
        return
    new = _scatter_set(m, flat, val, t, keep)
    new = shapes.transpose(shapes.reshape(new, tshape), list(np.argsort(perm)))
    write(y, new.value)


def _set_masked(x, ents, value, count=None):
    """x[... mask ...] = value: a select in the basic view the other entries give."""
    plan = _mask_plan(x, ents)
    view, mask = plan.view, plan.mask_in_view
    if count is not None and not isinstance(value, masked.Masked):
        new = plan.to_view(value, "x[mask] = v", count)
    else:
        # numpy's x[mask] = y[mask] gives the i-th selected element of y to the i-th of x:
        # the same position when the two select through the same mask (Masked.operand checks)
        new = masked.Masked(plan, view).operand(value, "x[mask] = v")
    write(view, ew.where(mask, core.astype(new, x.dtype), view).value)


def set_compacted(x, key, value, count):
    """x[key] = value for a key with a boolean mask whose count of True elements is known
    (`count`: eager mode reads it), so the value may give one entry per selected element,
    as numpy's compacted selection has them."""
    ents, _ = parse(x, key)
    _set_masked(x, ents, value, count)


def _set_advanced(x, ents, value):
    """x[key] = value with index arrays: a scatter into the indexed dims moved to the front
    and merged, moved back after."""
    t = x._tr
    y, pos, adv, adjacent = _split(x, ents)
    flat, bshape, n = _flat_index(y, pos, adv)
    m, perm, tshape = _merged(y, pos)
    val = _index_first(value, m, bshape, pos, adjacent, t, x.dtype)
    if not n or not int(np.prod(bshape, dtype=np.int64)):
        return
    new = _scatter_set(m, flat, val, t)
    new = shapes.reshape(new, tshape)
    new = shapes.transpose(new, list(np.argsort(perm)))
    write(y, new.value)


def _fit(value, like, t, dtype=None):
    """value broadcast to like's shape and cast (unsafely, as numpy's assignment) to its dtype."""
    shape = like.shape if isinstance(like, Tracer) else like
    dtype = dtype or like.dtype
    v = core.asarray(value, t=t)
    try:
        ok = np.broadcast_shapes(v.shape, tuple(shape)) == tuple(shape)
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(f"could not broadcast input array from shape {tuple(v.shape)} into shape "
                         f"{tuple(shape)} (at {user_loc()})")
    return core.broadcast_to(core.astype(v, dtype), tuple(shape))


def _add_zeros(m):
    """Zeros like m to scatter-add written values into: -0.0 for floats, so that a written
    -0.0 stays -0.0 (+0.0 + -0.0 is +0.0)."""
    return core.full_like(m, -0.0) if m.dtype.kind == "f" else core.zeros_like(m)


def _scatter_set(m, flat, val, t, keep=None):
    """m (N, rest...) with rows flat (index shape B) set to val (B + rest): where an index
    repeats, numpy keeps the last value written, and so do we. `keep` (traced bools of
    shape B): only those writes happen."""
    one = np.int32(1)
    if not isinstance(flat, Tracer):
        flat, val = _last_writes(m, flat, val, t)
    elif flat.size > 1 or keep is not None:
        flat, val, one = _last_writes_traced(m, flat, val, t, keep)
    idx = flat if isinstance(flat, Tracer) else core.asarray(flat, t=t)
    # the rows written: a scatter of the values and one of a hit count, then a select
    upd = core.emit(t, SCATTER, _add_zeros(m), idx, val, axis=0)
    one = core.broadcast_to(core.asarray(one, t=t), idx.shape)
    hits = core.emit(t, SCATTER, core.zeros_like(m, dtype="int32", shape=(m.shape[0],)), idx, one, axis=0)
    hit = shapes.reshape(ew.greater(hits, 0), (m.shape[0],) + (1,) * (m.ndim - 1))
    return ew.where(hit, upd, m)


def _last_writes(m, flat, val, t):
    """Known indices: (each index once, the value last written at it)."""
    f = flat.reshape(-1)
    val = shapes.reshape(val, (f.size,) + m.shape[1:])
    last = f.size - 1 - np.unique(f[::-1], return_index=True)[1]
    if last.size != f.size:
        last = np.sort(last)
        val = core.emit(t, GATHER, val, core.asarray(last.astype(np.int64), t=t), axis=0)
        f = f[last]
    return f, val


def _last_writes_traced(m, flat, val, t, keep=None):
    """Traced indices: (the indices, the values with each write a later one to the same
    index supersedes made zero, 1 for a write that stands and 0 for a superseded one) --
    a stable sort of the indices finds the superseded ones. With `keep`, the writes it
    leaves out are dropped and supersede nothing (sorted last, under an index past N)."""
    nb = flat.size
    f = shapes.reshape(flat, (nb,))
    val = shapes.reshape(val, (nb,) + m.shape[1:])
    if keep is not None:
        keep = shapes.reshape(keep, (nb,))
        f = ew.where(keep, f, np.int64(m.shape[0]))
    order = core.emit(t, ARGSORT, f, axis=0)                 # stable: equal ones keep their order
    s = core.emit(t, GATHER, f, order, axis=0)
    later = shapes.concatenate([ew.equal(s[:-1], s[1:]), core.asarray(np.zeros(1, bool), t=t)])
    superseded = core.emit(t, GATHER, later, core.emit(t, ARGSORT, order, axis=0), axis=0)
    if keep is not None:
        f = ew.where(keep, f, np.int64(0))
    # a superseded write adds nothing and does not count as a hit
    keep = ew.logical_not(superseded) if keep is None else ew.logical_and(keep, ew.logical_not(superseded))
    val = ew.where(shapes.reshape(keep, (nb,) + (1,) * (m.ndim - 1)), val, _add_zeros(val))
    return f, val, core.astype(keep, "int32")


def _index_first(value, m, bshape, pos, adjacent, t, dtype):
    """The written values, given in the shape of x[key] (numpy puts the broadcast index
    dims where the adjacent index arrays stood), laid out with the index dims first, as
    the merged array m has them."""
    nb = len(bshape)
    shape = tuple(bshape) + m.shape[1:]
    placed = list(shape)
    if adjacent and pos[0]:
        placed = list(shape[nb:nb + pos[0]]) + list(shape[:nb]) + list(shape[nb + pos[0]:])
    val = _fit(value, tuple(placed), t, dtype)
    if adjacent and pos[0]:
        val = shapes.transpose(val, list(range(pos[0], pos[0] + nb)) + list(range(pos[0])) +
                            list(range(pos[0] + nb, len(placed))))
    return val


def scatter_add(x, key, value):
    """np.add.at(x, key, value): unbuffered, so repeated indices all add."""
    t = x._tr
    ents, _ = parse(x, key)
    if builtins.any(k == "mask" for k, _ in ents):
        raise NotImplementedError(f"ufunc.at with a traced boolean mask (at {user_loc()}); use "
                                  f"x += np.where(mask, v, 0)")
    if not builtins.any(k == "array" for k, _ in ents):
        v = _basic_view(x, ents)
        write(v, ew.add(v, _fit(value, v, t)).value if x.dtype != np.bool_ else
              ew.logical_or(v, _fit(value, v, t)).value)
        return
    y, pos, adv, adjacent = _split(x, ents)
    flat, bshape, n = _flat_index(y, pos, adv)
    m, perm, tshape = _merged(y, pos)
    val = _index_first(value, m, bshape, pos, adjacent, t, x.dtype)
    if not n or not int(np.prod(bshape, dtype=np.int64)):
        return
    idx = flat if isinstance(flat, Tracer) else core.asarray(flat, t=t)
    new = core.emit(t, SCATTER, m, idx, val, axis=0)
    new = shapes.transpose(shapes.reshape(new, tshape), list(np.argsort(perm)))
    write(y, new.value)


def scatter_extreme(x, key, value, ufunc):
    """np.minimum.at / np.maximum.at(x, key, value) where indices may repeat: each update
    compared with each element it may land on (a table of index == position), and the
    extreme of the updates aimed at an element taken with it -- order-free, so exactly
    numpy's unbuffered result (NaN propagating as np.minimum's); O(updates x elements)."""
    t = x._tr
    ents, _ = parse(x, key)
    if builtins.any(k == "mask" for k, _ in ents):
        raise NotImplementedError(f"ufunc.at with a traced boolean mask (at {user_loc()}); use "
                                  f"x[...] = np.where(mask, np.{ufunc.__name__}(x, v), x)")
    y, pos, adv, adjacent = _split(x, ents)
    flat, bshape, n = _flat_index(y, pos, adv)
    m, perm, tshape = _merged(y, pos)
    val = _index_first(value, m, bshape, pos, adjacent, t, x.dtype)
    k = int(np.prod(bshape, dtype=np.int64))
    if not n or not k:
        return
    rest = tuple(m.shape[1:])
    idx = shapes.reshape(flat if isinstance(flat, Tracer) else core.asarray(flat, t=t), (k, 1))
    hit = ew.equal(idx, core.asarray(np.arange(n, dtype=np.int64)[None, :], t=t))
    hit = shapes.reshape(hit, (k, n) + (1,) * len(rest))
    dt = np.dtype(x.dtype)
    low = ufunc is np.minimum
    if dt.kind == "f":
        fill = np.array(np.inf if low else -np.inf, dt)
    elif dt.kind in "iu":
        fill = np.array(np.iinfo(dt).max if low else np.iinfo(dt).min, dt)
    else:
        fill = np.array(low, dt)
    cand = ew.where(hit, shapes.reshape(val, (k, 1) + rest), fill)
    best = red.min(cand, axis=0) if low else red.max(cand, axis=0)
    new = ew.minimum(m, best) if low else ew.maximum(m, best)
    new = shapes.transpose(shapes.reshape(new, tshape), list(np.argsort(perm)))
    write(y, new.value)


class _MaskPlan:
    """A key with one traced boolean mask, otherwise slices and integers, laid out for a
    select. numpy selects x[key] with shape S: the basic dims the slices keep, with N (the
    mask's count of true elements, known only at run time) in place of the mask's dims
    (first instead, when integers, which numpy broadcasts with the mask, are not side by side
    with it in the key). Here the same elements are kept where they are: `view` is x with
    the mask's dims kept whole (x[key] with the mask replaced by full slices), `mask_in_view`
    the mask broadcastable to it, and a value for the selection is laid out as the view
    (to_view) when its N dim is absent or 1: then it does not depend on the data."""

    def __init__(self, x, ents, read):
        kinds = [k for k, _ in ents]
        if kinds.count("mask") > 1 or builtins.any(k not in ("slice", "int", "scalar", "mask", "none") for k in kinds):
            if read and "array" not in kinds and "none" not in kinds:
                _mask_read_error()
            other = "another mask" if kinds.count("mask") > 1 else "integer arrays or None"
            raise NotImplementedError(
                f"x[...] with a traced boolean mask combined with {other} (at {user_loc()}); write "
                f"x[...] = np.where(mask, v, x) with the mask broadcast to x's shape")
        i = kinds.index("mask")
        mask = ents[i][1]
        d = builtins.sum(1 for k in kinds[:i] if k != "none")        # the mask's first dim in x
        if tuple(mask.shape) != tuple(x.shape[d:d + mask.ndim]):
            raise IndexError(f"boolean index did not match indexed array along dimensions "
                             f"{list(range(d, d + mask.ndim))}: array is {list(x.shape)}, boolean index is "
                             f"{list(mask.shape)} (at {user_loc()})")
        self.mask = mask
        self.view = _basic_view(x, ents[:i] + [("slice", slice(None))] * mask.ndim + ents[i + 1:])
        p = self.p = builtins.sum(1 for k, _ in ents[:i] if k in ("slice", "none"))    # the mask's first dim in view
        self.k = mask.ndim
        a, b = self.view.shape[:p], self.view.shape[p + mask.ndim:]
        adv = [j for j, k in enumerate(kinds) if k not in ("slice", "none")]     # (None separates, as a slice)
        self.n_first = adv != list(range(adv[0], adv[-1] + 1))
        self.sel = ((None,) + a + b) if self.n_first else (a + (None,) + b)     # numpy's shape, N as None
        self.mask_in_view = shapes.reshape(mask, (1,) * len(a) + tuple(mask.shape) + (1,) * len(b))

    def per_element(self, value) -> bool:
        """Does value give one entry per selected element (numpy's n_true dim, not 1)?"""
        shape = tuple(np.shape(value))
        nd = len(self.sel)
        if len(shape) > nd:
            return False
        return ((1,) * (nd - len(shape)) + shape)[self.sel.index(None)] != 1

    def to_view(self, value, what, count=None):
        """A value numpy broadcasts against the selection -> one broadcastable to the view.
        `count`, the mask's count of True elements where it is known (eager mode checked
        it), lets a value give one entry per selected element: each selected position
        takes its entry, found by a running count of the mask."""
        v = core.asarray(value, t=self.view._tr)
        sel, nd = self.sel, len(self.sel)
        shown = "(" + ", ".join("n_true" if s is None else str(s) for s in sel) + ("," if nd == 1 else "") + ")"
        if v.ndim > nd:
            raise TraceError(f"{what} at {user_loc()}: a value of shape {list(v.shape)} broadcast against numpy's "
                             f"selection {shown} gives a shape that depends on the data (its count of selected "
                             f"elements), which spmd.jit cannot compile; keep the full shape instead: "
                             f"np.where(mask, x, fill) combines with arrays of x's shape")
        vs = (1,) * (nd - v.ndim) + tuple(v.shape)
        for s, n in zip(sel, vs):
            if s is None and n != 1 and count is not None:
                if n != count:
                    raise ValueError(f"{what} at {user_loc()}: NumPy boolean array indexing assignment cannot "
                                     f"assign {n} input values to the {count} output values where the mask is "
                                     f"true (numpy raises the same ValueError)")
            elif s is None and n != 1:
                raise TraceError(
                    f"{what} at {user_loc()}: the value has shape {list(v.shape)}, one entry per selected "
                    f"element (numpy's selection is {shown}), and with a traced mask that count "
                    f"depends on the data. Assign a value that broadcasts without it (a scalar, or one of "
                    f"shape {list(s for s in sel if s is not None)}), or give the values at every position "
                    f"and select: x[...] = np.where(mask, values, x) with values of x's shape.")
            if s is not None and n not in (1, s):
                raise ValueError(f"{what} at {user_loc()}: cannot broadcast a value of shape {list(v.shape)} to "
                                 f"the selection's shape {shown}")
        v = shapes.reshape(v, vs)
        if self.n_first and self.p:
            v = shapes.transpose(v, list(range(1, self.p + 1)) + [0] + list(range(self.p + 1, nd)))
        if v.shape[self.p] == 0:        # nothing selected: nothing to write
            v = core.zeros_like(v, shape=v.shape[:self.p] + (1,) + v.shape[self.p + 1:])
        if v.shape[self.p] != 1:        # one entry per selected element: the i-th to the i-th True
            running = red.cumsum(core.astype(shapes.reshape(self.mask, (-1,)), "int64"))
            at = ew.clip(ew.subtract(running, np.int64(1)), np.int64(0), np.int64(v.shape[self.p] - 1))
            return shapes.take(v, shapes.reshape(at, self.mask.shape), axis=self.p)
        return shapes.reshape(v, tuple(v.shape[:self.p]) + (1,) * self.k + tuple(v.shape[self.p + 1:]))


def _mask_plan(x, ents, read=False):
    return _MaskPlan(x, ents, read)


# -- index helpers ------------------------------------------------------------------------
def ix_(*seqs):
    """np.ix_ of known or traced 1-d sequences: open-mesh index arrays."""
    out = []
    n = len(seqs)
    for i, s in enumerate(seqs):
        shape = (1,) * i + (-1,) + (1,) * (n - i - 1)
        if isinstance(s, Tracer):
            if s.dtype == np.bool_:
                raise TraceError(f"np.ix_ of a traced boolean array has a data-dependent shape (at {user_loc()})")
            out.append(shapes.reshape(s, shape))
        else:
            out.append(np.ix_(*[np.zeros(1, np.int64)] * i, s, *[np.zeros(1, np.int64)] * (n - i - 1))[i])
    return tuple(out)


def _along_key(arr, indices, axis, what):
    if axis is None:
        return shapes.reshape(arr, (-1,)), (indices,)
    axis = core.normalize_axis(axis, arr.ndim, what)
    if np.ndim(indices) != arr.ndim:
        raise ValueError(f"{what}: indices and arr must have the same number of dimensions, got "
                         f"{np.ndim(indices)} and {arr.ndim} (at {user_loc()})")
    key = []
    for d in range(arr.ndim):
        if d == axis:
            key.append(indices)
        else:
            shape = [1] * arr.ndim
            shape[d] = arr.shape[d]
            key.append(np.arange(arr.shape[d], dtype=np.int64).reshape(shape))
    return arr, tuple(key)


def take_along_axis(arr, indices, axis=-1):
    arr = core.asarray(arr)
    a, key = _along_key(arr, indices, axis, "take_along_axis")
    return getitem(a, key)


def put_along_axis(arr, indices, values, axis):
    if axis is None:
        raise NotImplementedError(f"np.put_along_axis with axis=None (at {user_loc()}); use np.put")
    a, key = _along_key(arr, indices, axis, "put_along_axis")
    setitem(a, key, values)


def put(a, ind, v, mode="raise"):
    """np.put: write v at the flat indices ind of a (through a flat view of a)."""
    if mode not in ("raise", "clip", "wrap"):
        raise ValueError(f"np.put: mode must be 'raise', 'clip' or 'wrap', got {mode!r} (at {user_loc()})")
    flat = as_view(lambda x: shapes.reshape(x, (-1,)), "reshape")(a)
    if not fz.same_base(flat, a):
        raise NotImplementedError(f"np.put into a non-contiguous view (at {user_loc()}); write into the "
                                  f"base array")
    ind = np.asarray(ind) if not isinstance(ind, Tracer) else ind
    n = int(np.prod(a.shape, dtype=np.int64))
    if mode != "raise" and n:
        # numpy: "clip" moves every index into [0, n) (negative ones to 0: no wrapping);
        # "wrap" takes it modulo n
        ind = (np.clip(ind, 0, n - 1) if mode == "clip" else np.mod(ind, n)) if not isinstance(ind, Tracer) \
            else (ew.clip(ind, 0, n - 1) if mode == "clip" else ew.mod(ind, n))
    v = core.asarray(v, t=a._tr)
    if v.ndim and v.size != int(np.prod(np.shape(ind))):
        raise NotImplementedError(f"np.put with {v.size} values for {np.size(ind)} indices (numpy repeats "
                                  f"them) is not supported in spmd (at {user_loc()})")
    setitem(flat, (ind,), shapes.reshape(v, np.shape(ind)) if v.ndim else v)


def fill_diagonal(a, val, wrap=False):
    if a.ndim < 2 or (a.ndim > 2 and len(set(a.shape)) != 1):
        raise ValueError(f"np.fill_diagonal: all dimensions of the input must be of equal length, or "
                         f"the array 2-d; got {list(a.shape)} (at {user_loc()})")
    if wrap and a.ndim == 2 and a.shape[0] > a.shape[1] + 1:
        raise NotImplementedError(f"np.fill_diagonal(..., wrap=True) on a tall matrix (at {user_loc()})")
    n = builtins.min(a.shape)
    i = np.arange(n, dtype=np.int64)
    v = core.asarray(val, t=a._tr)
    if v.ndim:
        v = shapes.reshape(v, (-1,))
        if v.shape[0] != n:
            raise NotImplementedError(f"np.fill_diagonal with {v.shape[0]} values for a diagonal of {n} "
                                      f"(numpy repeats them) (at {user_loc()})")
    setitem(a, (i,) * a.ndim, v)


def ufunc_at(ufunc, builder, a, indices, b=None):
    """np.<ufunc>.at(a, indices, b): add / subtract accumulate at repeated indices (a
    scatter-add); other ufuncs (`builder`: the ufunc's, None where spmd has none) where the
    indices are known not to repeat."""
    name = ufunc.__name__
    if not isinstance(a, Tracer):
        no_plain_write(f"np.{name}.at", user_loc())
    if ufunc is np.add or ufunc is np.subtract:
        v = b if ufunc is np.add else ew.negative(b)
        return scatter_add(a, indices, v)
    ents, _ = parse(a, indices)
    repeats = builtins.any(k == "array" and (isinstance(v, Tracer) or np.unique(v).size != np.size(v))
                           for k, v in ents) or builtins.sum(1 for k, _ in ents if k == "array") > 1
    if repeats and (ufunc is np.minimum or ufunc is np.maximum) and b is not None:
        return scatter_extreme(a, indices, b, ufunc)
    if repeats or builder is None:
        raise NotImplementedError(f"np.{name}.at with indices that may repeat is not supported in spmd "
                                  f"(at {user_loc()}); np.add.at and np.subtract.at are, and so is "
                                  f"x[idx] = np.{name}(x[idx], v) when idx has no repeats")
    cur = getitem(a, indices)
    setitem(a, indices, builder(cur) if b is None else builder(cur, b))
