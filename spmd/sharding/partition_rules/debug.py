"""Partition rule of debug_print (ir/ops/debug.py)."""
from __future__ import annotations

from ...ir import Op
from .partition_context import PartitionContext


def _debug_print(ctx: PartitionContext, op: Op):
    """Every value whole on every device (the collectives a reshard to replicated
    needs): what is printed is the global value, on any mesh."""
    whole = [ctx.get(o, ctx.sh(((),) * o.ndim)) for o in op.operands]
    return ctx.em.emit(op.name, *whole, **op.attrs), ctx.sh(())


# op name -> the rule for the whole op
OPS = {
    "debug_print": _debug_print,
}
