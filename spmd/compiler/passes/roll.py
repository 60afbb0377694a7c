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
from ...ir.ops.names import BROADCAST_IN_DIM, CONSTANT, SCAN
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
    at = defaultdict(list)                    # signature -> positions, ascending
    for i, s in enumerate(sigs):
        at[s].append(i)
    nth = {}                                  # position -> its index in at[sig]
    for s, ps in at.items():
        for j, p in enumerate(ps):
            nth[p] = j
    pos = {op: i for i, op in enumerate(ops)}
    used_after = _last_uses(graph, pos)
    loops, k = [], 0
    while k < len(ops):
        best = None
        ps = at[sigs[k]]
        for q in ps[nth[k] + 1: nth[k] + 1 + NEAREST]:
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


def _signatures(ops) -> list:
    """One number per op, equal for two ops when they may be the same line of the same
    loop body: the same name, user line, attributes, result types and operand count
    (operands are compared separately, by position). Numbers, so that comparing blocks
    of ops is comparing lists of ints."""
    memo, ids = {}, {}
    out = []
    for op in ops:
        sig = (op.name, op.loc, _attrs_key(op.attrs, memo), tuple([(r.shape, r.dtype) for r in op.results]),
               len(op.operands))
        out.append(ids.setdefault(sig, len(ids)))
    return out


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
    def __init__(self, start, period, reps, carries, inits, captured):
        self.start, self.period, self.reps = start, period, reps
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
    return _Loop(k, period, reps, carries, [inits.get(slot) for slot in carries], captured)


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
    captured_in = [body.add_input(v.shape, v.dtype) for v in loop.captured]
    bmap = {}
    for op in ops[b:b + loop.period]:
        operands = []
        for o in op.operands:
            p = pos[o.producer] if o.producer is not None else -1
            if p >= b:
                operands.append(bmap[o])
            elif p >= loop.start:
                operands.append(carry_in[slot_of[(p - loop.start, o.index)]])
            else:
                operands.append(captured_in[captured_at[id(o)]])
        new = Op(op.name, operands, dict(op.attrs), [], op.loc)
        new.results = tuple(Value(r.shape, r.dtype, new, j) for j, r in enumerate(op.results))
        body.ops.append(new)
        for r, nr in zip(op.results, new.results):
            bmap[r] = nr
    body.outputs = [bmap[_result(ops, b + off, idx)] for off, idx in loop.carries]
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
    out = g.emit(SCAN, *inits, *[vmap[v] for v in loop.captured], body=body, num_carry=len(loop.carries),
                 num_xs=0, length=loop.reps, reverse=False, loc=loc)
    last = loop.start + (loop.reps - 1) * loop.period
    for (off, idx), res in zip(loop.carries, out if isinstance(out, tuple) else (out,)):
        vmap[_result(ops, last + off, idx)] = res


def _result(ops, i, idx):
    return ops[i].results[idx]
