"""What a partition rule may ask of the partitioner: `PartitionContext`, the one argument
(besides the op) every rule of this package receives, and the two forms a rule takes.

The partitioner (sharding/partition.py `Partitioner`) is the one implementation; the
rules see only the members declared here (tests/sharding/test_partition_rules.py checks
both: the partitioner defines every member, and no rule reaches for another).

A rule works on one op of the global graph. `ctx.env` says how each of its operands is
laid out so far; `ctx.get` / `ctx.reshard` bring a value to the layout the rule wants
(the collectives between layouts are the reshard planner's, reshard.py); the rule emits
the per-device computation through `ctx.em`; `ctx.finish` lays its result out as
propagation decided. Nothing here loops over devices: a rule emits one program, and
rank-dependent behaviour comes only from axis_index (`ctx.em.axis_index`, `positions`).
"""
from __future__ import annotations

from typing import Callable, Mapping, Protocol, Sequence, Union

from ...ir import Graph, Op, Value
from ...ir.factors import FactorRule
from ...ir.mesh import Sharding
from ..reshard import Emitter

Spec = Sequence[tuple]          # one tuple of mesh axes per dim (() or None: not split)
Laid = tuple                    # (local Value, the Sharding it is laid out by)


class PartitionContext(Protocol):
    """The partitioner as a rule sees it."""

    # emits into the per-device graph (constants, axis_index, masks, halo windows, the op)
    em: Emitter
    # global Value -> (local Value, the Sharding it is laid out by), for every value
    # partitioned so far (an op's operands, when its rule runs)
    env: Mapping[Value, Laid]
    # what rules share between ops, under keys of their own (shape.py's ghost layers)
    cache: dict

    def sharding_of(self, v: Value) -> Sharding:
        """The sharding propagation gave global Value v (replicated if it gave none)."""

    def sh(self, spec: Spec, partial: tuple = ()) -> Sharding:
        """A Sharding on the mesh from a spec (one tuple of axes a dim) and pending-sum axes."""

    def axes_size(self, axes) -> int:
        """The number of devices along these mesh axes (1 for none)."""

    def users(self, v: Value) -> list:
        """The ops of the global graph that read v, in program order."""

    def what(self) -> str:
        """The op being partitioned and its user line, for messages."""

    def get(self, v: Value, want: Sharding) -> Value:
        """Global Value v's local value laid out by `want` (a reshard if it is not yet)."""

    def reshard(self, lv: Value, have: Sharding, want: Sharding, shape) -> Value:
        """Local value lv of a global value of `shape`, laid out by `have` -> by `want`."""

    def finish(self, local: Value, have: Sharding, target: Sharding, shape, dtype,
               kind: str = "sum") -> Laid:
        """The op's local result laid out by `have` -> (local, sharding) for the
        propagated `target`; a pending sum may be kept for the uses to settle."""

    def carry_all(self, op: Op, spec: Spec) -> tuple:
        """For ops linear in every operand that never grow much (slice, pad, concatenate):
        the pending-sum axes the operands keep through the op."""

    def gather_fallback(self, x: Value, cur_shape, spec: Spec, partial: tuple, d: int) -> tuple:
        """(x with dim d gathered, the spec it now has), with a ReshardWarning: the route
        when a halo window would take too many hops."""

    def warn_gathered(self, v: Value, have: Sharding, why: str, dims=None) -> None:
        """A rule that gathers split dims of global value v (laid out by `have`; all of
        them if dims is None) whole on every device says so, with the bytes (a
        ReshardWarning from the user's line, sharding/gathers.py)."""

    def mask_reduction_dims(self, op: Op, rule: FactorRule, assign: dict, locals_: list,
                            shardings: list, kind: str = "sum") -> list:
        """The local operands with the padding of each split reduced dim set to the
        reduction's identity."""

    def lower_subgraph(self, g: Graph, in_shardings, out_shardings) -> Graph:
        """A control-flow body -> its per-device graph, its inputs and outputs pinned to
        the shardings given (propagation, then partitioning, as for a program)."""


# A rule for the whole op, in place of the generic factor-driven partitioning:
# (ctx, op) -> (local result, its Sharding), or a list of them, one a result.
OpRule = Callable[[PartitionContext, Op], Union[Laid, list]]

# A rule for the local computation only, inside the generic partitioning (which chose
# how each factor is split and brought the operands to it):
# (ctx, op, factor rule, {factor: mesh axes}, local operands, their Shardings, the
# result's Sharding) -> the local result.
LocalRule = Callable[[PartitionContext, Op, FactorRule, dict, list, list, Sharding], Value]

__all__ = ["PartitionContext", "OpRule", "LocalRule", "Spec", "Laid"]
