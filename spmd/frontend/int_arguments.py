"""numpy 2 (NEP 50) raises OverflowError where a Python int meets an integer array whose
dtype cannot hold it. Traced, a Python int argument of a jitted function is an int64
Value, so the program alone would wrap; the trace records here what each call must check
(Graph.int_arguments), and jit checks it before running:
- the argument itself met a narrower dtype: {input position: [(dtype, user line)]};
- a weak int computed from such arguments (`c + 1`, `2 * c - k`) met one: the scalar ops
  computing it, as a small Graph of those arguments, under the key
  (Graph, input positions), evaluated on each call's values with the ops' numpy references."""
from __future__ import annotations

from ..errors import user_loc
from ..ir import Graph


def must_fit(x, dtype):
    """Record that weak int64 Tracer x, combined with an array of integer `dtype`, must
    hold a value that dtype holds, on every call."""
    g = x._tr.graph
    if x._tr.parent is not None:
        return                       # inside a loop body or branch: the value differs per iteration
    if x.value.producer is None:
        k = next((i for i, v in enumerate(g.inputs) if v is x.value), None)
        key = k
    else:
        key = _expression(g, x.value)
    if key is None:
        return
    uses = g.int_arguments.setdefault(key, [])
    if dtype not in [d for d, _ in uses]:
        uses.append((dtype, user_loc()))


def _expression(g, value):
    """(Graph computing `value` from some of g's inputs, their positions), or None where
    `value` depends on anything but scalar inputs through plain ops (an array, a loop)."""
    position = {id(v): i for i, v in enumerate(g.inputs)}
    ops, leaves, seen = [], [], set()
    stack = [value]
    while stack:
        v = stack.pop()
        if id(v) in seen:
            continue
        seen.add(id(v))
        if v.producer is None:
            if id(v) not in position or v.shape != ():
                return None
            leaves.append(v)
            continue
        d = v.producer.opdef
        if d.subgraphs or d.effect or d.needs_comm or v.size > 1:
            return None
        ops.append(v.producer)
        stack.extend(v.producer.operands)
    order = {id(op): i for i, op in enumerate(g.ops)}
    ops = sorted({id(op): op for op in ops}.values(), key=lambda op: order[id(op)])
    leaves.sort(key=lambda v: position[id(v)])
    sub = Graph(f"{g.name}:int")
    env = {id(v): sub.add_input(v.shape, v.dtype) for v in leaves}
    for op in ops:
        out = sub.emit(op.name, *[env[id(o)] for o in op.operands], **op.attrs)
        for r, n in zip(op.results, out if isinstance(out, tuple) else (out,)):
            env[id(r)] = n
    sub.outputs = [env[id(value)]]
    return sub, tuple(position[id(v)] for v in leaves)
