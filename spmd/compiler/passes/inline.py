"""Ops that stand for their body (OpDef `inlined`: spmd.checkpoint's op) replaced by the
body's ops, before propagation: the forward pass is the function as written, and
shardings propagate through it as through any other code. (The op mattered for
differentiation only, which happened while tracing.)"""
from __future__ import annotations

from ...ir import Graph
from .rewrite import Rebuild


def inline_calls(graph: Graph) -> Graph:
    if not any(op.opdef.inlined for op in graph.ops):
        return graph
    rb = Rebuild(graph)
    for op in graph.ops:
        if not op.opdef.inlined:
            rb.copy(op)
            continue
        body = inline_calls(op.attrs[op.opdef.inlined])
        vmap = dict(zip(body.inputs, [rb.value(o) for o in op.operands]))
        for b in body.ops:
            new = rb.copy(b, [vmap[o] for o in b.operands])
            vmap.update(zip(b.results, new.results))
        for r, v in zip(op.results, body.outputs):
            rb.replace(r, vmap[v])
    return rb.finish()
