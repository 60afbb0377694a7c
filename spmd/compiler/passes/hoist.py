"""Loop-invariant code motion: work in a loop body that reads only values the loop
captured (not its carries, not the scanned slices) computes the same value every
iteration, so it moves out of the loop and runs once; the body reads the result as one
more captured value. In a per-device program that includes collectives: a halo exchange
of an array the loop only reads happens once, not once per sweep.

Ops that only re-index (slices, broadcasts, transposes), and index arithmetic on
constants, iotas and the device's coordinates (masks), stay in the body: they cost
nothing inside a fused kernel and would cost a buffer outside. They move out only with
the work that reads them. Every rank runs the same loops, so moving a
collective out of one moves it on every rank alike; a while loop that runs no iteration
computes its hoisted values for nothing, which costs time but changes no result.
"""
from __future__ import annotations

from ...ir import Graph, Op, Value
from .dce import dce
from .rewrite import Rebuild

def hoist_invariants(graph: Graph) -> Graph:
    if not any(op.opdef.captured_from for op in graph.ops):
        return graph
    rb = Rebuild(graph)
    changed = False
    for op in graph.ops:
        operands = [rb.value(o) for o in op.operands]
        new = _hoisted(rb, op, operands) if op.opdef.captured_from else None
        if new is None:
            rb.copy(op, operands)
        else:
            changed = True
    return rb.finish(changed)


def _hoisted(rb, op, operands):
    """Emit `op` with its body's invariant work moved before it; None if there is none."""
    first = op.opdef.captured_from(op.attrs)
    body = op.attrs["body"]
    body = hoist_invariants(body)                     # inner loops first
    invariant = _invariant_ops(body, first)
    worth = [b for b in body.ops if b in invariant and _is_work(b, invariant)]
    if not worth:
        if body is op.attrs["body"]:
            return None
        return _emit(rb, op, operands, dict(op.attrs, body=body))
    # 1. the hoisted ops and what they read, emitted before the loop
    outside = dict(zip(body.inputs[first:], operands[first:]))
    needed = _ancestors(worth, invariant)
    for b in body.ops:
        if b in needed:
            out = rb.emit(b.name, *[outside[o] for o in b.operands], loc=b.loc, **b.attrs)
            for r, nr in zip(b.results, out if isinstance(out, tuple) else (out,)):
                nr.sharding = r.sharding
                outside[r] = nr
    # 2. the body reads their results as new captured inputs
    results = [r for b in worth for r in b.results if _used_by_others(r, body, set(worth))]
    attrs = {k: _with_inputs(op.attrs[k], results, keep=False) for k in op.opdef.subgraphs if k != "body"}
    attrs = dict(op.attrs, **attrs, body=_with_inputs(body, results))
    return _emit(rb, op, list(operands) + [outside[r] for r in results], attrs)


def _invariant_ops(body, first) -> dict:
    """Invariant op -> does it read captured data (not only constants, iotas and the
    device's coordinates, which a fused kernel computes for free)?"""
    captured = set(body.inputs[first:])
    carried = set(body.inputs[:first])
    reads, ops = {v: True for v in captured}, {}
    for b in body.ops:
        if not b.opdef.effect and not any(o in carried for o in b.operands) and all(o in reads for o in b.operands):
            ops[b] = any(reads[o] for o in b.operands)
            reads.update((r, ops[b]) for r in b.results)
    return ops


def _is_work(op, invariant) -> bool:
    """Worth a buffer outside the loop: it reads captured data and is not a pure re-index."""
    return invariant[op] and op.opdef.fusion != "reindex"


def _ancestors(worth, invariant) -> set:
    out, stack = set(), list(worth)
    while stack:
        b = stack.pop()
        if b in out:
            continue
        out.add(b)
        stack.extend(o.producer for o in b.operands if o.producer is not None and o.producer in invariant)
    return out


def _used_by_others(r, body, hoisted) -> bool:
    return r in body.outputs or any(r in b.operands for b in body.ops if b not in hoisted)


def _with_inputs(body, results, keep=True) -> Graph:
    """A copy of `body` with one more input per hoisted result; with keep, uses of the
    hoisted results read those inputs (and the ops that made them are dropped)."""
    g = Graph(body.name)
    g.mesh = body.mesh
    vmap = {v: g.add_input(v.shape, v.dtype, v.sharding) for v in body.inputs}
    extra = {r: g.add_input(r.shape, r.dtype, r.sharding) for r in results}
    if keep:
        vmap.update(extra)
    for b in body.ops:
        if keep and all(r in extra for r in b.results):
            continue
        new = Op(b.name, [vmap[o] for o in b.operands], dict(b.attrs), [], b.loc)
        new.results = tuple(Value(r.shape, r.dtype, new, i, r.sharding) for i, r in enumerate(b.results))
        g.ops.append(new)
        vmap.update(zip(b.results, new.results))
    g.outputs = [vmap[v] for v in body.outputs]
    return dce(g)


def _emit(rb, op, operands, attrs):
    new = Op(op.name, operands, attrs, [], op.loc)
    new.results = tuple(Value(r.shape, r.dtype, new, i, r.sharding) for i, r in enumerate(op.results))
    rb.g.ops.append(new)
    for r, nr in zip(op.results, new.results):
        rb.vmap[r] = nr
    return new
