"""Parameters gathered again before each use, not held between uses (FSDP, ZeRO-3).

A weight split over the data axis (`mesh.sharding("data", None)`) is all-gathered where a
matmul needs it whole; the forward pass and the backward pass both read the gathered
copy, so without this pass it would stay alive from the forward use to the backward one,
with every other layer's gathered weight: the whole model, gathered, at the peak. Here a
value made from the arguments alone by a cheap op (a collective such as that all_gather,
or an elementwise op or re-index: no more work than its size) is made again before a
later use when another such value is made in between; the copy before it dies after its
last use before that. When nothing else of the kind is made in between (the last layer's
weight, read by its forward and at once by its backward), it is kept: gathering it again
would free no memory another gathered weight could use.

The gradient of such a weight is reduce-scattered by the partitioner (the sum over the
batch, kept split as the weight is), and the optimizer's update runs on the shard.
Values smaller than MIN_BYTES are left alone.
"""
from __future__ import annotations

import numpy as np

from ...ir import Graph
from ...ir.ops.registry import op_flops
from .remat import rematerialize

MIN_BYTES = 1 << 16


def regather(graph: Graph) -> Graph:
    inputs = set(graph.inputs)
    made = [i for i, op in enumerate(graph.ops) if _from_arguments(op, inputs)]
    if len(made) < 2:
        return graph
    uses = {}
    for q, op in enumerate(graph.ops):
        for o in set(op.operands):
            uses.setdefault(o, []).append(q)
    where = {}
    for i in made:
        v = graph.ops[i].result
        again = [q for prev, q in zip(uses.get(v, []), uses.get(v, [])[1:]) if _any_between(made, prev, q)]
        if again:
            where[v] = again
    return rematerialize(graph, where)


def _from_arguments(op, inputs) -> bool:
    """A single-result op on program arguments alone, cheap to run again, worth freeing."""
    if len(op.results) != 1 or not op.operands or not all(o in inputs for o in op.operands):
        return False
    r = op.result
    if _nbytes(r) < MIN_BYTES or op.opdef.subgraphs:
        return False
    if op.opdef.needs_comm:
        return True
    return op.opdef.flops is not None and op_flops(op) <= 4 * r.size


def _nbytes(v) -> int:
    return int(v.size) * np.dtype(v.dtype).itemsize


def _any_between(positions, lo, hi) -> bool:
    return any(lo < p < hi for p in positions)
