"""How the partitioner splits the ops its generic, factor-driven partitioning does not
fit (sharding/partition.py): one module per op family, each with tables keyed by op name.

- `OPS`: op name -> a rule for the whole op, (ctx, op) -> (local result, its Sharding)
  or a list of them, one a result. Control flow, constants, and the ops that move data
  across shard borders (slice, pad, concatenate, reverse, roll: halo windows; fft: the
  pencil decomposition; cumulative: a scan of the shards' totals).
- `LOCAL`: op name -> the local computation of the generic partitioning, once it has
  chosen each factor's split and resharded the operands (iota's positions, the masked
  lookups and updates of a split indexed dim).

Every rule receives the partitioner as a `PartitionContext` (partition_context.py), and uses only
what that declares. The op's own facts (shape rule, factors, linearity, what a split
reduction leaves) stay on its registry entry (ir/ops/); tests/sharding/
test_partition_rules.py checks every key here names a registered op.
"""
from __future__ import annotations

from . import annotation, control, debug, fft, indexing, reduce, select, shape
from .partition_context import LocalRule, OpRule, PartitionContext

FAMILIES = (annotation, control, debug, fft, indexing, reduce, select, shape)


def _merged(table):
    out = {}
    for family in FAMILIES:
        for name, rule in getattr(family, table, {}).items():
            if name in out:
                raise ValueError(f"partition rules: {name} has a {table} rule in two families")
            out[name] = rule
    return out


OPS: dict[str, OpRule] = _merged("OPS")
LOCAL: dict[str, LocalRule] = _merged("LOCAL")

__all__ = ["OPS", "LOCAL", "PartitionContext"]
