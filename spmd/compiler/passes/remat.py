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
`spmd.jit(memory_limit=...)` (staging.py, passes/budget.py).
"""
from __future__ import annotations

from bisect import bisect_right

from ...ir import Graph, Op, Value
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
