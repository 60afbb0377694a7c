"""Move each exchange (OpDef `exchange`: collective_permute) down to right before the
first op that reads it, past the ops in between that neither read it nor communicate.

A 2-D halo exchange comes out of the partitioner as "make the column halo, send it,
make the other, send it": after this pass the ops making the halos run first and the
exchanges stand together, so a backend that sends before it waits (the local runtime's
native permutes, backends/llvm/reorder.py) has both messages on their way before it
waits for either, and the memory plan, made in this order, keeps each exchange's
operand alive until the exchange (so a send may move earlier again, never later).

Exchanges keep their order among themselves and with every other collective, effect
and loop (every rank runs the same program in the same order); the ops computing
values keep theirs, so the results are the same bits.
"""
from __future__ import annotations

from ...ir import Graph
from .rewrite import in_order


def _barrier(op) -> bool:
    d = op.opdef
    return d.needs_comm or d.effect or bool(d.subgraphs)


def exchanges_late(graph: Graph) -> Graph:
    ops = list(graph.ops)
    if not any(op.opdef.collective.exchange for op in ops):
        return graph
    changed = False
    for i in range(len(ops) - 1, -1, -1):
        op = ops[i]
        if not op.opdef.collective.exchange:
            continue
        made = set(op.results)
        j = i
        while j + 1 < len(ops) and not _barrier(ops[j + 1]) and not made.intersection(ops[j + 1].operands):
            j += 1
        if j != i:
            ops[i:j + 1] = ops[i + 1:j + 1] + [op]
            changed = True
    return in_order(graph, ops) if changed else graph
