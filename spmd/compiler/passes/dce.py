"""Dead-code elimination: drop ops whose results no output needs, unless the op is run
for its effect (OpDef.effect: a debug print). (Every rank runs the same program, so a
collective nobody uses is dropped on all ranks alike: no deadlock.)"""
from ...ir import Graph, clone


def dce(graph: Graph) -> Graph:
    live = set(graph.outputs)
    keep = []
    for op in reversed(graph.ops):
        if op.opdef.effect or any(r in live for r in op.results):
            keep.append(op)
            live.update(op.operands)
    if len(keep) == len(graph.ops):
        return graph
    g = Graph(graph.name)
    g.mesh, g.inputs, g.outputs, g.ops = graph.mesh, list(graph.inputs), list(graph.outputs), keep[::-1]
    return clone(g)[0]
