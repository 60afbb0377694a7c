"""The reshard planner: any Sharding -> any other Sharding on the same mesh, as the
sequence of collectives that moves the fewest bytes per device.

A sharding is a state: for every array dim the mesh axes it is split over (major to
minor), plus the axes over which the values await a sum (partial). A step changes one
thing, on a group of mesh axes:

    all_reduce      partial axes -> replicated                  2(G-1)/G x local bytes
    reduce_scatter  partial axes -> split the minor end of dim   (G-1)/G x input bytes
    all_gather      minor axes of a dim -> replicated           (G-1) x input bytes
    all_to_all      minor axes of dim d1 -> minor end of dim d2 (G-1)/G x input bytes
    permute         the same shard shapes, axes in other places  input bytes
    slice           replicated axes -> split a dim (local dynamic_slice, no bytes)
    make_partial    replicated axes -> partial (keep the value on group index 0, zeros
                    elsewhere; no bytes; used when a linear op meets a partial operand)

`plan` runs a shortest-path search over these states (a handful of mesh axes and array
dims, so it is small; it never looks at individual devices, so planning costs the same
on 8 devices as on 4096). Each step also costs a little latency, so at equal bytes the
plan with fewer collectives wins.

Uneven dims: a dim of size n split k ways is held in chunks of ceil(n/k), padded at the
end (spec.py). Adding G more ways to the minor end of a dim (or removing them) keeps
every shard where the standard layout wants it when the dim was whole (k_outer == 1) or
when the coarser chunk divides by G; other moves are not offered, so the search finds a
route through a whole dim instead, which is always exact.

Padding content is unspecified everywhere: ops that could move padding into real
positions (reductions, contractions, halos) mask it first (partition.py).
"""
from __future__ import annotations

import math
import functools
import heapq
from typing import NamedTuple

import numpy as np

from ..errors import ReshardWarning, ShardingError, warn_at, where  # noqa: F401 (ReshardWarning: its home for importers)
from ..ir import Value
from ..ir.mesh import Sharding
from ..ir.ops.names import (
    ADD, ALL_GATHER, ALL_REDUCE, ALL_TO_ALL, AND, AXIS_INDEX, BROADCAST_IN_DIM, COLLECTIVE_PERMUTE,
    COMPARE, CONSTANT, DYNAMIC_SLICE, IOTA, MAXIMUM, MINIMUM, MULTIPLY, PAD, REDUCE_SCATTER,
    SELECT, SLICE
)

LATENCY_BYTES = 256        # what one collective's start-up is worth, in bytes


def _chunk(n, k):
    return -(-n // k) if k > 0 else n


def nest_ok(n, k_outer, g):
    """Can a dim of size n, split k_outer ways, be split g ways more at its minor end
    (or g ways less) with every shard landing in its standard padded place?"""
    return g == 1 or k_outer == 1 or _chunk(n, k_outer) % g == 0


class State(NamedTuple):
    spec: tuple      # per dim: tuple of axes
    partial: tuple   # axes, mesh order

    @staticmethod
    def of(s: Sharding, ndim):
        s = s.for_rank(ndim)
        return State(tuple(s.dim_axes(d) for d in range(ndim)), tuple(s.partial))

    def sharding(self, mesh):
        return Sharding(mesh, tuple(a if a else None for a in self.spec), self.partial)

    def used(self):
        return {a for axes in self.spec for a in axes} | set(self.partial)


class Step(NamedTuple):
    kind: str
    axes: tuple
    dim: int          # the dim changed (all_to_all: the dim the axes leave)
    dim2: int         # all_to_all: the dim the axes join; permute: unused
    before: State
    after: State
    cost: float


def _prod(mesh, axes):
    return math.prod(mesh.axis_size(a) for a in axes)


def local_shape(mesh, state, shape):
    return tuple(_chunk(n, _prod(mesh, axes)) for n, axes in zip(shape, state.spec))


def _elems(shape):
    return math.prod(int(n) for n in shape)


def _moves(mesh, s: State, d: State, shape, itemsize):
    """Goal-directed steps out of state s toward d: (Step) each."""
    nd = len(shape)
    loc = local_shape(mesh, s, shape)
    in_bytes = _elems(loc) * itemsize
    used = s.used()

    def step(kind, axes, dim, dim2, spec, partial, wire):
        after = State(tuple(spec), tuple(a for a in mesh.axis_names if a in partial))
        return Step(kind, tuple(axes), dim, dim2, s, after, wire + LATENCY_BYTES)

    # partial axes the goal does not keep: all_reduce them, or reduce_scatter onto a dim
    extra = [a for a in s.partial if a not in d.partial]
    if extra:
        g = _prod(mesh, extra)
        yield step("all_reduce", extra, -1, -1, s.spec, set(s.partial) - set(extra),
                   2 * (g - 1) / g * in_bytes)
        for dim in range(nd):
            cur, want = s.spec[dim], d.spec[dim]
            if want[:len(cur)] != cur:
                continue
            rest = want[len(cur):]
            for j in range(1, len(rest) + 1):
                t = rest[:j]
                if not all(a in extra for a in t):
                    break
                g = _prod(mesh, t)
                if not nest_ok(shape[dim], _prod(mesh, cur), g):
                    continue
                spec = list(s.spec)
                spec[dim] = cur + t
                yield step("reduce_scatter", t, dim, -1, spec, set(s.partial) - set(t),
                           (g - 1) / g * in_bytes)
    # replicated axes the goal wants partial
    mk = [a for a in d.partial if a not in used]
    if mk:
        yield step("make_partial", mk, -1, -1, s.spec, set(s.partial) | set(mk), 0)
    # the same shard shapes, the axes in other places: whole shards trade places
    if s.spec != d.spec and s.partial == d.partial and s.used() == d.used() and all(
            _prod(mesh, a) == _prod(mesh, b) for a, b in zip(s.spec, d.spec)):
        axes = tuple(a for a in mesh.axis_names if a in s.used() and a not in s.partial)
        yield step("permute", axes, -1, -1, d.spec, s.partial, in_bytes)
    for dim in range(nd):
        cur, want = s.spec[dim], d.spec[dim]
        # axes the goal keeps on this dim first, the ones to drop at the minor end, where
        # a gather can take them: the shards trade places within the dim's group
        keep = tuple(a for a in want if a in cur)
        order = keep + tuple(a for a in cur if a not in keep)
        if order != cur and want[:len(keep)] == keep:
            spec = list(s.spec)
            spec[dim] = order
            yield step("permute", tuple(sorted(cur, key=mesh.axis_names.index)), -1, -1, spec, s.partial,
                       in_bytes)
        n = shape[dim]
        # gather a minor suffix of the dim's axes (any suffix: where an uneven split
        # cannot be extended in place, the route goes through a whole dim)
        if cur and cur != want:
            for t in range(len(cur) - 1, -1, -1):
                g = _prod(mesh, cur[t:])
                if not nest_ok(n, _prod(mesh, cur[:t]), g):
                    continue
                spec = list(s.spec)
                spec[dim] = cur[:t]
                # each device receives g - 1 (padded) pieces of its own size
                yield step("all_gather", cur[t:], dim, -1, spec, s.partial, (g - 1) * in_bytes)
                # ... or send those axes to the dim that wants them next (all_to_all)
                for dim2 in range(nd):
                    if dim2 == dim:
                        continue
                    c2, w2 = s.spec[dim2], d.spec[dim2]
                    moved = cur[t:]
                    if w2[:len(c2)] != c2 or w2[len(c2):len(c2) + len(moved)] != moved:
                        continue
                    if not nest_ok(shape[dim2], _prod(mesh, c2), g):
                        continue
                    spec2 = list(spec)
                    spec2[dim2] = c2 + moved
                    yield step("all_to_all", moved, dim, dim2, spec2, s.partial, (g - 1) / g * in_bytes)
        # split a dim further over replicated axes: a local slice
        if want[:len(cur)] == cur and len(want) > len(cur):
            rest = want[len(cur):]
            for j in range(len(rest), 0, -1):
                t = rest[:j]
                if any(a in used for a in t):
                    continue
                if not nest_ok(n, _prod(mesh, cur), _prod(mesh, t)):
                    continue
                spec = list(s.spec)
                spec[dim] = cur + t
                yield step("slice", t, dim, -1, spec, s.partial, -LATENCY_BYTES / 2)


# (mesh, state, goal, shape, itemsize) -> _moves' steps: the searches for one goal from
# different starts pass through the same states (bounded: cleared when full)
_MOVES = {}


def _moves_of(mesh, s, d, shape, itemsize) -> tuple:
    key = (mesh, s, d, shape, itemsize)
    got = _MOVES.get(key)
    if got is None:
        if len(_MOVES) > 1 << 16:
            _MOVES.clear()
        got = _MOVES[key] = tuple(_moves(mesh, s, d, shape, itemsize))
    return got


@functools.lru_cache(maxsize=4096)
def _plan(mesh, src: State, dst: State, shape, itemsize):
    if src == dst:
        return ()
    best = {src: 0.0}
    heap = [(0.0, 0, src, ())]
    n = 1
    while heap:
        cost, _, s, path = heapq.heappop(heap)
        if s == dst:
            return path
        if cost > best.get(s, float("inf")):
            continue
        for st in _moves_of(mesh, s, dst, shape, itemsize):
            c = cost + max(st.cost, 0.0)
            if c < best.get(st.after, float("inf")) - 1e-9:
                best[st.after] = c
                heapq.heappush(heap, (c, n, st.after, path + (st,)))
                n += 1
    raise ShardingError(f"no reshard plan from {src.sharding(mesh).text()} to {dst.sharding(mesh).text()} "
                        f"for shape {list(shape)}")


# (src, dst, shape, dtype) -> plan: propagation and the partitioner ask for the same few
# pairs again and again (spmd.AUTO's candidates, each propagated and partitioned, more so);
# making the planner's states from the shardings costs more than the plan's own cache hit
_plans = {}


def plan(src: Sharding, dst: Sharding, shape, dtype) -> tuple:
    """The steps that take a value of global `shape` from `src` to `dst`."""
    key = (src, dst, tuple(shape), dtype)
    got = _plans.get(key)
    if got is not None:
        return got
    if src.mesh != dst.mesh:
        raise ShardingError(f"cannot reshard between meshes {src.mesh} and {dst.mesh}")
    shape = tuple(shape)
    got = _plan(src.mesh, State.of(src, len(shape)), State.of(dst, len(shape)), shape, np.dtype(dtype).itemsize)
    if len(_plans) > 1 << 16:          # (bounded, as _plan's own cache)
        _plans.clear()
    _plans[key] = got
    return got


def plan_peak(steps, mesh, shape) -> int:
    """The most elements per device any state of the plan holds."""
    if not steps:
        return 0
    return max(_elems(local_shape(mesh, st.after, shape)) for st in steps)


# -- emitting a plan into a per-device graph ------------------------------------------------
class Emitter:
    """Appends local ops to a per-device Graph at one user location. Shared helpers for
    rank-dependent indexing (axis_index) and masking."""

    def __init__(self, graph, mesh):
        self.g = graph
        self.mesh = mesh
        self.loc = None
        self._axis_index = {}
        self._consts = {}

    def emit(self, name, *operands, **attrs):
        return self.g.emit(name, *operands, loc=self.loc, **attrs)

    def const(self, value, dtype):
        """A scalar constant (one per value and dtype in the graph)."""
        arr = np.array(value, dtype=dtype)
        key = (arr.tobytes(), arr.dtype.str)
        v = self._consts.get(key)
        if v is None:
            v = self._consts[key] = self.emit(CONSTANT, value=arr)
        return v

    def bcast(self, scalar, shape, dims=()):
        if tuple(scalar.shape) == tuple(shape):
            return scalar
        return self.emit(BROADCAST_IN_DIM, scalar, shape=tuple(shape), broadcast_dimensions=tuple(dims))

    def full(self, value, shape, dtype):
        return self.bcast(self.const(value, dtype), shape)

    def axis_index(self, axes):
        """This device's index (int64 scalar) in its group over `axes` (major to minor)."""
        axes = tuple(axes)
        v = self._axis_index.get(axes)
        if v is None:
            v = self._axis_index[axes] = self.emit(AXIS_INDEX, axes=axes)
        return v

    def affine(self, axes, scale, offset):
        """axis_index(axes) * scale + offset, an int64 scalar (a constant if axes is empty)."""
        if not axes or _prod(self.mesh, axes) == 1 or scale == 0:
            return self.const(offset, "int64")
        v = self.axis_index(axes)
        if scale != 1:
            v = self.emit(MULTIPLY, v, self.const(scale, "int64"))
        if offset:
            v = self.emit(ADD, v, self.const(offset, "int64"))
        return v

    def positions(self, shape, dim, axes, chunk, scale=1, offset=0):
        """int64 array of `shape`: the global index along `dim` of each local element
        (times scale plus offset), for a dim split over `axes` in chunks of `chunk`."""
        io = self.emit(IOTA, shape=tuple(shape), dtype="int64", dimension=dim)
        if scale != 1:
            io = self.emit(MULTIPLY, io, self.full(scale, shape, "int64"))
        start = self.affine(axes, chunk * scale, offset)
        if not axes and offset == 0:
            return io
        return self.emit(ADD, io, self.bcast(start, shape))

    def compare(self, x, c, direction):
        return self.emit(COMPARE, x, self.full(c, x.shape, x.dtype), direction=direction)

    def and_(self, a, b):
        return b if a is None else a if b is None else self.emit(AND, a, b)

    def clip(self, x, lo, hi):
        x = self.emit(MAXIMUM, x, self.full(lo, x.shape, x.dtype))
        return self.emit(MINIMUM, x, self.full(hi, x.shape, x.dtype))

    def in_range(self, x, lo, hi):
        """lo <= x < hi, elementwise."""
        return self.and_(self.compare(x, lo, "GE"), self.compare(x, hi, "LT"))

    def select(self, mask, x, fill):
        """select(mask, x, fill) where fill is a Python scalar or a scalar Value."""
        if not isinstance(fill, Value):
            fill = self.const(fill, x.dtype)
        return self.emit(SELECT, mask, x, self.bcast(fill, x.shape))

    def mask_dim(self, x, dim, axes, n, fill):
        """Set the padding of a dim of global size n split over `axes` to `fill`."""
        k = _prod(self.mesh, axes)
        if k == 1 or n % k == 0:
            return x
        c = _chunk(n, k)
        pos = self.positions(x.shape, dim, axes, c)
        return self.select(self.compare(pos, n, "LT"), x, fill)

    def slice_dim(self, x, dim, start, stop, stride=1):
        if start == 0 and stop == x.shape[dim] and stride == 1:
            return x
        st = [0] * x.ndim
        lim = list(x.shape)
        sd = [1] * x.ndim
        st[dim], lim[dim], sd[dim] = start, stop, stride
        return self.emit(SLICE, x, start=tuple(st), limit=tuple(lim), stride=tuple(sd))

    def pad_dim(self, x, dim, low, high, value=0):
        if low == 0 and high == 0:
            return x
        lo = [0] * x.ndim
        hi = [0] * x.ndim
        lo[dim], hi[dim] = low, high
        v = value if isinstance(value, Value) else self.const(value, x.dtype)
        return self.emit(PAD, x, v, low=tuple(lo), high=tuple(hi), interior=(0,) * x.ndim)

    def dynamic_slice_dim(self, x, dim, start, size):
        zero = self.const(0, "int64")
        starts = [start if d == dim else zero for d in range(x.ndim)]
        sizes = tuple(size if d == dim else x.shape[d] for d in range(x.ndim))
        return self.emit(DYNAMIC_SLICE, x, *starts, slice_sizes=sizes)


def reshard(em: Emitter, x, src: Sharding, dst: Sharding, shape, what=None):
    """Emit the plan that takes local value x (laid out by src) to dst; returns the new
    local value. `what` names the op and user line for the warning."""
    steps = plan(src, dst, shape, x.dtype)
    if not steps:
        return x
    mesh = src.mesh
    peak = plan_peak(steps, mesh, shape)
    ends = max(_elems(local_shape(mesh, steps[0].before, shape)), _elems(local_shape(mesh, steps[-1].after, shape)))
    if peak > ends:
        warn_at(f"spmd: resharding {x.dtype}{list(shape)} from {src.text()} to {dst.text()}"
                f"{' for ' + what if what else ''} holds {peak} elements per device on the way, "
                f"more than either end ({ends}): no direct collective makes this change, so it "
                f"gathers part of the array first", ReshardWarning, em.loc)
    for st in steps:
        x = _emit_step(em, x, st, shape)
    return x


def _emit_step(em, x, st: Step, shape):
    mesh = em.mesh
    g = _prod(mesh, st.axes)
    k = st.kind
    if k == "make_partial":
        first = em.emit(COMPARE, em.axis_index(st.axes), em.const(0, "int64"), direction="EQ")
        return em.select(em.bcast(first, x.shape), x, False if x.dtype == "bool" else 0)
    if g == 1 and k != "permute":
        return x          # a group of one: nothing moves, local shapes are unchanged
    if k == "all_reduce":
        return em.emit(ALL_REDUCE, x, axes=st.axes, reduction="sum", group_size=g)
    d = st.dim
    if k in ("reduce_scatter", "slice"):
        c = x.shape[d]
        c2 = _chunk(c, g)
        x = em.pad_dim(x, d, 0, g * c2 - c)
        if k == "reduce_scatter":
            return em.emit(REDUCE_SCATTER, x, axes=st.axes, dimension=d, reduction="sum", group_size=g)
        return em.dynamic_slice_dim(x, d, em.affine(st.axes, c2, 0), c2)
    if k == "all_gather":
        want = _chunk(shape[d], _prod(mesh, st.after.spec[d]))
        x = em.emit(ALL_GATHER, x, axes=st.axes, dimension=d, group_size=g)
        return em.slice_dim(x, d, 0, want)
    if k == "all_to_all":
        d2 = st.dim2
        c = x.shape[d2]
        x = em.pad_dim(x, d2, 0, g * _chunk(c, g) - c)
        x = em.emit(ALL_TO_ALL, x, axes=st.axes, split_dimension=d2, concat_dimension=d, group_size=g)
        return em.slice_dim(x, d, 0, _chunk(shape[d], _prod(mesh, st.after.spec[d])))
    if k == "permute":
        return em.emit(COLLECTIVE_PERMUTE, x, axes=st.axes, pairs=permute_pairs(mesh, st),
                       group_size=_prod(mesh, st.axes))
    raise AssertionError(k)


def permute_pairs(mesh, st: Step):
    """(sender, receiver) group indices over st.axes (mesh order) that move each shard
    from the device holding it under st.before to the one that wants it under st.after."""
    axes = st.axes
    sizes = [mesh.axis_size(a) for a in axes]

    def blocks(spec, c):
        out = []
        for dim_axes in spec:
            if not all(a in c for a in dim_axes):
                continue        # split over other axes: the same on sender and receiver
            i = 0
            for a in dim_axes:
                i = i * mesh.axis_size(a) + c[a]
            out.append(i)
        return tuple(out)

    def gindex(coords):
        i = 0
        for c, n in zip(coords, sizes):
            i = i * n + int(c)
        return i

    holder = {}
    for coords in np.ndindex(*sizes):
        holder[blocks(st.before.spec, dict(zip(axes, coords)))] = gindex(coords)
    pairs = [(holder[blocks(st.after.spec, dict(zip(axes, coords)))], gindex(coords))
             for coords in np.ndindex(*sizes)]
    return tuple(sorted(pairs))


def describe(steps, mesh, shape, dtype) -> list:
    """Steps as plain dicts (op, axes, local shapes, bytes): for tests and explain."""
    out = []
    for st in steps:
        out.append({"op": st.kind, "axes": st.axes,
                    "in_shape": local_shape(mesh, st.before, shape),
                    "out_shape": local_shape(mesh, st.after, shape)})
    return out


__all__ = ["plan", "reshard", "Emitter", "ReshardWarning", "describe", "where"]
