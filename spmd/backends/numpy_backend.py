"""The reference backend: run a Graph op by op with each op's numpy implementation.
Its lowering table is the registry itself: every op lowers to its OpDef's `ref`
(executor.run_op). Buffers are dropped after their last use so peak memory follows the
live set."""
from __future__ import annotations

from ..ir import Graph
from .executor import Executable, last_uses, op_label, part_groups, run_op


class NumpyExecutable(Executable):
    def __init__(self, graph: Graph):
        self.graph = graph
        self._free = last_uses(graph, [op.operands for op in graph.ops])
        self._parts = part_groups(graph.ops)

    def run(self, env, comm):
        self.run_steps(self.graph.ops, self._free, env, comm, self._run_op, op_label)

    def _run_op(self, op, env, comm):
        run_op(op, env, comm, parts=self._parts)


def compile_numpy(graph: Graph) -> NumpyExecutable:
    return NumpyExecutable(graph)
