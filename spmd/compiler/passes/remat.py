"""Rematerialisation: compute a value again where it is needed later, instead of holding
it in memory until then.

`rematerialize(graph, where)` takes, for each value to recompute, the positions (indices
of ops of `graph`) before which it is made again. From such a position on (until the
next one listed for the value), the ops read the new copy; before it, the original. The
original dies after its last read before the first position, so its buffer is free in
between. A copy is its producer emitted again on its operands as they are at that point
(their own copies, when they are recomputed at the same position: a chain is recomputed
in program order). Collectives recomputed this way run again on every rank alike (every
rank runs this pass on the same program).

What to recompute is decided by the callers: passes/regather.py (values made from the
arguments alone, as FSDP gathers parameters again), and the budget search of
`spmd.jit(memory_limit=...)` (jit/jitted.py, passes/budget.py).
"""
from __future__ import annotations

from bisect import bisect_right

import numpy as np

from ...ir import Graph, Op, Value
from ...ir.ops.registry import op_flops
from .rewrite import Rebuild


def rematerialize(graph: Graph, where: dict) -> Graph:
    """`where`: Value -> positions (op indices) before which it is computed again."""
    where = {v: sorted(set(ps)) for v, ps in where.items() if ps and v.producer is not None}
    if not where:
        return graph
    index = {op: i for i, op in enumerate(graph.ops)}
    at = {}                                   # position -> values recomputed there, in program order
    for v, ps in where.items():
        for p in ps:
            at.setdefault(p, []).append(v)
    for p in at:
        at[p].sort(key=lambda v: index[v.producer])
    rb = Rebuild(graph)
    copies = {}                               # (value, position) -> its copy in the new graph

    def current(v, q):
        """What the op at position q reads for v: the copy made at the last position <= q."""
        ps = where.get(v)
        if ps:
            i = bisect_right(ps, q)
            if i:
                return copies[(v, ps[i - 1])]
        return rb.value(v)

    for q, op in enumerate(graph.ops):
        for v in at.get(q, ()):
            copies[(v, q)] = _again(rb.g, v.producer, [current(o, q) for o in v.producer.operands])[v.index]
        rb.copy(op, [current(o, q) for o in op.operands])
    # an output reads the value as it is at the end
    rb.g.outputs = [current(v, len(graph.ops)) for v in graph.outputs]
    return rb.g


def _again(g, op, operands):
    """op emitted once more into g on `operands` (its results keep their shardings)."""
    new = Op(op.name, operands, dict(op.attrs), [], op.loc)
    new.results = tuple(Value(r.shape, r.dtype, new, i, r.sharding) for i, r in enumerate(op.results))
    g.ops.append(new)
    return new.results


# -- where values are, and what it takes to have one again -------------------------------
MAX_CHAIN = 8
MAX_DEEP = 400          # ops a segment's recomputation may reach back through


def nbytes(v) -> int:
    return int(v.size) * np.dtype(v.dtype).itemsize


def flops(op) -> float:
    """What recomputing `op` costs (registry.op_flops; an op without a flops rule, one
    per element of its results)."""
    return op_flops(op) if op.opdef.flops is not None else float(sum(r.size for r in op.results))


def cheap(op) -> bool:
    """One pass over its elements: an elementwise op or a re-index (fused into whatever
    reads it), or a collective (communication again, no computation)."""
    return op.opdef.needs_comm or op.opdef.fusion in ("elementwise", "reindex")


def recomputable(op) -> bool:
    """Can `op` be emitted again? Not a half of a started collective (passes/
    schedule_async.py): a done made again reads a start made again, and the first start
    would be left in flight, finished by no one."""
    return op is not None and len(op.results) == 1 and not op.opdef.subgraphs and op.operands != () \
        and op.opdef.identity_of is None and op.opdef.collective.phase is None


class Uses:
    """Where each value of the program is read (op positions; outputs read at the end)."""

    def __init__(self, graph):
        self.index = {op: i for i, op in enumerate(graph.ops)}
        self.at = {}
        for q, op in enumerate(graph.ops):
            for o in op.operands:
                self.at.setdefault(o, []).append(q)
        for v in graph.outputs:
            self.at.setdefault(v, []).append(len(graph.ops))
        self.inputs = set(graph.inputs)
        self._constant = {}

    def first_after(self, v, p):
        later = [q for q in self.at.get(v, ()) if q > p]
        return min(later) if later else None

    def there(self, v, p) -> bool:
        """Is v at hand at position p anyway (an argument, a constant or a broadcast of one,
        or read at p or later)?"""
        return v in self.inputs or self.constant(v) or any(q >= p for q in self.at.get(v, ()))

    def constant(self, v) -> bool:
        """Made from no data: a constant, an iota, or elementwise ops and re-indexes of them."""
        op = v.producer
        if op is None:
            return False
        if not op.operands:
            return True
        if op.opdef.fusion not in ("elementwise", "reindex"):
            return False
        known = self._constant.get(v)
        if known is None:
            known = self._constant[v] = all(self.constant(o) for o in op.operands)
        return known


def chain(v, p, uses, avoid=frozenset(), depth=0, comm=True, deep=False, memo=None):
    """The values to recompute at p to have v again there (v last), or None. Values in
    `avoid` (themselves made again where read late) are recomputed, not read, where
    they can be. `comm=False`: a collective's result is held, not communicated again.
    `deep`: any op may be recomputed on the way (a segment of layers, matmuls and all),
    not only cheap ones."""
    memo = {} if memo is None else memo      # (a residual reaches a value twice: walked once)
    if v in memo:
        return memo[v]
    op = v.producer
    limit = MAX_DEEP if deep else MAX_CHAIN
    if not recomputable(op) or depth > limit or (depth and not deep and not cheap(op)):
        memo[v] = None
        return None
    out = []
    for o in op.operands:
        if uses.constant(o) or (uses.there(o, p) and o not in avoid) or o in out:
            continue
        if not comm and o.producer is not None and o.producer.opdef.needs_comm:
            continue
        sub = chain(o, p, uses, avoid, depth + 1, comm, deep, memo)
        if sub is None:
            if uses.there(o, p):        # (one that cannot be made again is held anyway)
                continue
            memo[v] = None
            return None
        out += [s for s in sub if s not in out]
    memo[v] = out + [v]
    return memo[v]
