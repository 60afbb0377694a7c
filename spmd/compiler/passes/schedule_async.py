"""Overlap collectives with computation: split each collective that may run in two halves
(`OpDef.async_pair`: all_reduce -> all_reduce_start + all_reduce_done) and schedule the
start as early and the done as late as the program allows, as XLA's async collective
conversion and latency-hiding scheduler do.

First each splittable collective moves up to right after the ops its operand comes from,
with the ops that only feed it (the partitioner emits a reduction where a use needs it,
and the combiner's bucket, with the concatenation of its members, stands there). Then one walk in that order:

- a splittable collective is *started* where it stands (its operand is ready there), and
  its done is deferred;
- an op that only re-indexes a deferred value (the slices and reshapes the combiner
  cuts a bucket's result into) is deferred with it;
- any other op first emits the deferred values it reads (the done right before its first
  use, then the slices), then itself.

Everything that neither feeds nor reads a collective in flight runs between its start
and its done: in a training step, the rest of the backward pass runs while the first
buckets' gradients are being reduced. A pair with no computation between them (the one
bucket of a small model, an all-reduce used by the very next op) stays one blocking
all_reduce: a split would only cost a second call. So does one with no more than
OVERLAP_WORK elements of computation between them (in train_gpt's backward pass under
Megatron shardings, each model-axis all-reduce had only a bias gradient's small
reduction to overlap): under MPI a split is two calls from Python and a break in the
native run (a rank's CPU: ~0.1 ms), more than such work takes.

Every rank runs this pass on the same program, so every rank starts its collectives in
the same order (MPI requires it of nonblocking collectives) and the program stays one
program for all devices. The done reads the collective's operand too, which keeps that
buffer alive (not freed, not reused by the memory plan) while the collective is in flight.
"""
from __future__ import annotations

import heapq

from ...ir import Graph, Op, Value, get_op
from .settings import count

# the computation (elements an op reads or writes, summed over the ops between a start
# and its done) a collective is split around only beyond: tens of microseconds of work.
# SPMD_OVERLAP_WORK overrides it (0: any computation between)
OVERLAP_WORK = 1 << 16


def overlap_work() -> int:
    return count("SPMD_OVERLAP_WORK", OVERLAP_WORK, "elements", "split around any computation")


def schedule_async(graph: Graph) -> Graph:
    if not any(op.opdef.collective.async_pair for op in graph.ops):
        return graph
    items, overlapped = async_order(graph, earliest_first(graph))
    if not any(overlapped.values()):
        return graph
    return rebuild(graph, items, overlapped)


def earliest_first(graph: Graph) -> list:
    """graph's ops with each collective that may run in halves moved up to right after
    the ops its operands come from: it starts as soon as its data is ready (the rest keep
    their order). Every rank computes the same order."""
    index = {op: i for i, op in enumerate(graph.ops)}
    waiting = {op: sum(1 for o in set(op.operands) if o.producer is not None) for op in graph.ops}
    users = {}
    for op in graph.ops:
        for o in set(op.operands):
            if o.producer is not None:
                users.setdefault(o.producer, []).append(op)
    early = feeders(graph, users)
    # the ops that need a collective's result wait for the collectives in the order they
    # start: an op needing only the first bucket runs before one needing the last (an
    # optimizer updates the parameters of the buckets reduced first while the last flies)
    needs, n = {}, 0
    for op in graph.ops:
        if op.opdef.collective.async_pair:
            n += 1
            needs[op] = n
        else:
            needs[op] = max((needs[o.producer] for o in op.operands if o.producer is not None), default=0)

    def key(op):
        return (0, 0, index[op], op) if op in early else (1, needs[op], index[op], op)

    ready = [key(op) for op in graph.ops if waiting[op] == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        op = heapq.heappop(ready)[-1]
        order.append(op)
        for u in users.get(op, ()):
            waiting[u] -= 1
            if waiting[u] == 0:
                heapq.heappush(ready, key(u))
    return order


def feeders(graph: Graph, users) -> set:
    """The collectives that may run in halves, and the ops that only feed them: the
    flattening and concatenation of a bucket's gradients (combine.py) stand right before
    the bucket, where its first use needed it, and must move up with it, or the bucket
    starts no earlier."""
    outputs = {v.producer for v in graph.outputs}
    early = set()
    for op in reversed(graph.ops):
        if op.opdef.collective.async_pair:
            early.add(op)
        elif op not in outputs and users.get(op) and all(u in early for u in users[op]):
            early.add(op)
    return early


def async_order(graph: Graph, ops):
    """The walk over `ops` (graph's ops in a valid order): ([("op" | "start" | "done", op)]
    in the new order, {split collective: did computation run between its start and its
    done})."""
    items = []
    deferred = set()        # ops not emitted yet: collectives in flight, re-indexes of them
    started_at = {}         # split collective -> how much computation had run at its start
    overlapped = {}
    ran = 0
    limit = overlap_work()

    def need(v):
        p = v.producer
        if p is None or p not in deferred:
            return
        deferred.discard(p)
        if p.opdef.collective.async_pair:
            overlapped[p] = ran - started_at[p] > limit
            items.append(("done", p))
            return
        for o in p.operands:
            need(o)
        items.append(("op", p))

    for op in ops:
        if op.opdef.collective.async_pair:
            for o in op.operands:
                need(o)
            items.append(("start", op))
            started_at[op] = ran
            deferred.add(op)
        elif op.opdef.fusion == "reindex" and any(o.producer in deferred for o in op.operands):
            deferred.add(op)
        else:
            for o in op.operands:
                need(o)
            items.append(("op", op))
            if op.operands and op.opdef.fusion != "reindex":
                # (constants, broadcasts and views cost nothing to overlap)
                # a loop or branch is taken to be enough (its operands do not say its work)
                ran += limit + 1 if op.opdef.subgraphs else \
                    max(max(v.size for v in op.operands), max((v.size for v in op.results), default=0))
    for v in graph.outputs:
        need(v)
    for op in graph.ops:            # (a collective nobody reads still runs, on every rank)
        if op in deferred:
            need(op.results[0])
    return items, overlapped


def rebuild(graph: Graph, items, overlapped) -> Graph:
    """The program in the walk's order, each overlapped collective as its two halves."""
    g = Graph(graph.name)
    g.mesh = graph.mesh
    vmap = {v: g.add_input(v.shape, v.dtype, v.sharding) for v in graph.inputs}
    handle = {}

    def copy(op):
        new = Op(op.name, [vmap[o] for o in op.operands], dict(op.attrs), [], op.loc)
        new.results = tuple(Value(r.shape, r.dtype, new, i, r.sharding) for i, r in enumerate(op.results))
        g.ops.append(new)
        vmap.update(zip(op.results, new.results))

    for kind, op in items:
        if kind == "op":
            copy(op)
        elif not overlapped[op]:
            if kind == "done":           # nothing to overlap: one blocking call where it is needed
                copy(op)
        elif kind == "start":
            start, _ = op.opdef.collective.async_pair
            handle[op] = g.emit(start, *[vmap[o] for o in op.operands], loc=op.loc, **op.attrs)
        else:
            _, done = op.opdef.collective.async_pair
            assert get_op(done).collective.phase == "done"
            out = g.emit(done, handle[op], *[vmap[o] for o in op.operands], loc=op.loc, **op.attrs)
            vmap[op.result] = out
            out.sharding = op.result.sharding
    g.outputs = [vmap[v] for v in graph.outputs]
    return g
