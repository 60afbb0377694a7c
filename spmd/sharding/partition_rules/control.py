"""Partition rules of structured control flow (ir/ops/control.py): reshard the operands
to the shardings propagation gave the results (a loop carry keeps one sharding, a
predicate is replicated, a scanned dim is not split), then propagate and partition each
sub-graph with those shardings pinned at its inputs and outputs (ctx.lower_subgraph), so
every device runs the same loop."""
from __future__ import annotations

from ...ir import Op
from ...ir.ops.names import COND, SCAN, WHILE
from .partition_context import PartitionContext


def _tuple(out):
    return out if isinstance(out, tuple) else (out,)


def _while(ctx: PartitionContext, op: Op):
    n = op.attrs["num_carry"]
    shs = [ctx.sharding_of(r).replace(partial=()) for r in op.results]
    ins = shs + [ctx.sharding_of(o).replace(partial=()) for o in op.operands[n:]]
    locs = [ctx.get(o, s) for o, s in zip(op.operands, ins)]
    cond = ctx.lower_subgraph(op.attrs["cond"], ins, [ctx.sh(())])
    body = ctx.lower_subgraph(op.attrs["body"], ins, shs)
    outs = ctx.em.emit(WHILE, *locs, cond=cond, body=body, num_carry=n)
    return [(o, s) for o, s in zip(_tuple(outs), shs)]


def _cond(ctx: PartitionContext, op: Op):
    shs = [ctx.sharding_of(r).replace(partial=()) for r in op.results]
    ins = [ctx.sharding_of(o).replace(partial=()) for o in op.operands[1:]]
    pred = ctx.get(op.operands[0], ctx.sh(()))               # replicated: one collective at most
    locs = [ctx.get(o, s) for o, s in zip(op.operands[1:], ins)]
    true = ctx.lower_subgraph(op.attrs["true"], ins, shs)
    false = ctx.lower_subgraph(op.attrs["false"], ins, shs)
    outs = ctx.em.emit(COND, pred, *locs, true=true, false=false)
    return [(o, s) for o, s in zip(_tuple(outs), shs)]


def _scan(ctx: PartitionContext, op: Op):
    a = op.attrs
    nc, nx = a["num_carry"], a["num_xs"]
    shs = [ctx.sharding_of(r).replace(partial=()) for r in op.results]
    ins = shs[:nc] + [ctx.sharding_of(o).replace(partial=()) for o in op.operands[nc:]]
    ins = ins[:nc] + [_lead_replicated(ctx, s, o) for s, o in zip(ins[nc:nc + nx], op.operands[nc:nc + nx])] \
        + ins[nc + nx:]
    shs = shs[:nc] + [_lead_replicated(ctx, s, r) for s, r in zip(shs[nc:], op.results[nc:])]
    locs = [ctx.get(o, s) for o, s in zip(op.operands, ins)]
    body_in = ins[:nc] + [_drop_lead(ctx, s) for s in ins[nc:nc + nx]] + ins[nc + nx:]
    body_out = shs[:nc] + [_drop_lead(ctx, s) for s in shs[nc:]]
    body = ctx.lower_subgraph(a["body"], body_in, body_out)
    outs = ctx.em.emit(SCAN, *locs, body=body, num_carry=nc, num_xs=nx, length=a["length"],
                       reverse=a["reverse"])
    return [(o, s) for o, s in zip(_tuple(outs), shs)]


def _lead_replicated(ctx, s, v):
    spec = tuple(s.for_rank(v.ndim).spec)
    return ctx.sh((None,) + spec[1:])


def _drop_lead(ctx, s):
    return ctx.sh(tuple(s.spec[1:]))


# op name -> the rule for the whole op
OPS = {
    "while": _while,
    "cond": _cond,
    "scan": _scan,
}
