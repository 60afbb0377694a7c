"""The reference backend: run a Graph op by op with each op's numpy implementation.
Buffers are dropped after their last use so peak memory follows the live set."""
from __future__ import annotations

import numpy as np

from ...errors import SpmdError
from ...ir import Graph


class NumpyExecutable:
    def __init__(self, graph: Graph):
        self.graph = graph
        last = {}
        for i, op in enumerate(graph.ops):
            for o in op.operands:
                last[o] = i
        outs = set(graph.outputs)
        self._free = [[] for _ in graph.ops]
        for v, i in last.items():
            if v not in outs:
                self._free[i].append(v)

    def __call__(self, inputs, comm=None):
        g = self.graph
        env = dict(zip(g.inputs, inputs))
        for op, free in zip(g.ops, self._free):
            opdef = op.opdef
            args = [env[o] for o in op.operands]
            try:
                if opdef.needs_comm:
                    out = opdef.ref(*args, comm=comm, **op.attrs)
                else:
                    out = opdef.ref(*args, **op.attrs)
            except SpmdError:
                raise
            except Exception as e:
                raise SpmdError(f"{op.name} at {op.loc} failed at run time: {type(e).__name__}: {e}") from e
            env[op.results[0]] = out if len(op.results) == 1 else None
            if len(op.results) > 1:
                env.update(zip(op.results, out))
            for v in free:
                env.pop(v, None)
        return [_owned(env[v], v.dtype) for v in g.outputs]


def _owned(x, dtype):
    """Outputs are fresh, writeable arrays of the declared dtype (never a broadcast view)."""
    x = np.asarray(x)
    if x.dtype != dtype:
        x = x.astype(dtype)
    if not x.flags.writeable or x.base is not None:
        x = x.copy()
    return x


def compile_numpy(graph: Graph) -> NumpyExecutable:
    return NumpyExecutable(graph)
