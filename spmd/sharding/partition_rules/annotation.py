"""Partition rule of sharding_constraint (ir/ops/annotation.py), spmd.shard in traced code."""
from __future__ import annotations

from ...ir import Op
from .partition_context import PartitionContext


def _sharding_constraint(ctx: PartitionContext, op: Op):
    """A reshard of the operand to the sharding the annotation pins."""
    target = ctx.sharding_of(op.result)
    return ctx.get(op.operands[0], target), target


# op name -> the rule for the whole op
OPS = {
    "sharding_constraint": _sharding_constraint,
}
