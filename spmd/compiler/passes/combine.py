"""Combine all-reduces: the many small all_reduce ops of a step (typically one per gradient)
become one all_reduce of their concatenation, as XLA's all-reduce combiner does.

All-reduces over the same mesh axes, with the same reduction and dtype, are grouped
greedily in program order; one joins the group unless its operand depends on the result
of one already in it. The group's operands are flattened and concatenated, reduced once,
and each result is a slice of the reduced buffer (the slices fuse into the kernels that
use them, so they cost nothing). The program is reordered so that everything that does
not depend on the group runs before the combined all_reduce and everything that does
runs after it: the reduction starts when the last gradient is ready. Every rank runs the
same pass on the same program, so the collectives stay in the same order on all ranks.
"""
from __future__ import annotations

from ...ir import Graph, Op, Value

MAX_ROUNDS = 8


def combine_collectives(graph: Graph) -> Graph:
    made = set()
    for _ in range(MAX_ROUNDS):
        changed = False
        keys = []
        for op in graph.ops:
            if op.opdef.combinable and op not in made:
                k = _key(op)
                if k not in keys:
                    keys.append(k)
        for k in keys:
            bucket, taint = _bucket(graph, k, made)
            if len(bucket) >= 2:
                graph, new = _apply(graph, bucket, taint)
                made.add(new)
                changed = True
        if not changed:
            break
    return graph


def _key(op):
    return (op.name, tuple(sorted(op.attrs.items())), op.operands[0].dtype)


def _bucket(graph, key, made):
    bucket, taint = [], set()
    for op in graph.ops:
        if (op.opdef.combinable and op not in made and _key(op) == key
                and op.operands[0] not in taint):
            bucket.append(op)
            taint.add(op.result)
            continue
        if any(o in taint for o in op.operands):
            taint.update(op.results)
    return bucket, taint


def _apply(graph, bucket, taint):
    members = set(bucket)
    g = Graph(graph.name)
    g.mesh = graph.mesh
    vmap = {}
    for v in graph.inputs:
        vmap[v] = g.add_input(v.shape, v.dtype, v.sharding)

    def copy(op):
        new = Op(op.name, [vmap[o] for o in op.operands], dict(op.attrs), [], op.loc)
        new.results = tuple(Value(r.shape, r.dtype, new, i, r.sharding) for i, r in enumerate(op.results))
        g.ops.append(new)
        vmap.update(zip(op.results, new.results))

    after = []
    for op in graph.ops:
        if op in members:
            continue
        if any(r in taint for r in op.results):
            after.append(op)
        else:
            copy(op)
    a = bucket[0].attrs
    loc = bucket[-1].loc
    flat = [g.emit("reshape", vmap[m.operands[0]], shape=(m.operands[0].size,), loc=loc) for m in bucket]
    red = g.emit(bucket[0].name, g.emit("concatenate", *flat, dimension=0, loc=loc), loc=loc, **a)
    off = 0
    for m in bucket:
        n = m.result.size
        s = g.emit("slice", red, start=(off,), limit=(off + n,), stride=(1,), loc=m.loc)
        vmap[m.result] = g.emit("reshape", s, shape=m.result.shape, loc=m.loc)
        off += n
    for op in after:
        copy(op)
    g.outputs = [vmap[v] for v in graph.outputs]
    return g, red.producer
