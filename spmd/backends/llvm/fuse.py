"""Fusion: group elementwise ops, broadcasts, views and reductions into loop kernels.

`fuse(graph, fusible)` returns a FusionPlan: the graph's ops cut into steps, in an order
that respects every dependency. A step is either a Kernel (a group of ops compiled into
one loop nest: one pass over memory, no temporaries between them) or a single op run
on its own (dot_general, collectives, indexing ops, and anything `fusible` refuses).

The rule is producer-into-consumer: walking the graph backwards, an op joins the kernel
of its users when all its users are in one kernel and would not compute it again at
several places an element (ir.recomputed_ops: a stencil sweep's grid, read by the next
sweep at 5 or 7 shifted places, is stored, not computed again at each), so every value
that leaves a kernel is its root (or a graph output, stored on the way). Cheap ops that
only re-index (broadcast_in_dim, transpose, slice, reshape, iota, splat constants) are
copied into every kernel that uses them, so they never cost memory. A reduction's epilogue (softmax's
exp/sum/divide, layernorm) fuses with the reduction: the code generator hoists each
reduction out of the loops it does not depend on.

The plan prints as text (`str(plan)`), which `SPMD_DUMP` writes next to the stages.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field


from ...ir import RECOMPUTE_LIMIT, Graph, Op, Value, recomputed_ops  # noqa: F401
from ...ir import splat  # noqa: F401  (re-exported for the backends)


def reindexes(op) -> bool:
    """Does op only move elements (OpDef.fusion "reindex")? Such ops are copied into
    every kernel that reads them."""
    return op.opdef.fusion == "reindex"


MAX_REDUCES = 3          # reductions per kernel: each nested one may recompute its operand
# ops on a kernel's longest chain from an input to its root: a longer chain (a Python loop
# writing one element a step: a select per step) is cut into kernels that store between
# them, so code generation (recursive over the chain) and each element's work stay bounded
MAX_DEPTH = 64
PARALLEL_WORK = 1 << 16  # elements: a kernel this large may run its outer loop across threads
PACK_MIN = 1 << 12       # elements: a smaller re-indexed value a collective sends stays a view


@dataclass
class Kernel:
    ops: list                       # member ops, in graph order (cheap ops may be in several kernels)
    root: Value                     # the value the loop nest is built around
    outputs: list                   # values the kernel stores: the root, then escaping graph outputs
    inputs: list = field(default_factory=list)   # materialised values it reads


@dataclass
class FusionPlan:
    graph: Graph
    steps: list                     # Kernel or Op, in execution order

    def kernels(self):
        return [s for s in self.steps if isinstance(s, Kernel)]

    def __str__(self):
        names = {v: f"%{i}" for i, v in enumerate(self.graph.values())}   # as the text form numbers them
        _name = names.get
        lines = []
        for s in self.steps:
            if isinstance(s, Kernel):
                outs = ", ".join(_name(v) for v in s.outputs)
                ins = ", ".join(_name(v) for v in s.inputs)
                lines.append(f"kernel ({ins}) -> ({outs}) root {_name(s.root)} {{")
                lines += [f"  {_name(op.results[0])} = {op.name}" for op in s.ops]
                lines.append("}")
            else:
                lines.append(f"{', '.join(_name(r) for r in s.results)} = {s.name}")
        return "\n".join(lines) + "\n"


def fuse(graph: Graph, fusible, roots=frozenset()) -> FusionPlan:
    """`fusible(op) -> bool` says which ops the backend can compile into a kernel (not a
    constant array: kernels read it from memory); `roots` are values forced to be
    materialised (the code generator asks for them)."""
    groups = group_ops(graph, fusible, roots | packed(graph, fusible))
    return FusionPlan(graph, steps_in_order(graph, groups))


@dataclass
class Groups:
    roots: list = field(default_factory=list)                       # kernel id -> its root op
    members: dict = field(default_factory=lambda: defaultdict(list))   # kernel id -> ops (reverse order)
    escaping: dict = field(default_factory=lambda: defaultdict(list))  # kernel id -> graph outputs it stores
    standalone: set = field(default_factory=set)                    # ops run on their own


def group_ops(graph: Graph, fusible, roots) -> Groups:
    """Walking the graph backwards, each op joins the kernel of its users when they are all
    in one kernel; re-indexing ops and splats join every kernel that reads them."""
    users = defaultdict(list)
    for op in graph.ops:
        for o in op.operands:
            users[o].append(op)
    outs = set(graph.outputs)
    cheap = positional(graph, fusible)
    gs = Groups()
    groups: dict[Op, set] = {}       # op -> ids of the kernels it is part of
    reduces = []                     # kernel id -> reductions in it
    depth: dict[Op, int] = {}        # op -> ops from it to its kernel's root, along the longest chain
    for op in reversed(graph.ops):
        if len(op.results) != 1 or not fusible(op):
            gs.standalone.add(op)
            continue
        r = op.result
        depth[op] = 1 + max((depth.get(u, 0) for u in users[r] if groups.get(u)), default=0)
        if reindexes(op) and op.opdef.reindex.index_pieces is not None and r not in outs and r not in roots:
            computed_views(op, users[r], gs, groups, reduces)
        ug, outside_op = set(), False
        for u in users[r]:
            if u in gs.standalone:
                outside_op = True
            ug |= groups.get(u, set())
        # a positional value an op outside kernels reads (a vocabulary shard's mask
        # selecting an embedding's rows) is a kernel of its own, not a numpy step
        computed = op in cheap and not reindexes(op) and splat(r) is None and outside_op
        if (reindexes(op) or splat(r) is not None or op in cheap) and r not in roots and not computed:
            groups[op] = ug
            for gid in ug:
                gs.members[gid].append(op)
            if outside_op or r in outs or not ug:
                gs.standalone.add(op)
            continue
        is_red = op.opdef.fusion == "reduction"
        if (len(ug) == 1 and not outside_op and r not in roots and depth[op] <= MAX_DEPTH
                and recomputed_ops(r, users, cheap) <= RECOMPUTE_LIMIT
                and reduces[next(iter(ug))] + is_red <= MAX_REDUCES
                and not (is_red and whole(r, gs.roots[next(iter(ug))].results[0]))):
            (gid,) = ug
            if r in outs:
                gs.escaping[gid].append(r)
        else:
            gid = len(gs.roots)
            gs.roots.append(op)
            reduces.append(0)
            depth[op] = 1
        groups[op] = {gid}
        gs.members[gid].append(op)
        reduces[gid] += is_red
    return gs


def whole(r, root) -> bool:
    """Is r a reduction of a kernel of a larger root to one element (CG's r.r feeding the
    next direction)? Such a reduction is its own kernel: fused, every thread of the
    root's loop would compute all of it again before storing its rows, and the root could
    not be written over the arrays the reduction reads."""
    return r.size == 1 and root.size >= PARALLEL_WORK


def packed(graph, fusible) -> set:
    """Values re-indexed out of their operand's order (a transpose) that a collective
    moving blocks between dims sends (OpDef.collective.blocks_along: the sharded transpose's
    all_to_all): each is made by a kernel of its own, straight into the buffer the
    collective sends (tiled where it reads across rows: codegen.py), rather than left a
    strided view for the collective to copy. (Other collectives read such a view in the
    one pass that copies it: the local runtime's, an all_reduce's into its result.)"""
    sent = {o for op in graph.ops if op.opdef.collective.blocks_along is not None for o in op.operands}
    out = set()
    for op in graph.ops:
        if len(op.results) != 1 or not reindexes(op) or op.opdef.reindex.index_map is None or not fusible(op):
            continue
        r = op.result
        if r.ndim < 2 or r.size < PACK_MIN or r not in sent:
            continue
        names = [f"d{k}" for k in range(r.ndim)]
        last_terms, _ = op.opdef.reindex.index_map(tuple((((n, 1),), 0) for n in names), op.operands[0].shape, op.attrs)[-1]
        if last_terms and last_terms != ((names[-1], 1),):
            out.add(r)
    return out


def positional(graph, fusible) -> set:
    """Ops computed from element positions and scalars alone (a stencil's masks: iota,
    axis_index, constants, compares and ands of them): each kernel that reads one computes
    it itself, like a broadcast (the code generator decides most of them per region)."""
    cheap_values, ops = set(), set()
    outs = set(graph.outputs)
    for op in graph.ops:
        if len(op.results) != 1 or op.result in outs:
            continue
        r = op.result
        if fusible(op) and op.opdef.fusion in ("elementwise", "reindex") and op.opdef.reindex.index_pieces is None \
                and all(o.ndim == 0 or o in cheap_values for o in op.operands):
            ops.add(op)
            cheap_values.add(r)
    return ops


def computed_views(op, users, gs, groups, reduces):
    """A pad / concatenation / dynamic slice (a copy when run on its own) whose every use
    outside kernels is a view of it (the edge rows of a ghost-layered block, sliced for a
    collective): each such view becomes a small kernel of its own, which reads the
    pieces where they are, so the whole block is never copied."""
    outside = [u for u in users if u in gs.standalone]
    if not outside or not all(u.opdef.reindex.view and len(u.results) == 1 and u.opdef.fusion == "reindex"
                              for u in outside):
        return
    for u in outside:
        gs.standalone.discard(u)
        gid = len(gs.roots)
        gs.roots.append(u)
        reduces.append(0)
        groups[u] = groups.get(u, set()) | {gid}
        gs.members[gid].append(u)


def steps_in_order(graph: Graph, gs: Groups) -> list:
    """The steps in graph order: a kernel runs where its root is."""
    steps = []
    kernel_at = {root: gid for gid, root in enumerate(gs.roots)}
    for op in graph.ops:
        if op in kernel_at:
            gid = kernel_at[op]
            ops = gs.members[gid][::-1]
            steps.append(Kernel(ops, op.result, [op.result] + gs.escaping[gid][::-1], kernel_inputs(ops)))
        if op in gs.standalone:
            steps.append(op)
    return steps


def kernel_inputs(ops) -> list:
    """The values a kernel of these ops reads from memory, in the order it first reads them."""
    mset = set(ops)
    inputs, seen = [], set()
    for m in ops:
        for o in m.operands:
            if o.producer not in mset and o not in seen:
                seen.add(o)
                inputs.append(o)
    return inputs
