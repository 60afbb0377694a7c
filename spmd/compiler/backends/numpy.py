"""The reference backend: run a Graph op by op with each op's numpy implementation.
Buffers are dropped after their last use so peak memory follows the live set."""
from __future__ import annotations

import numpy as np

from ...errors import SpmdError
from ...ir import Graph
from ...tools import timeline


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
        if len(inputs) != len(g.inputs):
            raise SpmdError(f"{g.name}: expected {len(g.inputs)} inputs, got {len(inputs)}")
        env = {}
        for i, (v, x) in enumerate(zip(g.inputs, inputs)):
            x = np.asarray(x)
            if x.shape != v.shape or x.dtype.name != v.dtype:
                raise SpmdError(f"{g.name}: input {i} is {x.dtype.name}{list(x.shape)}, the program "
                                f"takes {v.dtype}{list(v.shape)}")
            env[v] = x
        tracing = timeline.enabled()
        rank = getattr(comm, "rank", 0)
        for op, free in zip(g.ops, self._free):
            opdef = op.opdef
            args = [env[o] for o in op.operands]
            t0 = timeline.now_us() if tracing else 0
            try:
                if opdef.needs_comm:
                    if comm is not None:                # the user line, for failure messages (collectives/base.py)
                        comm.loc = op.loc
                    out = opdef.ref(*args, comm=comm, **op.attrs)
                else:
                    out = opdef.ref(*args, **op.attrs)
                if tracing:
                    timeline.add(op.name, "collective" if opdef.needs_comm else "compute", rank, t0,
                                 timeline.now_us() - t0, {"loc": op.loc})
            except SpmdError:
                raise
            except Exception as e:
                raise SpmdError(f"{op.name} at {op.loc} failed at run time: {type(e).__name__}: {e}") from e
            outs = [out] if len(op.results) == 1 else list(out)
            for r, x in zip(op.results, outs):
                env[r] = _checked(op, r, x)
            for v in free:
                env.pop(v, None)
        results, seen = [], set()
        for v in g.outputs:
            x = env[v]
            # outputs are fresh, writeable arrays: never the caller's input, a constant the
            # graph keeps, a view (a broadcast is read-only) or the same array twice
            if (v.producer is None or v.producer.name == "constant" or id(x) in seen
                    or not x.flags.writeable or x.base is not None):
                x = x.copy()
            seen.add(id(x))
            results.append(x)
        return results


def _checked(op, v, x):
    """The ref's result as an ndarray; it must be exactly the type the op inferred."""
    x = np.asarray(x)
    if x.shape != v.shape or x.dtype.name != v.dtype:
        raise SpmdError(f"internal error: {op.name} at {op.loc} computed {x.dtype.name}{list(x.shape)} "
                        f"but its shape rule says {v.dtype}{list(v.shape)}")
    return x


def compile_numpy(graph: Graph) -> NumpyExecutable:
    return NumpyExecutable(graph)
