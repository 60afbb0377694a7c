"""spmd.AUTO: choose the shardings jit was told to choose.

    choose(graph, mesh, in_shardings, out_shardings, machine, network, memory_limit)
        -> AutoPlan: a Sharding for every leaf (the given ones kept), and why

1. the search (problem.py, solve.py) lays out every argument, op and chosen result of
   the global program for the fewest modelled seconds, the arguments within a share of
   memory_limit: exactly where the problem is small, and by two refined greedy passes;
2. each plan found; the one of them the whole program's model finds fastest, with
   every value the search laid out kept as it chose (propagation hints: the "followed"
   plan), where propagation from its arguments alone lays out some value otherwise;
   and the plain plans (the baseline: each chosen argument's largest dim split over the
   largest mesh axis that divides it; data parallel, where some arguments are state
   whose next value is a result: the state whole and the batch split on its leading
   dim over the mesh; and every chosen argument replicated) each go
   through propagation and the partitioner, and the modelled seconds of the program each
   makes (program_cost.py) decide. So a plan is never slower, by the model, than the
   baseline. A plan whose arguments, results and hints equal an earlier one's is not
   made again, and the kept plan's program goes on to lowering (AutoPlan.programs).

Only the leaves jit was told to choose are reported: the rest of the program is
propagation's, from them and the hints, as with shardings and spmd.shard a user writes.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from ...ir.mesh import Sharding, is_auto
from ..partition import partition
from ..propagate import propagate
from .problem import WHILE_TRIPS, build, local_bytes
from .program_cost import program_seconds
from .solve import memory, solve, total

# of memory_limit, what the search lets the arguments hold per device (the rest is for
# activations and temporaries; the memory planner then fits the whole or says it cannot)
ARGUMENT_SHARE = 0.6
# the replicated plan is made and judged by the whole program's model only where the
# search's model of it (every node unsplit: no communication, so that model is close)
# is within this factor of the fastest plan made, and a search's plan only where that
# model puts it within this factor of the search's best plan; else the search's figure
# stands
NEAR = 1.5


@dataclass
class AutoPlan:
    in_shardings: list                 # a Sharding or None per argument leaf
    out_shardings: list                # a Sharding or None per result leaf
    chosen: str                        # the plan kept: a search's ("exact", "refine greedy",
                                       # "refine unsplit"), "baseline" or "replicated"
    method: str                        # the search's best plan, by the search's own model
    seconds: dict = field(default_factory=dict)     # plan -> modelled seconds per step
    solve_seconds: float = 0.0
    solve_cpu_seconds: float = 0.0                  # the search's CPU time (this thread's): the
                                                    # figure a machine shared with other work keeps
    argument_bytes: float = 0.0                     # what the plan's arguments hold per device
    why: list = field(default_factory=list)         # per chosen leaf: a dict (see explain_lines)
    size: dict = field(default_factory=dict)        # ops of the program (ops_in), nodes, edges, option pairs of the search
    # {(op index, result index): Sharding} of the global program's interior values the plan
    # kept asks propagation to keep (the search's, where propagation from the arguments
    # alone lays them out otherwise); empty unless a "followed" plan won
    hints: dict = field(default_factory=dict)
    estimated: set = field(default_factory=set)     # plans priced by the search's model alone (NEAR)
    # the kept plan's global program propagated and partitioned (lowering takes them on:
    # they are not made twice); not part of the plan's text
    programs: tuple = field(default=(), repr=False, compare=False)
    # what a search again of the same program (another argument budget) takes as it is:
    # the Problem, and each plan realized ({key: (propagated, partitioned, seconds)})
    reuse: dict = field(default_factory=dict, repr=False, compare=False)
    # {plan name: its key in reuse["judged"]} of the plans made (realized alike: one key)
    keys: dict = field(default_factory=dict, repr=False, compare=False)
    # why the plan kept is not the fastest the search made, where something other than
    # the model's seconds decided (jit: the plans the model found faster need more than
    # memory_limit compiled)
    note: str = ""

    def explain_lines(self) -> list:
        out = [f"spmd.AUTO: kept the {self.chosen} plan (searched in {self.solve_seconds:.2f} s; "
               f"modelled step " + ", ".join(f"{k} {v * 1e3:.3f} ms" + (" (search's model)" if k in self.estimated else "")
                                             for k, v in self.seconds.items()) + ")"]
        if self.note:
            out.append(f"  {self.note}")
        for w in self.why:
            line = f"  {w['leaf']}: {w['chosen']}"
            if w.get("runner_up") is not None:
                line += (f"; runner-up {w['runner_up']} (+{w['delta'] * 1e6:.1f} us a step by the model, "
                         f"{w['runner_up_bytes'] / 2**20:.2f} MiB a device against {w['bytes'] / 2**20:.2f})")
            line += f"; decided by {w['decided_by']}"
            out.append(line)
        return out


def baseline(shape, mesh):
    """The plain plan for one argument: its largest dim over the largest mesh axis that
    divides it (earlier dims and axes first at equal size), else replicated."""
    spec = [None] * len(shape)
    if shape:
        d = max(range(len(shape)), key=lambda i: (shape[i], -i))
        for a in sorted(mesh.axis_names, key=lambda a: (-mesh.axis_size(a), mesh.axis_names.index(a))):
            if mesh.axis_size(a) > 1 and shape[d] % mesh.axis_size(a) == 0:
                spec[d] = a
                break
    return Sharding(mesh, tuple(spec))


def batch_split(shape, mesh):
    """A data argument's plain layout: its leading dim over every mesh axis, major to
    minor, as many of them as divide it (else the baseline's split of that dim)."""
    axes = [a for a in mesh.axis_names if mesh.axis_size(a) > 1]
    while axes and shape[0] % mesh.axes_size(tuple(axes)):
        axes = axes[:-1]
    if not axes:
        return Sharding(mesh, baseline(shape[:1], mesh).spec + (None,) * (len(shape) - 1))
    return Sharding(mesh, (axes[0] if len(axes) == 1 else tuple(axes),) + (None,) * (len(shape) - 1))


def data_parallel(graph, mesh, auto_in, given_in, ties):
    """The plain data-parallel plan, or None where the program has no state: the chosen
    arguments whose next value is a result (a training step's parameters and optimizer
    state: `ties`) whole, the others (the batch) split on their leading dim
    (batch_split). A search refining one node at a time rarely reaches it where
    collectives' latency is high (MPI processes on a loaded host): moving one value
    to a split adds reshards on both sides before the rest follow."""
    state = set(ties.values())
    batch = [i for i in auto_in if i not in state and graph.inputs[i].ndim]
    if not state or not batch:
        return None
    v = graph.inputs
    return [given_in[i] if i not in auto_in else batch_split(v[i].shape, mesh) if i in batch
            else Sharding(mesh, (None,) * v[i].ndim) for i in range(len(v))]


def choose(graph, mesh, in_shardings, out_shardings, machine, network, memory_limit=None, names=None,
           ties=None, argument_budget=None, reuse=None) -> AutoPlan:
    """`ties`: {result position: argument position} of results that are that argument's
    next value (problem.build): unless given, they take the argument's layout.
    `argument_budget`: bytes per device the arguments may hold (default: ARGUMENT_SHARE
    of memory_limit). `reuse`: an earlier AutoPlan's `reuse` of the same program and
    arguments (a search again under another budget: its Problem is not built again,
    nor a plan it realized)."""
    t0, c0 = time.perf_counter(), time.thread_time()
    ties = {k: i for k, i in (ties or {}).items() if out_shardings[k] is None or is_auto(out_shardings[k])}
    names = list(names) if names is not None else [f"argument {i}" for i in range(len(graph.inputs))]
    auto_in = [i for i, s in enumerate(in_shardings) if is_auto(s)]
    auto_out = [k for k, s in enumerate(out_shardings) if is_auto(s)]
    given_in = [s if isinstance(s, Sharding) else None for s in in_shardings]
    given_out = [s if isinstance(s, Sharding) else None for s in out_shardings]
    budget = argument_budget if argument_budget is not None else \
        None if memory_limit is None else ARGUMENT_SHARE * memory_limit
    reuse = reuse if reuse is not None else {}
    pb = reuse.get("problem")
    if pb is None:
        pb = reuse["problem"] = build(graph, mesh, list(in_shardings), list(out_shardings), machine, network,
                                      names, ties)
    realized = reuse.setdefault("judged", {})
    plans, choices, searched_total = {}, {}, {}
    for method, choice in solve(pb, budget):
        ins, outs = list(given_in), list(given_out)
        for i in auto_in:
            ins[i] = pb.inputs[i].makes[choice[id(pb.inputs[i])]][graph.inputs[i]]
        for k in auto_out:
            node = pb.outputs.get(k)
            if node is not None:
                outs[k] = node.reads[0][1][choice[id(node)]]
        for k, i in ties.items():
            outs[k] = ins[i]
        fit = budget is None or memory(pb, choice) <= budget
        searched_total[method] = (not fit, total(pb, choice))
        plans[method], choices[method] = (ins, outs), choice
    # each of the search's plans is judged whole (its own model does not see what the
    # partitioner and the passes after it make, nor how propagation lays out a loop's
    # body from its carries), in the order its
    # own model ranks them; plans realized alike are made once (judge)
    judged = sorted(choices, key=lambda n: (searched_total[n], list(choices).index(n)))
    candidates = {n: plans[n] for n in judged}
    if auto_in:
        v = graph.inputs
        base = [baseline(v[i].shape, mesh) if i in auto_in else given_in[i] for i in range(len(v))]
        whole = [Sharding(mesh, (None,) * v[i].ndim) if i in auto_in else given_in[i] for i in range(len(v))]
        named = [("baseline", base), ("replicated", whole)]
        # (not under a memory budget: its state whole fits the arguments' share while
        # its activations overshoot the limit, which the share does not see)
        data = data_parallel(graph, mesh, auto_in, given_in, ties) if budget is None else None
        if data is not None:
            named.insert(1, ("data parallel", data))
        for name, ins in named:
            outs = list(given_out)
            for k, i in ties.items():
                outs[k] = ins[i]
            candidates[name] = (ins, outs)
    seconds, fits, held, made, hints, estimated = {}, {}, {}, {}, {}, set()

    def judge(name, ins, outs, hint=None):
        """The plan propagated (keeping `hint`) and partitioned, and its modelled seconds."""
        key = (tuple(ins), tuple(outs), tuple(sorted((hint or {}).items())))
        held[name] = sum(local_bytes(x.shape, x.dtype, s) for x, s in zip(graph.inputs, ins) if s is not None)
        for other, got in made.items():
            if got[0] == key:           # realized as an earlier plan: its program, not made again
                made[name], seconds[name], fits[name] = got, seconds[other], fits[other]
                return
        got = realized.get(key)
        if got is None:
            g = propagate(graph, mesh, _named(ins, in_shardings), _named(outs, out_shardings), hint)
            p = partition(g)
            t = program_seconds(p, mesh, machine, network, buckets=True, unknown_trips=WHILE_TRIPS)["seconds"]
            got = realized[key] = (g, p, t)
        made[name] = (key, got[0], got[1])
        seconds[name] = got[2]
        fits[name] = budget is None or held[name] <= budget

    unsplit = total(pb, {id(n): 0 for n in pb.nodes})      # (options are listed unsplit first)
    for name, (ins, outs) in candidates.items():
        if name == "replicated" and unsplit > NEAR * min(seconds.values()):
            # far slower by the search's model: priced by it, not made (see NEAR)
            seconds[name], fits[name] = unsplit, True
            estimated.add(name)
            continue
        if budget is None and name in searched_total and name != judged[0] \
                and searched_total[name][1] > NEAR * searched_total[judged[0]][1]:
            # a search's plan its own model finds far slower than the best one's: the same
            # (not under a memory budget: there what the plan made holds decides first)
            seconds[name], fits[name] = searched_total[name][1], not searched_total[name][0]
            estimated.add(name)
            continue
        judge(name, ins, outs)
    searched = min([n for n in judged if n not in estimated], key=lambda n: (not fits[n], seconds[n], judged.index(n)))
    # the search's plan, its interior followed: where propagation (from the arguments
    # alone) lays out some value otherwise than the search chose, every value the search
    # laid out is kept as it chose (keeping only the diverging ones moves others: the
    # program would be neither the search's nor propagation's)
    ins, outs = candidates[searched]
    follow = {}
    if diverging(graph, pb, choices[searched], made[searched][1]):
        follow = searched_layouts(graph, pb, choices[searched])
    if follow:
        name = f"{searched}, followed"
        candidates[name], hints[name], choices[name] = (ins, outs), follow, choices[searched]
        judge(name, ins, outs, follow)
    else:
        # the arguments only elementwise ops read (an optimizer's state) whole: their split
        # serves their update alone, and propagation, which moves splits through
        # elementwise ops first, may carry it into the rest of the program (a followed
        # plan keeps the interior as the search chose: no split is carried)
        state = _state_only(graph, auto_in)
        alt = [Sharding(mesh, (None,) * graph.inputs[i].ndim) if i in state else s for i, s in enumerate(ins)]
        if state and alt != ins:
            name = f"{searched}, state whole"
            candidates[name], choices[name] = (alt, [alt[ties[k]] if k in ties else o for k, o in enumerate(outs)]), \
                choices[searched]
            judge(name, *candidates[name])
    plans = candidates
    while True:
        made_plans = [n for n in plans if n not in estimated]
        fitting = [n for n in made_plans if fits[n]]
        if fitting:
            best = min(fitting, key=lambda n: (seconds[n], list(plans).index(n)))
        else:
            # none holds its arguments within the budget (an even split of them over
            # the mesh is a few bytes over a budget of their bytes over the devices: the
            # scalars are whole on each): the one holding least, not the fastest (which
            # holds them whole, and a run then needs more than the limit)
            best = min(made_plans, key=lambda n: (held[n], seconds[n], list(plans).index(n)))
        # an estimate (the search's model, not the whole program's) below the best plan
        # made is made and judged too: no figure reported beats the plan kept
        cheaper = [n for n in plans if n in estimated and (fits[n] or not fits[best]) and seconds[n] < seconds[best]]
        if not cheaper:
            break
        for n in cheaper:
            estimated.discard(n)
            judge(n, *plans[n])
    ins, outs = plans[best]
    plan = AutoPlan(list(ins), list(outs), best, searched, seconds, 0.0,
                    size={"ops": ops_in(graph), "nodes": len(pb.nodes), "edges": len(pb.edges),
                          "pairs": int(sum(e.small.size for e in pb.edges)),
                          "merged_ops": sum(max(len(n.ops) - 1, 0) for n in pb.nodes)},
                    hints=hints.get(best, {}), programs=made[best][1:], estimated=estimated, reuse=reuse,
                    keys={n: got[0] for n, got in made.items()})
    plan.argument_bytes = float(sum(local_bytes(x.shape, x.dtype, s) for x, s in zip(graph.inputs, ins)
                                    if s is not None))
    plan.why = _why(pb, choices[best if best in choices else searched], auto_in, names, ins, budget, graph)
    plan.solve_seconds = time.perf_counter() - t0
    plan.solve_cpu_seconds = time.thread_time() - c0
    return plan


def ops_in(graph) -> int:
    """The ops of `graph`, those of the graphs its ops hold (a loop's body) too."""
    return sum(1 + sum(ops_in(v) for v in op.attrs.values() if hasattr(v, "ops") and hasattr(v, "inputs"))
               for op in graph.ops)


def _named(shardings, like):
    """`shardings` with the names `like` (jit's Shardings) gives its leaves, for errors and
    explain: propagation then makes the program lowering would."""
    names = getattr(like, "names", None)
    if names is None:
        return list(shardings)
    return type(like)(shardings, names, getattr(like, "leaves", None))


def searched_layouts(graph, pb, choice) -> dict:
    """{(op index, result index): Sharding} of every value of `graph` an op node of the
    search lays out, as its option in `choice` does (settled: no pending sum)."""
    where = {}
    for oi, op in enumerate(graph.ops):
        for ri, r in enumerate(op.results):
            where[r] = (oi, ri)
    out = {}
    for node in pb.nodes:
        if node.what != "op":
            continue
        for v, s in node.makes[choice[id(node)]].items():
            if v in where:
                out[where[v]] = s.for_rank(v.ndim).replace(partial=())
    return dict(sorted(out.items()))


def diverging(graph, pb, choice, propagated) -> dict:
    """The part of searched_layouts that `propagated` (the global program propagated)
    lays out otherwise."""
    out = {}
    for (oi, ri), want in searched_layouts(graph, pb, choice).items():
        v = propagated.ops[oi].results[ri]
        if v.sharding is None or v.sharding.for_rank(v.ndim).replace(partial=()) != want:
            out[(oi, ri)] = want
    return out


def _state_only(graph, auto_in) -> set:
    """The chosen arguments that only elementwise ops read."""
    readers = {}
    for op in graph.ops:
        for o in op.operands:
            readers.setdefault(o, []).append(op.opdef.fusion == "elementwise")
    return {i for i in auto_in if readers.get(graph.inputs[i]) and all(readers[graph.inputs[i]])}


def _why(pb, choice, auto_in, names, ins, budget, graph) -> list:
    """Per chosen argument: its layout, the runner-up with every other node as chosen, by
    how much the model says the step would slow, and what decided."""
    out = []
    base = total(pb, choice)
    held = sum(n.memory[choice[id(n)]] for n in pb.nodes)
    touching = {}
    for e in pb.edges:
        touching.setdefault(id(e.src), []).append(e)
        if e.dst is not e.src:
            touching.setdefault(id(e.dst), []).append(e)
    for i in auto_in:
        node = pb.inputs[i]
        cur = choice[id(node)]
        kept = ins[i]
        # the step's seconds with this node's option changed alone: its own cost and its
        # edges' change, the rest of the sum stays
        alt = node.cost - node.cost[cur]
        for e in touching.get(id(node), []):
            if e.src is node and e.dst is node:
                alt = alt + np.diagonal(e.costs) - e.costs[cur, cur]
            elif e.src is node:
                alt = alt + e.costs[:, choice[id(e.dst)]] - e.costs[cur, choice[id(e.dst)]]
            else:
                alt = alt + e.costs[choice[id(e.src)], :] - e.costs[choice[id(e.src)], cur]
        best, best_t = None, None
        for j, m in enumerate(node.makes):
            if m[graph.inputs[i]] == kept:
                continue
            t = base + float(alt[j])
            if best_t is None or t < best_t - 1e-15:
                best, best_t = j, t
        w = {"leaf": names[i] if i < len(names) else f"argument {i}", "chosen": kept.text(),
             "bytes": local_bytes(graph.inputs[i].shape, graph.inputs[i].dtype, kept), "runner_up": None, "decided_by": "the cost model"}
        if best is not None:
            r = node.makes[best][graph.inputs[i]]
            w.update(runner_up=r.text(), delta=best_t - base, runner_up_bytes=float(node.memory[best]))
            if budget is not None and best_t < base and held - node.memory[cur] + node.memory[best] > budget:
                w["decided_by"] = "memory_limit"
            elif best_t < base:
                w["decided_by"] = "the whole program's modelled time (the plan kept is not the search's)"
        out.append(w)
    return out
