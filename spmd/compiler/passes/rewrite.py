"""The one helper the rewriting passes share: rebuild a graph op by op, letting a rule
replace each op's result with an existing or newly emitted value."""
from __future__ import annotations

from ...ir import Graph, Op, Value


class Rebuild:
    """`new.value(old)` maps a value of the old graph to the new one; `copy(op)` appends
    op with mapped operands; `emit(...)` appends a new op (located at `loc`)."""

    def __init__(self, graph: Graph):
        self.old = graph
        self.g = Graph(graph.name)
        self.g.mesh = graph.mesh
        self.vmap = {}
        for v in graph.inputs:
            self.vmap[v] = self.g.add_input(v.shape, v.dtype, v.sharding)

    def value(self, v):
        return self.vmap[v]

    def copy(self, op, operands=None):
        operands = [self.vmap[o] for o in op.operands] if operands is None else operands
        new = Op(op.name, operands, dict(op.attrs), [], op.loc)
        new.results = tuple(Value(r.shape, r.dtype, new, i, r.sharding) for i, r in enumerate(op.results))
        self.g.ops.append(new)
        for r, nr in zip(op.results, new.results):
            self.vmap[r] = nr
        return new

    def emit(self, name, *operands, loc=None, sharding=None, **attrs):
        v = self.g.emit(name, *operands, loc=loc, **attrs)
        if sharding is not None and isinstance(v, Value):
            v.sharding = sharding
        return v

    def replace(self, old: Value, new: Value):
        assert old.shape == new.shape and old.dtype == new.dtype, (old, new)
        self.vmap[old] = new

    def finish(self, changed=True) -> Graph:
        if not changed:
            return self.old
        self.g.outputs = [self.vmap[v] for v in self.old.outputs]
        return self.g


def in_order(graph: Graph, ops) -> Graph:
    """graph with its ops in the order of `ops` (the same ops, every one after the ops
    whose results it reads), for the passes that only move ops."""
    rb = Rebuild(graph)
    for op in ops:
        rb.copy(op)
    return rb.finish()
