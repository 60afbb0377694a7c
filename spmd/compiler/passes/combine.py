"""Combine all-reduces: the many small all_reduce ops of a step (typically one per gradient)
become a few all_reduces of their concatenations (buckets), as XLA's all-reduce combiner
and PyTorch DDP's gradient buckets do. Halo exchanges combine the same way: the edges of
every array a stencil step reads go to each neighbour in one collective_permute (one
message per neighbour per step), as a hand-written code packs them. (Any collective whose
OpDef is `combinable`; each loop body is combined on its own.)

All-reduces over the same mesh axes, with the same reduction and dtype, are grouped
greedily in program order, which is the order their operands become ready (in a
backward pass, the last layer's gradients first). One joins the open bucket unless its
operand depends on the result of one already in it; the bucket closes when the next
would take it over SPMD_BUCKET_BYTES bytes (a single bigger one makes a bucket of its
own). A bucket's operands are flattened and concatenated, reduced once, and each result
is a slice of the reduced buffer (the slices fuse into the kernels that use them, so
they cost nothing). The combined all_reduce stands where its last member stood: as soon
as the bucket's gradients are ready; what used an earlier member's result before that
point moves after it. passes/schedule_async.py then splits each into a start, placed there,
and a done, placed before the first use, so that the rest of the backward pass runs
while the bucket is reduced. Every rank runs the same passes on the same program, so
the collectives stay in the same order on all ranks.

The bucket size is a trade between overlap and memory. Where the ranks run on several
hosts, the default is 4 MiB: a step's gradients make several buckets and the first
starts while most of the backward pass is still to run. train_gpt at d256 (13 MB of
gradients) on 2 hosts x 2 ranks joined by 1 Gbit/s hides about a third of its
all-reduce with one 25 MiB bucket and about two thirds with 4 MiB ones
(benchmarks/overlap_hosts.py); such a message takes 30 ms there, so the per-call
latency stays a few percent. On one host the all-reduce is a copy through shared
memory, a few milliseconds: there is little to hide, and every bucket in flight holds
its buffers while the backward pass allocates its own (the MLP step of
benchmarks/models.py on 2x2 plans 25 MB of temporaries with 4 MiB buckets, 17 MB
with 25 MiB ones). So on one host the default is 25 MiB, PyTorch DDP's. The MPI runtime
says which applies when it starts (`use_hosts_default`); SPMD_BUCKET_BYTES overrides both.
"""
from __future__ import annotations

from ...ir import Graph, Op, Value
from ...ir.ops.names import CONCATENATE, RESHAPE, SLICE
from .settings import count

DEFAULT_BUCKET_BYTES = 25 << 20        # ranks on one host
HOSTS_BUCKET_BYTES = 4 << 20           # ranks on several hosts
_default = {"bytes": DEFAULT_BUCKET_BYTES}


def use_hosts_default(several_hosts: bool):
    """Set by the runtime: do this process's ranks span several hosts? Every rank of the
    world sees the same hosts, so all compile the same buckets."""
    _default["bytes"] = HOSTS_BUCKET_BYTES if several_hosts else DEFAULT_BUCKET_BYTES


def bucket_bytes() -> int:
    """The bucket size: SPMD_BUCKET_BYTES (bytes), or the default for where the ranks run."""
    return count("SPMD_BUCKET_BYTES", _default["bytes"], "bytes", "every all_reduce on its own")


def combine_collectives(graph: Graph, limit=None) -> Graph:
    limit = bucket_bytes() if limit is None else limit
    graph = as_soon_as_ready(graph)
    done = set()           # all_reduces already in a bucket (or alone in one)
    while True:
        keys = []
        for op in graph.ops:
            if op.opdef.collective.combinable and op not in done:
                k = _key(op)
                if k not in keys:
                    keys.append(k)
        if not keys:
            return graph
        for k in keys:
            bucket, taint = _bucket(graph, k, done, limit)
            if len(bucket) >= 2:
                graph, new, opmap = _apply(graph, bucket, taint)
                done = {opmap[o] for o in done if o in opmap}      # the same ops in the new graph
                done.add(new)
            else:
                done.update(bucket)


def as_soon_as_ready(graph: Graph) -> Graph:
    """graph with each collective that may run in halves (OpDef.async_pair: a gradient's
    all_reduce) moved up to right after the op its operand comes from. The partitioner
    emits a gradient's reduction where its first use needs it (the optimizer's update of
    that parameter, in the order of the parameters), so program order is the order of the
    updates; moved, it is the order the gradients become ready, and a bucket holds
    gradients that are ready together (the last layer's first), not the first layer's
    with the last's."""
    if not any(op.opdef.collective.async_pair for op in graph.ops):
        return graph
    after = {}                      # op -> the collectives that follow it
    for op in graph.ops:
        if op.opdef.collective.async_pair:
            producers = [o.producer for o in op.operands if o.producer is not None]
            after.setdefault(producers[-1] if len(producers) == 1 else _last(graph, producers), []).append(op)
    g = Graph(graph.name)
    g.mesh = graph.mesh
    vmap = {v: g.add_input(v.shape, v.dtype, v.sharding) for v in graph.inputs}

    def copy(op):
        new = Op(op.name, [vmap[o] for o in op.operands], dict(op.attrs), [], op.loc)
        new.results = tuple(Value(r.shape, r.dtype, new, i, r.sharding) for i, r in enumerate(op.results))
        g.ops.append(new)
        vmap.update(zip(op.results, new.results))
        for c in after.get(op, ()):
            copy(c)

    for c in after.get(None, ()):
        copy(c)
    for op in graph.ops:
        if not op.opdef.collective.async_pair:
            copy(op)
    g.outputs = [vmap[v] for v in graph.outputs]
    return g


def _last(graph, producers):
    """The last of `producers` in graph's order (None if there are none)."""
    if not producers:
        return None
    members = set(producers)
    return [op for op in graph.ops if op in members][-1]


def _key(op):
    return (op.name, tuple(sorted(op.attrs.items())), op.operands[0].dtype)


def _nbytes(v):
    import numpy as np
    return v.size * np.dtype(v.dtype).itemsize


def _bucket(graph, key, done, limit):
    """The first bucket of `key`'s all-reduces, in program order, and the values that
    depend on its members' results (up to where the walk stopped)."""
    bucket, taint, size = [], set(), 0
    for op in graph.ops:
        if op.opdef.collective.combinable and op not in done and _key(op) == key and op.operands[0] not in taint:
            n = _nbytes(op.operands[0])
            if bucket and size + n > limit:
                break
            bucket.append(op)
            size += n
            taint.add(op.result)
            continue
        if any(o in taint for o in op.operands):
            taint.update(op.results)
    return bucket, taint


def _apply(graph, bucket, taint):
    """The graph with `bucket` combined into one all_reduce where its last member stood;
    the combined op; old op -> its copy."""
    members = set(bucket)
    g = Graph(graph.name)
    g.mesh = graph.mesh
    vmap, opmap = {}, {}
    for v in graph.inputs:
        vmap[v] = g.add_input(v.shape, v.dtype, v.sharding)

    def copy(op):
        new = Op(op.name, [vmap[o] for o in op.operands], dict(op.attrs), [], op.loc)
        new.results = tuple(Value(r.shape, r.dtype, new, i, r.sharding) for i, r in enumerate(op.results))
        g.ops.append(new)
        vmap.update(zip(op.results, new.results))
        opmap[op] = new

    last = bucket[-1]
    after, red = [], None
    for op in graph.ops:
        if red is None and op is last:
            red = _emit(g, bucket, vmap)
            for a in after:
                copy(a)
            continue
        if op in members:
            continue
        if red is None and any(r in taint for r in op.results):
            after.append(op)            # reads an earlier member's result: after the bucket
        else:
            copy(op)
    g.outputs = [vmap[v] for v in graph.outputs]
    return g, red.producer, opmap


def _emit(g, bucket, vmap):
    a = bucket[0].attrs
    loc = bucket[-1].loc
    flat = [g.emit(RESHAPE, vmap[m.operands[0]], shape=(m.operands[0].size,), loc=loc) for m in bucket]
    red = g.emit(bucket[0].name, g.emit(CONCATENATE, *flat, dimension=0, loc=loc), loc=loc, **a)
    off = 0
    for m in bucket:
        n = m.result.size
        s = g.emit(SLICE, red, start=(off,), limit=(off + n,), stride=(1,), loc=m.loc)
        vmap[m.result] = g.emit(RESHAPE, s, shape=m.result.shape, loc=m.loc)
        off += n
    return red
