"""The sharding search as a graph of choices (Alpa's intra-op formulation, on Shardy's
factor rules): a node per argument, per op, and per result spmd is to lay out, each with
its options and their cost in seconds per device; an edge per operand, with the seconds
of resharding between every option of its producer and every option of its consumer.

    node cost   an op's compute at the machine's rates (cost_model.Machine: its flops and
                bytes per device under that split) plus, when the split leaves the result
                a pending sum, the all_reduce that settles it (its bytes alone where
                only fused ops read the value on: a gradient, whose all-reduce the
                compiler buckets with the others, cost_model.bucketed_values)
    edge cost   cost.reshard_seconds from what the producer's option makes to what the
                consumer's option reads (a local slice is free; a gather is not)

    loop node   a while or scan: its options lay out its tensors of one shape alike
                (strategies.loop_strategies), each costing its body planned once for
                that layout times the trip count (loop_seconds)

Values that cost nothing to make in any layout (constants, iotas, scalars, and what is
computed from those alone) are not nodes: every device makes them as its option needs.
Ops without a factor rule (calls) are not nodes either: propagation lays them out, as
before. Everything is in graph order; nothing depends on hashing.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from ...ir.mesh import Sharding
from ...ir.ops.names import SHARDING_CONSTRAINT
from ...ir.ops.registry import op_flops
from ..cost import reshard_seconds
from ..cost_model import (bucketed_values, collective_seconds, first_fused_reads, fuses, is_product, moved_values,
                          product_elements)
from ..rules import axes_size, op_key, rule_of
from .solve import refine_greedy, total
from .strategies import Strategy, is_loop, layouts, loop_strategies, op_strategies

# a while's trip count is the data's: the search takes its body (and cond) to run this
# many times a call (a loop is written to repeat, so its body outweighs the code around
# it; the layout that suits the body wins), the whole program's model the same when it
# judges plans (choose.py); lowered.cost() counts one trip and says the count is unknown
WHILE_TRIPS = 10


@dataclass
class Node:
    what: str                  # "argument", "op" or "result"
    name: str                  # how explain names it
    n: int                     # how many options
    cost: np.ndarray           # seconds per option
    memory: np.ndarray         # bytes per device per option (arguments: what the device holds)
    makes: list                # per option: {Value: Sharding} of the values the node makes
    reads: list = field(default_factory=list)   # (Value, [Sharding per option]) it reads from other nodes
    index: int = -1            # argument or result position, the op's position in the graph
    ops: list = field(default_factory=list)     # the op and the ops that follow it (merged)


class Edge(NamedTuple):
    """A value made by `src` and read by `dst`: `costs[a, b]` the seconds of resharding it
    between src's option a and dst's option b, which is `small[made[a], wanted[b]]` over
    the distinct layouts made and wanted (the solver's variables are those pairs)."""
    src: Node
    value: object
    dst: Node
    costs: np.ndarray
    small: np.ndarray
    made: np.ndarray
    wanted: np.ndarray


@dataclass
class Problem:
    nodes: list = field(default_factory=list)
    edges: list = field(default_factory=list)     # Edges
    inputs: dict = field(default_factory=dict)    # argument position -> node
    outputs: dict = field(default_factory=dict)   # result position -> node


def local_bytes(shape, dtype, s: Sharding) -> float:
    return float(np.dtype(dtype).itemsize) * local_elements(shape, s)


def local_elements(shape, s: Sharding) -> float:
    n = 1.0
    for d, size in enumerate(shape):
        n *= size / axes_size(s.mesh, s.dim_axes(d))
    return n


def free_values(graph) -> set:
    """Values every device can make in any layout for nothing worth counting."""
    free = set()
    for op in graph.ops:
        # (an op with no operands makes its value from its attributes: a constant, an iota)
        if not op.operands or (all(o in free or o.ndim == 0 for o in op.operands)
                               and op.name != SHARDING_CONSTRAINT):
            free.update(op.results)
    return free


class _Seconds:
    """reshard_seconds, remembered per (from, to, shape, dtype), and the matrices of them
    between lists of layouts."""

    def __init__(self, network):
        self.network, self.memo, self.matrices = network, {}, {}

    def matrix(self, have, want, shape, dtype) -> np.ndarray:
        """[[seconds from a to b for b in want] for a in have], remembered per layouts,
        shape and dtype (a step's layers repeat the same edges; the caller does not
        write into it)."""
        key = (tuple((a.spec, a.partial) for a in have), tuple((b.spec, b.partial) for b in want), shape, str(dtype))
        m = self.matrices.get(key)
        if m is None:
            m = self.matrices[key] = np.array([[self(a, b, shape, dtype) for b in want] for a in have])
        return m

    def __call__(self, src, dst, shape, dtype):
        if src == dst:
            return 0.0
        key = (src.spec, src.partial, dst.spec, dst.partial, shape, dtype)
        v = self.memo.get(key)
        if v is None:
            v = self.memo[key] = reshard_seconds(src, dst, shape, dtype, self.network)
        return v


def build(graph, mesh, in_shardings, out_shardings, machine, network, names=None, ties=None) -> Problem:
    """The Problem of laying out `graph` (global, simplified: what propagate receives).
    `in_shardings` / `out_shardings`: per leaf a Sharding (kept as given), AUTO (to
    choose) or None (left to propagation: chosen here too, but not reported). `ties`:
    {result position: argument position} of results that are the argument's next value
    (a training step's new parameters): laid out as the argument is, so that the next
    step takes them as they are.

    An op whose result's factors all come from one operand made by a node (elementwise
    ops, transposes, reshapes, reductions), and that can read that operand as made under
    every option of the node, follows the node: its cost joins the node's options and it
    makes no choice of its own (Alpa's merging of simple ops). What is left to choose are
    the arguments, the contractions, broadcasts and gathers: that keeps the exact solver
    in reach of whole training steps."""
    ties = ties or {}
    pb = Problem()
    seconds = _Seconds(network)
    free = free_values(graph)
    # what goes through memory: fused ops move only what enters and leaves their kernel
    traffic = ({o for op in graph.ops if not fuses(op) for o in op.operands}, set(graph.outputs),
               first_fused_reads(graph))
    op_seconds = _OpSeconds(machine, network, *traffic, bucketed_values(graph))
    names = names or [f"argument {i}" for i in range(len(graph.inputs))]
    made_by = {}                                   # Value -> the node that makes it
    for i, v in enumerate(graph.inputs):
        s = in_shardings[i] if i < len(in_shardings) else None
        opts = [s.for_rank(v.ndim)] if isinstance(s, Sharding) else layouts(v.shape, mesh)
        node = Node("argument", names[i], len(opts), np.array([_minor(o) for o in opts]),
                    np.array([local_bytes(v.shape, v.dtype, o) for o in opts]), [{v: o} for o in opts], index=i)
        pb.inputs[i] = node
        pb.nodes.append(node)
        made_by[v] = node
    for oi, op in enumerate(graph.ops):
        if op.opdef.factors is None or all(r in free for r in op.results):
            continue
        strategies, cost = None, None
        if is_loop(op):
            strategies = loop_strategies(op, mesh)
            if strategies is not None:
                cost = loop_seconds(op, strategies, mesh, machine, network)
        if strategies is None:
            strategies = op_strategies(op, mesh)
        if op.name == SHARDING_CONSTRAINT:
            want = Sharding(mesh, op.attrs["spec"], op.attrs.get("partial", ())).for_rank(op.result.ndim)
            strategies = [st for st in strategies if st.results[0] == want] or [_pinned(want)]
        if not strategies:
            continue
        if op.name != SHARDING_CONSTRAINT and cost is None and \
                _follow(op, strategies, made_by, free, seconds, op_seconds):
            continue
        if cost is None:
            cost = [op_seconds(op, st) for st in strategies]
        node = Node("op", f"{op.name}{'' if op.loc is None else ' at ' + str(op.loc)}", len(strategies),
                    np.array([c + _minor(st.results[0]) for c, st in zip(cost, strategies)]),
                    np.zeros(len(strategies)), [dict(zip(op.results, st.results)) for st in strategies],
                    index=oi, ops=[op])
        for j, o in enumerate(op.operands):
            if o in made_by and o not in free:
                node.reads.append((o, [st.operands[j] for st in strategies]))
        pb.nodes.append(node)
        for r in op.results:
            made_by[r] = node
    for k, v in enumerate(graph.outputs):
        s = out_shardings[k] if k < len(out_shardings) else None
        if v not in made_by or v in free:
            continue
        if k in ties:
            arg = pb.inputs[ties[k]]
            arg.reads.append((v, [m[graph.inputs[ties[k]]] for m in arg.makes]))
            continue
        if s is None:
            continue
        opts = [s.for_rank(v.ndim)] if isinstance(s, Sharding) else layouts(v.shape, mesh)
        node = Node("result", f"result {k}", len(opts), np.zeros(len(opts)), np.zeros(len(opts)),
                    [{} for _ in opts], [(v, opts)], index=k)
        pb.outputs[k] = node
        pb.nodes.append(node)
    for node in pb.nodes:
        for v, wants in node.reads:
            src = made_by[v]
            small, hi, wi = _edge_costs([m[v] for m in src.makes], wants, v, seconds)
            if small.any():
                pb.edges.append(Edge(src, v, node, small[np.ix_(hi, wi)], small, hi, wi))
    return pb


def loop_seconds(op, strategies, mesh, machine, network) -> list:
    """Each strategy of a loop (strategies.loop_strategies) in seconds a call: its body
    planned once for that strategy's layouts (a Problem of its own, solved by the refined
    greedy pass) with the carries, the slices of the scanned arrays and the captured
    values pinned as the strategy has them and each new carry tied to its carry's layout
    (GSPMD's rule: a loop-carried value keeps one sharding), times the trip count: a
    scan's length, a while's WHILE_TRIPS (its cond planned alike, once a trip too)."""
    nc, nx = op.attrs["num_carry"], op.attrs.get("num_xs", 0)
    body = op.attrs["body"]
    # (a scan's trip count is in its attributes; a while's, with a cond graph, the data's)
    scan = op.opdef.runs is not None
    trips = op.opdef.runs(op.attrs, "body") if scan else WHILE_TRIPS
    ties = {k: k for k in range(nc)}
    out = []
    for st in strategies:
        ins = [_drop_lead(s) if scan and nc <= i < nc + nx else s for i, s in enumerate(st.operands)]
        outs = [None] * nc + [_drop_lead(s) for s in st.results[nc:]]
        t = _planned_seconds(body, mesh, ins, outs, machine, network, ties)
        if "cond" in op.attrs:
            t += _planned_seconds(op.attrs["cond"], mesh, ins, [Sharding(mesh, ())], machine, network, {})
        out.append(trips * t)
    return out


def _planned_seconds(graph, mesh, ins, outs, machine, network, ties) -> float:
    pb = build(graph, mesh, list(ins), list(outs), machine, network, ties=ties)
    return total(pb, refine_greedy(pb))


def _drop_lead(s: Sharding) -> Sharding:
    return Sharding(s.mesh, tuple(s.spec[1:]))


def _minor(s: Sharding) -> float:
    """A tie-breaker of a few nanoseconds for each split of a minor dim: at equal cost a
    split of the major dims is kept (its shards are contiguous, its halos whole rows)."""
    return 1e-9 * sum(d * len(s.dim_axes(d)) for d in range(len(s.spec)))


def _distinct(shardings):
    """(the distinct Shardings in order of first appearance, the index of each in them)."""
    first, index = {}, []
    for sh in shardings:
        k = (sh.spec, sh.partial)
        if k not in first:
            first[k] = (len(first), sh)
        index.append(first[k][0])
    return [sh for _, sh in first.values()], np.array(index)


def _edge_costs(made, wants, v, seconds):
    """Seconds from each distinct made layout of `v` (settled: a pending sum is the
    producer's to reduce) to each distinct wanted one, and which of them each option makes
    and wants."""
    have, hi = _distinct([m.replace(partial=()) if m.partial else m for m in made])
    want, wi = _distinct(wants)
    return seconds.matrix(have, want, v.shape, v.dtype), hi, wi


def _pinned(want):
    return Strategy((), (want.replace(partial=()),), (want,), 1)


def _follow(op, strategies, made_by, free, seconds, op_seconds) -> bool:
    """Merge `op` into the node making an operand that holds every factor of its result
    (elementwise ops, transposes, reshapes, reductions: that operand's layout decides the
    result's), if under every option of that node it has a strategy reading the operand
    as made: the first such (the fewest other axes split)."""
    if len(op.results) != 1:
        return False
    rule = rule_of(op)
    res = {f for fs in rule.results[0] for f in fs}
    r = op.result
    for j, o in enumerate(op.operands):
        if o in free or o not in made_by or not res <= {f for fs in rule.operands[j] for f in fs}:
            continue
        node = made_by[o]
        if node.what == "result":
            return False
        by = {}
        for st in strategies:
            by.setdefault(st.operands[j], st)
        picks = [by.get(m[o].replace(partial=()) if m[o].partial else m[o]) for m in node.makes]
        if any(st is None for st in picks):
            return False
        slots = {}
        for a, (st, m) in enumerate(zip(picks, node.makes)):
            node.cost[a] += op_seconds(op, st)
            for k, u in enumerate(op.operands):
                if k == j or u in free:
                    continue
                if u in m:          # made inside the node: resharded within the option
                    node.cost[a] += seconds(m[u].replace(partial=()), st.operands[k], u.shape, u.dtype)
                elif u in made_by:
                    slots.setdefault(k, []).append(st.operands[k])
            m[r] = st.results[0]
        for k in sorted(slots):
            node.reads.append((op.operands[k], slots[k]))
        node.ops.append(op)
        made_by[r] = node
        return True
    return False


class _OpSeconds:
    """One device's seconds for an op split as a strategy: compute, and settling a
    pending sum. The op's flops and the values it moves through memory are worked out once
    per op, the seconds once per (op, strategy): merged ops ask for one strategy under
    many options; and once per (op_key, which of its operands and results move through
    memory and which results are bucketed, strategy), all they are a function of: a
    step's layers repeat the same ops."""

    def __init__(self, machine, network, read_by_unfused, outputs, first_reads, bucketed=frozenset()):
        self.machine, self.network, self.traffic = machine, network, (read_by_unfused, outputs, first_reads)
        self.bucketed = bucketed
        self.parts, self.memo, self.shared = {}, {}, {}

    def __call__(self, op, st) -> float:
        key = (op, st)
        t = self.memo.get(key)
        if t is None:
            parts = self._parts(op)
            if parts[3] is None:
                t = self._seconds(op, st, parts)
            else:
                shared = (parts[3], st)
                t = self.shared.get(shared)
                if t is None:
                    t = self.shared[shared] = self._seconds(op, st, parts)
            self.memo[key] = t
        return t

    def _parts(self, op):
        """(flops, operands moved, results moved, the shared key or None)."""
        parts = self.parts.get(op)
        if parts is None:
            flops = op_flops(op)
            ins, outs = moved_values(op, *self.traffic)
            k = op_key(op)
            if k is not None:
                k = (k, tuple(o in ins for o in op.operands), tuple(r in outs for r in op.results),
                     tuple(r in self.bucketed for r in op.results))
            parts = self.parts[op] = (flops, ins, outs, k)
        return parts

    def _seconds(self, op, st, parts) -> float:
        flops, ins, outs, _ = parts
        nbytes = sum(local_bytes(t.shape, t.dtype, s) for t, s in zip(op.operands, st.operands) if t in ins)
        nbytes += sum(local_bytes(t.shape, t.dtype, s) for t, s in zip(op.results, st.results) if t in outs)
        elements = product_elements(op, [local_elements(v.shape, s) for v, s in zip(
            op.operands + op.results, st.operands + st.results)]) if is_product(op) else 0.0
        t = max(self.machine.compute_seconds(flops / st.split, elements, is_product(op)),
                nbytes / self.machine.bandwidth_for(nbytes))
        for r, s in zip(op.results, st.results):
            if s.partial:
                g = axes_size(s.mesh, s.partial)
                b = local_bytes(r.shape, r.dtype, s)
                link = self.network.link(s.mesh, s.partial)
                if r in self.bucketed:          # (its latency shared in a bucket: bandwidth alone)
                    t += link.seconds(2 * (g - 1) / g * b, 0)
                else:
                    t += collective_seconds("all_reduce", 2 * (g - 1) / g * b, g, link)
        return t


