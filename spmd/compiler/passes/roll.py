"""Roll a Python loop back up: a traced program that repeats the same block of ops many
times (`for q in range(nit): p = sweep(p)` traces `nit` copies of the sweep) becomes one
`scan` op whose body is the block, so the program, its partitioning and its compile time
do not grow with the trip count.

A block repeats when its ops have the same names, attributes, result types and user
lines as the next block's (the same Python code ran again), and every operand is found
in the same place each time: made earlier in the same block, made by the previous block
(a loop-carried value), or made before the loop (the same value every time: captured).
The first block's carried operands are the loop's initial values; only the last block's
values may be used after the loop (they are the scan's results). Anything else (an
iteration's value read two iterations later, or after the loop; an index that changes
each time, such as `x[i]`) is not a repeat, and the ops stay as they are.

An index that steps by the same amount each iteration (`for b in range(n): ... x[b] ...
y[b] = ...`, traced as a slice at b, a pad to b and constants b) is part of the repeat:
its blocks differ only in a constant's value (integers, or floats that are whole
numbers), a slice's start or a pad's offsets, and those are c0 + j*d at block j. The
scan then carries a counter j, and the body computes the constant from it, takes the
slice with dynamic_slice at the computed start, and writes the padded operand there
with dynamic_update_slice.

Loops are rolled when they pay: at least MIN_REPEATS iterations covering at least
SPMD_ROLL_MIN_OPS ops (default 256); SPMD_ROLL=0 turns rolling off. A rolled body is
rolled again, so nested loops become nested scans.
"""
from __future__ import annotations

import hashlib
import os
from collections import defaultdict

import numpy as np

from ...ir import Graph, Op, Value
from ...ir.ops.names import ADD, BROADCAST_IN_DIM, CONSTANT, CONVERT, DYNAMIC_SLICE, DYNAMIC_UPDATE_SLICE, MULTIPLY, PAD, SCAN, SLICE
from .dce import dce

MIN_REPEATS = 4
NEAREST = 4              # how many next occurrences of an op's signature are tried as periods


def min_ops() -> int:
    return int(os.environ.get("SPMD_ROLL_MIN_OPS", "256"))


def roll_loops(graph: Graph) -> Graph:
    if os.environ.get("SPMD_ROLL", "1") == "0":
        return graph
    return _roll(graph, min_ops())


def _roll(graph: Graph, least: int) -> Graph:
    ops = graph.ops
    if len(ops) < 2 * MIN_REPEATS:
        return graph
    sigs = _signatures(ops)
    # the periods tried: the next few occurrences of op k's signature, and of its exact
    # one (a line's slices at other starts share a signature: the next iteration's op may
    # be further than NEAREST of them away)
    nexts = _next_occurrences(sigs), _next_occurrences(_signatures(ops, exact=True))
    pos = {op: i for i, op in enumerate(ops)}
    used_after = _last_uses(graph, pos)
    loops, k = [], 0
    while k < len(ops):
        best = None
        for q in sorted(set(nexts[0][k]) | set(nexts[1][k])):
            period = q - k
            reps = _repeats(sigs, k, period)
            if reps < MIN_REPEATS or period * reps < least or (best and period * reps <= best.covered):
                continue
            loop = _validate(ops, pos, used_after, k, period, reps)
            if loop is not None and loop.reps >= MIN_REPEATS and loop.covered >= least \
                    and (best is None or loop.covered > best.covered):
                best = loop
        if best is None:
            k += 1
            continue
        loops.append(best)
        k = best.start + best.covered
    if not loops:
        return graph
    return _rebuild(graph, loops, least)


def _next_occurrences(sigs) -> list:
    """Per position, the next NEAREST positions with its signature."""
    at = defaultdict(list)                    # signature -> positions, ascending
    for i, s in enumerate(sigs):
        at[s].append(i)
    out = [None] * len(sigs)
    for ps in at.values():
        for j, p in enumerate(ps):
            out[p] = ps[j + 1:j + 1 + NEAREST]
    return out


def _signatures(ops, exact=False) -> list:
    """One number per op, equal for two ops when they may be the same line of the same
    loop body: the same name, user line, attributes, result types and operand count
    (operands are compared separately, by position). Numbers, so that comparing blocks
    of ops is comparing lists of ints."""
    memo, ids = {}, {}
    out = []
    for op in ops:
        step = None if exact else _stepping(op)
        attrs = _attrs_key(op.attrs, memo) if step is None else step
        sig = (op.name, op.loc, attrs, tuple([(r.shape, r.dtype) for r in op.results]),
               len(op.operands))
        out.append(ids.setdefault(sig, len(ids)))
    return out


def _stepping(op):
    """For an op whose value may step from block to block (an integer or float constant,
    a slice's start, a pad's offsets), what must stay the same: its key in place of its
    attributes. Else None."""
    if op.name == CONSTANT:
        v = op.attrs["value"]
        if isinstance(v, np.ndarray) and v.dtype.kind in "if":
            return ("stepping", v.dtype.str, v.shape)
    elif op.name == SLICE:
        return ("stepping", tuple(op.attrs["stride"]))
    elif op.name == PAD:
        return ("stepping", tuple(op.attrs["interior"]))
    return None


def _position(op):
    """The stepping part of a _stepping op, as an int64 array; None for a float constant
    that is not a whole number a float counts exactly (x + i: the body computes it as
    c0 + j*d in the float type, exactly only then)."""
    if op.name == CONSTANT:
        v = op.attrs["value"]
        if v.dtype.kind == "f":
            exact = 2.0 ** (np.finfo(v.dtype).nmant + 1)
            if not (np.all(np.isfinite(v)) and np.all(v == np.round(v)) and np.all(np.abs(v) <= exact)
                    and not np.any((v == 0) & np.signbit(v))):
                return None
        return np.asarray(v, np.int64)
    return np.asarray(op.attrs["low" if op.name == PAD else "start"], np.int64)


def _steps(ops, k, period, reps):
    """{offset: (first, step)} of the stepping ops of the blocks whose values are not all
    equal, and how many blocks from the first step evenly (reps when all do)."""
    steps = {}
    if reps < 2:
        return steps, reps
    for i in range(period):
        op = ops[k + i]
        if _stepping(op) is None:
            continue
        if op.name == CONSTANT and all(_same_value(op, ops[k + j * period + i]) for j in range(1, reps)):
            continue
        first, second = _position(op), _position(ops[k + period + i])
        if first is None or second is None:
            return steps, 1
        step = np.asarray(second - first)
        if op.name == CONSTANT and not _fits(first, step, reps, op.attrs["value"].dtype):
            return steps, 1
        if op.name == PAD and not all(_plain_pad(ops[k + j * period + i].attrs, step) for j in range(reps)):
            return steps, 1
        for j in range(2, reps):
            at = _position(ops[k + j * period + i])
            if at is None or not np.array_equal(at, first + j * step):
                return _steps(ops, k, period, j)[0], j
        if step.any():
            steps[i] = (first, step)
    return steps, reps


def _plain_pad(attrs, step) -> bool:
    """Along the dims whose padding steps, the operand lies whole inside the result (no
    interior padding, no cropping): it is a window of the result."""
    return all(attrs["interior"][d] == 0 and attrs["low"][d] >= 0 and attrs["high"][d] >= 0
               for d in range(len(step)) if step[d])


def _same_value(a, b) -> bool:
    va, vb = a.attrs["value"], b.attrs["value"]
    return va.dtype == vb.dtype and va.tobytes() == vb.tobytes()


def _fits(first, step, reps, dtype) -> bool:
    """first + j*step stays in dtype for j < reps (the body computes it in dtype; a
    float's whole numbers were checked by _position)."""
    if np.dtype(dtype).kind == "f":
        return True
    info = np.iinfo(dtype)
    last = first + (reps - 1) * step
    return bool(np.all(np.minimum(first, last) >= info.min) and np.all(np.maximum(first, last) <= info.max))


def _attrs_key(attrs, memo):
    items = []
    for k in sorted(attrs):
        v = attrs[k]
        items.append((k, v if _plain(v) else _freeze(v, memo)))
    return tuple(items)


def _plain(v) -> bool:
    """Hashable as it is, and equal only to values of its own type (1 == 1.0 == True)."""
    t = type(v)
    if t is str or t is int:
        return True
    if t is not tuple:
        return False
    for e in v:
        if type(e) is not int:
            return False
    return True


def _freeze(x, memo):
    if isinstance(x, np.ndarray):
        return ("array", x.dtype.str, x.shape, hashlib.blake2b(np.ascontiguousarray(x).tobytes(),
                                                                digest_size=16).digest())
    if isinstance(x, (tuple, list)):
        return tuple(_freeze(e, memo) for e in x)
    if isinstance(x, float) and x != x:
        return ("nan",)
    if isinstance(x, Graph):                 # a body: equal when it prints the same
        key = memo.get(id(x))
        if key is None:
            from ...ir.text import print_graph
            key = memo[id(x)] = ("graph", hashlib.blake2b(print_graph(x).encode(), digest_size=16).digest())
        return key
    return (type(x).__name__, x)


def _repeats(sigs, k, period) -> int:
    """How many blocks of `period` ops, from k on, have the signatures of the first."""
    reps = 1
    first = sigs[k:k + period]
    while k + (reps + 1) * period <= len(sigs) and sigs[k + reps * period:k + (reps + 1) * period] == first:
        reps += 1
    return reps


def _last_uses(graph, pos) -> dict:
    """Value -> the position of its last use (len(ops) for a graph output)."""
    last = {}
    for i, op in enumerate(graph.ops):
        for o in op.operands:
            last[o] = i
    for v in graph.outputs:
        last[v] = len(graph.ops)
    return last


class _Loop:
    def __init__(self, start, period, reps, carries, inits, captured, steps):
        self.start, self.period, self.reps = start, period, reps
        self.steps = steps                # offset in the block -> (value at block 0, step)
        # (offset in the block, result index) of the values a block hands on: those the next
        # block reads and those used after the loop; the scan's carries, in this order
        self.carries = carries
        self.inits = inits                # each carry's value before the loop (None: not read)
        self.captured = captured          # values made before the loop that the body reads

    @property
    def covered(self):
        return self.period * self.reps


def _validate(ops, pos, last_use, k, period, reps):
    """The loop of `reps` blocks of `period` ops from k, if its operands fit (module
    docstring); a shorter loop from k if only the first blocks fit; else None."""
    def where(v, block_start):
        """How block op's operand v is reached: ("in", off, idx), ("prev", off, idx) or ("out", v)."""
        p = pos.get(v.producer, -1) if v.producer is not None else -1
        if p >= block_start:
            return ("in", p - block_start, v.index)
        if p >= block_start - period and p >= k:
            return ("prev", p - (block_start - period), v.index)
        if p >= k:
            return None                              # from two or more blocks back
        return ("out", v)

    shape = None                                     # the operand places of blocks 1.. (all alike)
    first = []
    for j in range(reps):
        b = k + j * period
        places = []
        for i in range(period):
            for o in ops[b + i].operands:
                w = where(o, b)
                if w is None:
                    return _shorter(ops, pos, last_use, k, period, j)
                places.append(w)
        if j == 0:
            first = places
            continue
        if shape is None:
            shape = places
        elif places != shape:
            return _shorter(ops, pos, last_use, k, period, j)
    # block 0 reads from before the loop where the others read the previous block
    inits = {}
    for w0, w in zip(first, shape):
        if w0 == w:
            continue
        if w[0] != "prev" or w0[0] != "out":
            return _shorter(ops, pos, last_use, k, period, 1)
        slot = w[1:]
        if inits.setdefault(slot, w0[1]) is not w0[1]:
            return None                              # one carry, two different initial values
    carries = sorted({w[1:] for w in shape if w[0] == "prev"})
    captured = []
    for w in shape:
        if w[0] == "out" and all(w[1] is not c for c in captured):
            captured.append(w[1])
    # values of the loop used after it: only the last block's
    end = k + reps * period
    results = set()
    for j in range(reps):
        b = k + j * period
        for i in range(period):
            for r in ops[b + i].results:
                if last_use.get(r, -1) >= end:
                    if j != reps - 1:
                        return _shorter(ops, pos, last_use, k, period, j + 1) if j > 0 else None
                    results.add((i, r.index))
    for slot in results:
        if slot not in carries:
            carries.append(slot)                     # computed each time, kept from the last
    carries.sort()
    steps, even = _steps(ops, k, period, reps)
    if even < reps:
        return _shorter(ops, pos, last_use, k, period, even)
    return _Loop(k, period, reps, carries, [inits.get(slot) for slot in carries], captured, steps)


def _shorter(ops, pos, last_use, k, period, reps):
    return _validate(ops, pos, last_use, k, period, reps) if reps >= MIN_REPEATS else None


def _rebuild(graph, loops, least) -> Graph:
    """The graph with each loop's ops replaced by one scan op."""
    g = Graph(graph.name)
    g.mesh = graph.mesh
    vmap = {v: g.add_input(v.shape, v.dtype, v.sharding) for v in graph.inputs}
    pos = {op: i for i, op in enumerate(graph.ops)}
    ops, k = graph.ops, 0
    for loop in loops:
        for op in ops[k:loop.start]:
            _copy(g, op, vmap)
        _emit_scan(g, graph, pos, loop, vmap, least)
        k = loop.start + loop.covered
    for op in ops[k:]:
        _copy(g, op, vmap)
    g.outputs = [vmap[v] for v in graph.outputs]
    return g


def _copy(g, op, vmap):
    new = Op(op.name, [vmap[o] for o in op.operands], dict(op.attrs), [], op.loc)
    new.results = tuple(Value(r.shape, r.dtype, new, i, r.sharding) for i, r in enumerate(op.results))
    g.ops.append(new)
    for r, nr in zip(op.results, new.results):
        vmap[r] = nr


def _emit_scan(g, graph, pos, loop, vmap, least):
    """Append to g the scan op of `loop`; map the last block's results to its results."""
    ops = graph.ops
    b = loop.start + loop.period                    # block 1: it has a previous block
    slot_of = {slot: i for i, slot in enumerate(loop.carries)}
    captured_at = {id(v): i for i, v in enumerate(loop.captured)}
    body = Graph(f"{graph.name}_loop")
    carry_in = [body.add_input(r.shape, r.dtype) for r in (_result(ops, b + off, idx) for off, idx in loop.carries)]
    counter = body.add_input((), "int64") if loop.steps else None
    captured_in = [body.add_input(v.shape, v.dtype) for v in loop.captured]
    bmap = {}
    for i, op in enumerate(ops[b:b + loop.period]):
        operands = []
        for o in op.operands:
            p = pos[o.producer] if o.producer is not None else -1
            if p >= b:
                operands.append(bmap[o])
            elif p >= loop.start:
                operands.append(carry_in[slot_of[(p - loop.start, o.index)]])
            else:
                operands.append(captured_in[captured_at[id(o)]])
        if i in loop.steps:
            bmap[op.results[0]] = _stepped(body, op, operands, counter, *loop.steps[i])
            continue
        new = Op(op.name, operands, dict(op.attrs), [], op.loc)
        new.results = tuple(Value(r.shape, r.dtype, new, j) for j, r in enumerate(op.results))
        body.ops.append(new)
        for r, nr in zip(op.results, new.results):
            bmap[r] = nr
    body.outputs = [bmap[_result(ops, b + off, idx)] for off, idx in loop.carries]
    if counter is not None:
        one = body.emit(CONSTANT, value=np.ones((), np.int64), loc=ops[b].loc)
        body.outputs.append(body.emit(ADD, counter, one, loc=ops[b].loc))
    body = _roll(dce(body), least)
    loc = ops[b].loc
    inits = []
    for (off, idx), v in zip(loop.carries, loop.inits):
        if v is None:                               # kept from the last iteration only
            r = _result(ops, b + off, idx)
            z = g.emit(CONSTANT, value=np.zeros((), r.dtype), loc=loc)
            inits.append(g.emit(BROADCAST_IN_DIM, z, shape=r.shape, broadcast_dimensions=(), loc=loc))
        else:
            inits.append(vmap[v])
    if loop.steps:
        inits.append(g.emit(CONSTANT, value=np.zeros((), np.int64), loc=loc))
    out = g.emit(SCAN, *inits, *[vmap[v] for v in loop.captured], body=body,
                 num_carry=len(loop.carries) + bool(loop.steps),
                 num_xs=0, length=loop.reps, reverse=False, loc=loc)
    last = loop.start + (loop.reps - 1) * loop.period
    for (off, idx), res in zip(loop.carries, out if isinstance(out, tuple) else (out,)):
        vmap[_result(ops, last + off, idx)] = res


def _stepped(body, op, operands, counter, first, step):
    """In the body, op's value at iteration `counter`: the constant first + counter*step,
    the slice starting there, or the operand padded to start there (written into a
    broadcast of the padding value at that start)."""
    loc = op.loc
    if op.name == PAD:
        x, fill = operands
        a, moving = op.attrs, [bool(d) for d in step]
        if any(not m and (lo or hi or k) for m, lo, hi, k in zip(moving, a["low"], a["high"], a["interior"])):
            x = body.emit(PAD, x, fill, loc=loc, low=tuple(0 if m else v for m, v in zip(moving, a["low"])),
                          high=tuple(0 if m else v for m, v in zip(moving, a["high"])), interior=tuple(a["interior"]))
        full = body.emit(BROADCAST_IN_DIM, fill, shape=op.results[0].shape, broadcast_dimensions=(), loc=loc)
        at = np.where(moving, first, 0)
        return body.emit(DYNAMIC_UPDATE_SLICE, full, x, *_starts(body, counter, at, step, loc), loc=loc)
    if op.name == CONSTANT:
        dt = op.attrs["value"].dtype
        j = counter if dt == np.int64 else body.emit(CONVERT, counter, dtype=dt.name, loc=loc)
        if first.ndim:
            j = body.emit(BROADCAST_IN_DIM, j, shape=first.shape, broadcast_dimensions=(), loc=loc)
        c0 = body.emit(CONSTANT, value=np.asarray(first, dt), loc=loc)
        d = body.emit(CONSTANT, value=np.asarray(step, dt), loc=loc)
        return body.emit(ADD, c0, body.emit(MULTIPLY, j, d, loc=loc), loc=loc)
    x, = operands
    stride, out = op.attrs["stride"], op.results[0].shape
    window = [(m - 1) * s + 1 if m else 0 for s, m in zip(stride, out)]
    y = body.emit(DYNAMIC_SLICE, x, *_starts(body, counter, first, step, loc), slice_sizes=tuple(window), loc=loc)
    if any(s != 1 for s in stride):
        y = body.emit(SLICE, y, start=(0,) * len(window), limit=tuple(window), stride=tuple(stride), loc=loc)
    return y


def _starts(body, counter, first, step, loc) -> list:
    """int64 scalars first[d] + counter*step[d]."""
    out = []
    for c0, d in zip(first, step):
        at = body.emit(CONSTANT, value=np.asarray(c0, np.int64), loc=loc)
        if d:
            dj = body.emit(MULTIPLY, counter, body.emit(CONSTANT, value=np.asarray(d, np.int64), loc=loc), loc=loc)
            at = body.emit(ADD, at, dj, loc=loc)
        out.append(at)
    return out


def _result(ops, i, idx):
    return ops[i].results[idx]
