"""Common-subexpression elimination: two ops with the same name, operands and attributes
compute the same value; keep the first. Collectives are left alone (they communicate;
merging them is the partitioner's business), as are ops without operands other than
constants (iota is cheap and constants compare by value below)."""
from __future__ import annotations

import numpy as np

from ...ir import Graph
from .rewrite import Rebuild


def _freeze(x):
    if isinstance(x, np.ndarray):
        return ("array", x.dtype.str, x.shape, np.ascontiguousarray(x).tobytes())
    if isinstance(x, (tuple, list)):
        return tuple(_freeze(e) for e in x)
    if isinstance(x, float) and x != x:
        return ("nan",)
    return (type(x).__name__, x)


def cse(graph: Graph) -> Graph:
    rb = Rebuild(graph)
    seen = {}
    changed = False
    for op in graph.ops:
        operands = [rb.value(o) for o in op.operands]
        if op.opdef.needs_comm:
            rb.copy(op, operands)
            continue
        key = (op.name, tuple(id(o) for o in operands),
               tuple(sorted((k, _freeze(v)) for k, v in op.attrs.items())))
        prev = seen.get(key)
        if prev is not None and all(p.shape == r.shape and p.dtype == r.dtype
                                    for p, r in zip(prev.results, op.results)):
            for r, p in zip(op.results, prev.results):
                rb.replace(r, p)
            changed = True
            continue
        seen[key] = rb.copy(op, operands)
    return rb.finish(changed)
