"""Run a pass on loop bodies and branches too: `in_bodies(simplify)` simplifies every
sub-graph (inner ones first), then the graph itself. A body keeps its inputs and outputs,
so the op that holds it is unchanged but for the body."""
from __future__ import annotations

import functools

from ...ir import Graph, Op, Value


def in_bodies(pass_fn):
    @functools.wraps(pass_fn)
    def run(graph: Graph) -> Graph:
        return pass_fn(_with_bodies(graph, run))
    return run


def _with_bodies(graph: Graph, run) -> Graph:
    if not any(op.opdef.subgraphs for op in graph.ops):
        return graph
    new_attrs = {}
    for op in graph.ops:
        changed = {k: run(op.attrs[k]) for k in op.opdef.subgraphs}
        changed = {k: b for k, b in changed.items() if b is not op.attrs[k]}
        if changed:
            new_attrs[op] = dict(op.attrs, **changed)
    if not new_attrs:
        return graph
    g = Graph(graph.name)
    g.mesh = graph.mesh
    vmap = {v: g.add_input(v.shape, v.dtype, v.sharding) for v in graph.inputs}
    for op in graph.ops:
        new = Op(op.name, [vmap[o] for o in op.operands], new_attrs.get(op, dict(op.attrs)), [], op.loc)
        new.results = tuple(Value(r.shape, r.dtype, new, i, r.sharding) for i, r in enumerate(op.results))
        g.ops.append(new)
        vmap.update(zip(op.results, new.results))
    g.outputs = [vmap[v] for v in graph.outputs]
    return g
