"""verify(graph): the invariants every stage's output must keep, checked between stages
(compiler/pipeline.py runs it under tests). A pass that breaks one is caught at the
stage that broke it, not three stages later as a wrong number.

- SSA: every operand is a graph input or the result of an earlier op; every value is
  defined once; outputs are defined values.
- Shapes: every op's results are what its registry shape rule infers from its operands
  and attributes.
- Sub-graphs (the bodies of while, cond, scan) keep all of these, recursively.
- Shardings: a value's sharding is on the graph's mesh, names only mesh axes, no axis
  twice, and has no more entries than the value has dimensions.
- Async collectives: every start has exactly one done, after it, reading its handle, and
  every done reads a start's handle.

What a stage promises about the kind of program it leaves (`kind`, from the pipeline):
- "global" (before partitioning): only ops with a sharding factor rule, so no
  collective, no axis_index -- the ops that exist only in per-device programs;
- "sharded" (after propagation): a global program whose every value has a sharding;
- "per_device" (after partitioning): anything above.
"""
from __future__ import annotations

import weakref

from ..errors import ShapeError, SpmdError, where
from .ops.registry import get_op


class VerifyError(SpmdError):
    """A stage produced a malformed graph: a bug in spmd, not in the user's program."""


# op -> what its shape rule was last checked on: a pass keeps the ops it does not change,
# so most ops reach verify once per stage unchanged, and the rule is run again only when
# the op's name, its operands' or results' shapes and dtypes, or an attribute differ
_shape_checked = weakref.WeakKeyDictionary()


def _shape_signature(op):
    return (op.name, tuple((o.shape, o.dtype) for o in op.operands),
            tuple((r.shape, r.dtype) for r in op.results),
            tuple((k, id(v)) for k, v in op.attrs.items()))


def verify(graph, stage="graph", kind=None):
    """Check `graph` (the output of `stage`), raising VerifyError at the first broken
    invariant; `kind`: "global", "sharded", "per_device" or None (not known)."""
    defined = set()

    def fail(msg, op=None):
        at = f" ({op.name}{where(op.loc)})" if op is not None else ""
        raise VerifyError(f"after stage {stage!r}, graph {graph.name!r}: {msg}{at}")

    def define(v, op=None):
        if id(v) in defined:
            fail(f"value {v} is defined twice", op)
        defined.add(id(v))
        _check_sharding(graph, v, fail, op)

    for v in graph.inputs:
        define(v)
    for op in graph.ops:
        for o in op.operands:
            if id(o) not in defined:
                fail(f"operand {o} is used before it is defined", op)
        signature = _shape_signature(op)
        if _shape_checked.get(op) != signature:
            try:
                out = get_op(op.name).infer(*[o.aval for o in op.operands], **op.attrs)
            except (ShapeError, TypeError, KeyError, IndexError) as e:
                fail(f"the op no longer passes its shape rule: {e}", op)
            avals = out if isinstance(out, list) else [out]
            got = [r.aval for r in op.results]
            if [tuple(a) for a in avals] != [tuple(a) for a in got]:
                fail(f"results {got} but the shape rule infers {avals}", op)
            _shape_checked[op] = signature
        for k in sorted(op.attrs):
            sub = op.attrs[k]
            if hasattr(sub, "ops") and hasattr(sub, "inputs"):     # a control-flow body
                try:
                    verify(sub, f"{stage}: {op.name}.{k}", "global" if kind in ("global", "sharded") else kind)
                except VerifyError as e:
                    fail(f"its {k} sub-graph is malformed: {e}", op)
        for i, r in enumerate(op.results):
            if r.producer is not op or r.index != i:
                fail(f"result {i} does not point back to its op", op)
            define(r, op)
    for v in graph.outputs:
        if id(v) not in defined:
            fail(f"output {v} is not defined in the graph")
    _check_async_pairs(graph, fail)
    if kind in ("global", "sharded"):
        _check_global(graph, fail)
    if kind == "sharded":
        _check_every_value_sharded(graph, fail)
    return graph


def _check_global(graph, fail):
    """Before partitioning, every op is one of the global program's: it has a sharding
    factor rule (collectives and axis_index, which have none, exist only per device)."""
    for op in graph.ops:
        if op.opdef.factors is None:
            fail("an op that exists only in per-device programs, before partitioning", op)


def _check_every_value_sharded(graph, fail):
    for v in list(graph.inputs) + [r for op in graph.ops for r in op.results]:
        if v.sharding is None:
            at = v.producer
            fail(f"value {v} has no sharding after propagation", at)


def _check_async_pairs(graph, fail):
    """Every started collective is finished once, later, by the done of its own kind."""
    open_starts = {}
    for op in graph.ops:
        d = op.opdef
        if d.collective.phase == "start":
            open_starts[id(op.results[0])] = op
        elif d.collective.phase == "done":
            h = op.operands[0]
            start = open_starts.pop(id(h), None)
            if start is None:
                fail(f"a done whose handle {h} no started collective gave (or one already finished)", op)
            if start.opdef.collective.async_of != d.collective.async_of:
                fail(f"a done of {d.collective.async_of} finishing a started {start.opdef.collective.async_of}", op)
    for start in open_starts.values():
        fail("a started collective that is never finished", start)


def _check_sharding(graph, v, fail, op):
    s = v.sharding
    if s is None:
        return
    if graph.mesh is not None and s.mesh != graph.mesh:
        fail(f"value {v} has a sharding on {s.mesh!r}, the graph is on {graph.mesh!r}", op)
    if len(s.spec) > v.ndim:
        fail(f"value {v} has sharding {s.text()} with more entries than dimensions", op)
    used = [a for d in range(len(s.spec)) for a in s.dim_axes(d)] + list(s.partial)
    unknown = [a for a in used if a not in s.mesh.axis_names]
    if unknown:
        fail(f"value {v} has sharding {s.text()} naming unknown mesh axes {unknown}", op)
    if len(set(used)) != len(used):
        fail(f"value {v} has sharding {s.text()} using a mesh axis twice", op)
