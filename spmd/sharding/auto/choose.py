"""spmd.AUTO: choose the shardings jit was told to choose.

    choose(graph, mesh, in_shardings, out_shardings, machine, network, memory_limit)
        -> AutoPlan: a Sharding for every leaf (the given ones kept), and why

1. the search (problem.py, solve.py) lays out every argument, op and chosen result of
   the global program for the fewest modelled seconds, the arguments within a share of
   memory_limit: exactly where the problem is small, and by two refined greedy passes;
2. the arguments' and results' layouts of each plan found, and two plain ones beside them (the baseline:
   each chosen argument's largest dim split over the largest mesh axis that divides it;
   and every chosen argument replicated), each go through propagation and the
   partitioner, and the modelled seconds of the program each makes (program_cost.py)
   decide: the search's plan stands unless one of those is faster. So a plan is never
   slower, by the model, than the baseline.

Only the leaves jit was told to choose are reported: the rest of the program is
propagation's, from them, as with shardings a user writes.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from ...ir.mesh import Sharding, is_auto
from ..partition import partition
from ..propagate import propagate
from .problem import build, local_bytes
from .program_cost import program_seconds
from .solve import solve, total

# of memory_limit, what the search lets the arguments hold per device (the rest is for
# activations and temporaries; the memory planner then fits the whole or says it cannot)
ARGUMENT_SHARE = 0.6


@dataclass
class AutoPlan:
    in_shardings: list                 # a Sharding or None per argument leaf
    out_shardings: list                # a Sharding or None per result leaf
    chosen: str                        # the plan kept: a search's ("exact", "refine greedy",
                                       # "refine unsplit"), "baseline" or "replicated"
    method: str                        # the search's best plan, by the whole program's model
    seconds: dict = field(default_factory=dict)     # plan -> modelled seconds per step
    solve_seconds: float = 0.0
    why: list = field(default_factory=list)         # per chosen leaf: a dict (see explain_lines)
    size: dict = field(default_factory=dict)        # nodes, edges, option pairs of the search

    def explain_lines(self) -> list:
        out = [f"spmd.AUTO: kept the {self.chosen} plan (searched in {self.solve_seconds:.2f} s; "
               f"modelled step " + ", ".join(f"{k} {v * 1e3:.3f} ms" for k, v in self.seconds.items()) + ")"]
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


def choose(graph, mesh, in_shardings, out_shardings, machine, network, memory_limit=None, names=None,
           ties=None) -> AutoPlan:
    """`ties`: {result position: argument position} of results that are that argument's
    next value (problem.build): unless given, they take the argument's layout."""
    t0 = time.perf_counter()
    ties = {k: i for k, i in (ties or {}).items() if out_shardings[k] is None or is_auto(out_shardings[k])}
    names = list(names) if names is not None else [f"argument {i}" for i in range(len(graph.inputs))]
    auto_in = [i for i, s in enumerate(in_shardings) if is_auto(s)]
    auto_out = [k for k, s in enumerate(out_shardings) if is_auto(s)]
    given_in = [s if isinstance(s, Sharding) else None for s in in_shardings]
    given_out = [s if isinstance(s, Sharding) else None for s in out_shardings]
    budget = None if memory_limit is None else ARGUMENT_SHARE * memory_limit
    pb = build(graph, mesh, list(in_shardings), list(out_shardings), machine, network, names, ties)
    plans, choices = {}, {}
    for method, choice in solve(pb, budget):
        ins, outs = list(given_in), list(given_out)
        for i in auto_in:
            ins[i] = pb.inputs[i].makes[choice[id(pb.inputs[i])]][graph.inputs[i]]
        for k in auto_out:
            node = pb.outputs.get(k)
            if node is not None:
                outs[k] = node.reads[0][1][choice[id(node)]]
        if (ins, outs) not in plans.values():       # (two methods may find one plan)
            plans[method] = (ins, outs)
            choices[method] = choice
    # the same, with the arguments only elementwise ops read (an optimizer's state) whole:
    # their split serves their update alone, and propagation, which moves splits through
    # elementwise ops first, may carry it into the rest of the program
    state = _state_only(graph, auto_in)
    for method in list(choices):
        ins, outs = plans[method]
        alt = [Sharding(mesh, (None,) * graph.inputs[i].ndim) if i in state else s for i, s in enumerate(ins)]
        if state and (alt, outs) not in plans.values():
            plans[f"{method}, state whole"] = (alt, outs)
            choices[f"{method}, state whole"] = choices[method]
    if auto_in:
        v = graph.inputs
        plans["baseline"] = ([baseline(v[i].shape, mesh) if i in auto_in else given_in[i]
                              for i in range(len(v))], given_out)
        plans["replicated"] = ([Sharding(mesh, (None,) * v[i].ndim) if i in auto_in else given_in[i]
                                for i in range(len(v))], given_out)
    seconds, fits = {}, {}
    for name, (ins, outs) in plans.items():
        outs = list(outs)
        for k, i in ties.items():
            outs[k] = ins[i]
        plans[name] = (ins, outs)
        g = partition(propagate(graph, mesh, ins, outs))
        seconds[name] = program_seconds(g, mesh, machine, network)["seconds"]
        held = sum(local_bytes(x.shape, x.dtype, s) for x, s in zip(graph.inputs, ins) if s is not None)
        fits[name] = budget is None or held <= budget
    order = [n for n in plans if fits[n]] or list(plans)
    best = min(order, key=lambda n: (seconds[n], list(plans).index(n)))
    ins, outs = plans[best]
    searched = min(choices, key=lambda n: (seconds[n], list(plans).index(n)))
    plan = AutoPlan(list(ins), list(outs), best, searched, seconds, 0.0,
                    size={"nodes": len(pb.nodes), "edges": len(pb.edges),
                          "pairs": int(sum(e.small.size for e in pb.edges)),
                          "merged_ops": sum(max(len(n.ops) - 1, 0) for n in pb.nodes)})
    plan.why = _why(pb, choices[best if best in choices else searched], auto_in, names, ins, budget, graph)
    plan.solve_seconds = time.perf_counter() - t0
    return plan


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
    for i in auto_in:
        node = pb.inputs[i]
        cur = choice[id(node)]
        kept = ins[i]
        best, best_t = None, None
        for j, m in enumerate(node.makes):
            if m[graph.inputs[i]] == kept:
                continue
            alt = dict(choice)
            alt[id(node)] = j
            t = total(pb, alt)
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
