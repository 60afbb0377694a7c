"""Element reads of one array batched into one gather (a per-point Python loop's u[i, j]).

A Python loop that reads an array one element at a time (`u[i - 1, j] + u[i + 1, j]`)
traces a one-element static slice per read. Split over a mesh, each such slice is a
collective of its own (an all_gather per split dim for one number): thousands of tiny
collectives and ops to partition, fuse and place. Here, before propagation, the reads of
one value are taken together: the box of the rows, columns, ... they touch is gathered
once (a gather of the touched indices along each dim, narrowest first: a split dim's
gather is a local gather and one reduction across the mesh), and each read is a
one-element slice of that small box -- the same element, so the same bits.

Only where it pays and stays small: MIN_READS reads of one value or more, and every
intermediate box at most BOX_LIMIT elements (or BOX_PER_READ per read).
"""
from __future__ import annotations

import numpy as np

from ...ir import Graph
from ...ir.ops.names import CONSTANT, GATHER, SLICE
from .rewrite import Rebuild

MIN_READS = 4
BOX_LIMIT = 4096
BOX_PER_READ = 16


def _is_element_read(op) -> bool:
    return op.name == "slice" and op.result.size == 1 and op.operands[0].size > 1 and \
        all(s == 1 for s in op.attrs["stride"])


def _plan(value, starts):
    """(the dims in gather order, per dim the sorted indices touched) or None when the
    boxes would be large."""
    shape = value.shape
    touched = [sorted({s[d] for s in starts}) for d in range(len(shape))]
    order = sorted(range(len(shape)), key=lambda d: len(touched[d]) / shape[d])
    limit = max(BOX_LIMIT, BOX_PER_READ * len(starts))
    box = list(shape)
    for d in order:
        box[d] = len(touched[d])
        if int(np.prod(box)) > limit:
            return None
    return order, touched


def batch_scalar_reads(graph: Graph) -> Graph:
    reads = {}
    for op in graph.ops:
        if _is_element_read(op):
            reads.setdefault(op.operands[0], []).append(op)
    plans = {}
    for v, ops in reads.items():
        if len(ops) >= MIN_READS:
            p = _plan(v, [op.attrs["start"] for op in ops])
            if p is not None:
                plans[v] = p
    if not plans:
        return graph
    rb = Rebuild(graph)
    boxes = {}
    for op in graph.ops:
        v = op.operands[0] if op.operands else None
        if not _is_element_read(op) or v not in plans:
            rb.copy(op)
            continue
        order, touched = plans[v]
        if v not in boxes:
            box = rb.value(v)
            for d in order:
                idx = rb.emit(CONSTANT, loc=op.loc, value=np.array(touched[d], np.int64))
                box = rb.emit(GATHER, box, idx, loc=op.loc, axis=d)
            boxes[v] = (box, [{i: k for k, i in enumerate(t)} for t in touched])
        box, where = boxes[v]
        start = tuple(where[d][s] for d, s in enumerate(op.attrs["start"]))
        r = rb.emit(SLICE, box, loc=op.loc, start=start, limit=tuple(s + 1 for s in start),
                    stride=(1,) * len(start))
        rb.replace(op.result, r)
    return rb.finish()
