"""spmd.AUTO in jit: the search (sharding/auto/) run on a traced program, with what jit
knows that the graph does not: the leaves' names and which results are the next value
of which argument (a training step's new parameters and optimizer state)."""
from __future__ import annotations

from ..ir.mesh import is_auto


def next_values(in_tree, out_tree, inputs, outputs) -> dict:
    """{result leaf: argument leaf} where a top-level part of the results has the tree,
    shapes and dtypes of an argument (`return loss, new_params, new_opt` for arguments
    `params, opt, batch`): each such part is that argument's next value, matched in order."""
    def parts(tree, values):
        out, at = [], 0
        kids = tree.children if tree.kind in ("tuple", "list") else (tree,)
        for c in kids:
            n = c.num_leaves
            out.append((c, [(tuple(v.shape), str(v.dtype)) for v in values[at:at + n]], at))
            at += n
        return out
    ins, used, ties = parts(in_tree, inputs), set(), {}
    for tree, avals, at in parts(out_tree, outputs):
        if not avals:
            continue
        for i, (t2, a2, at2) in enumerate(ins):
            if i not in used and t2 == tree and a2 == avals:
                used.add(i)
                ties.update({at + j: at2 + j for j in range(len(avals))})
                break
    return ties


def choose_auto(graph, mesh, in_sh, out_sh, in_tree, out_tree, network, memory_limit, tried=()):
    """Replace the AUTO leaves of in_sh / out_sh (jit's Shardings) in place by the
    search's choice; -> (its AutoPlan, the global stages it ran: lower_graph's `done`).
    `tried`: the keys (AutoPlan.keys) of plans whose compiled program needed more than
    memory_limit: then of the plans the search made and not tried, the one whose
    planned peak is least is kept (None, None where none is left)."""
    from ..compiler.pipeline import global_stages
    from ..sharding.auto import choose
    from .rates import rates
    machine, network, _ = rates(network, None, mesh.size)
    ties = next_values(in_tree, out_tree, graph.inputs, graph.outputs) if out_tree is not None else {}
    stages, timings = global_stages(graph, mesh)
    plan = choose(stages["optimized"], mesh, in_sh, out_sh, machine, network, memory_limit,
                  in_sh.leaves, ties)
    if memory_limit is not None and plan.programs:
        # the search holds the arguments to a share of the limit; where the plan's
        # activations and temporaries leave them less, search again with the arguments
        # held to less by what the planned peak (the partitioned program as the native
        # backend plans it, before the compiler's passes) overshoots, down to an even split
        # of them over the mesh (FSDP-like: parameters and optimizer state split); kept
        # where it holds less (the compiled program's peak is then fit's to check: the
        # estimate here, before the compiler's passes, is high and counts the gathered
        # weights a split adds at their worst)
        from ..backends import planned_memory
        peak = _estimated_peak(planned_memory(plan.programs[1], "llvm"))
        if peak > memory_limit:
            room = max(plan.argument_bytes - (peak - memory_limit), plan.argument_bytes / mesh.size)
            again = choose(stages["optimized"], mesh, in_sh, out_sh, machine, network,
                           memory_limit, in_sh.leaves, ties, argument_budget=room, reuse=plan.reuse)
            # (either keeps the names of the other's plans: _least_memory may take one)
            first, second = dict(plan.keys), {f"{n} (arguments held to less)": k for n, k in again.keys.items()}
            plan.keys = {**first, **second}
            if again.programs and again.argument_bytes < plan.argument_bytes:
                again.solve_seconds += plan.solve_seconds
                again.solve_cpu_seconds += plan.solve_cpu_seconds
                again.keys = {**again.keys, **{f"{n} (first search)": k for n, k in first.items()}}
                plan = again
    if plan.keys.get(plan.chosen) in tried:
        plan = _least_memory(plan, tried, [i for i, x in enumerate(in_sh) if is_auto(x)], graph.inputs)
        if plan is None:
            return None, None
    plan.reuse = {}             # (not kept with the Lowered)
    in_sh[:] = plan.in_shardings
    out_sh[:] = plan.out_shardings
    if plan.programs:
        # the kept plan's program, propagated and partitioned in the search, as those stages'
        stages = {k: v for k, v in stages.items() if k != "optimized"}
        stages["propagated"], stages["partitioned"] = plan.programs
        stages["optimized"] = stages["partitioned"]
    return plan, (stages, timings)


def _estimated_peak(prof) -> int:
    """The planned peak of a program before the compiler's passes, with the outputs not
    yet written at its busiest step counted there too: the native schedule makes a
    segment's output buffers when the segment starts (backends/llvm/schedule.py), and a
    training step's segment is most of it."""
    k = prof.peak_step
    late = sum(b.nbytes for b in prof.own if b.end >= prof.n and b.start > k and not b.arena)
    return prof.peak_bytes + late


def _least_memory(plan, tried, auto_in, inputs):
    """`plan` turned to the plan its searches made (plan.reuse: the partitioned program
    of each) that is not `tried` and whose planned peak, before the compiler's passes, is
    least (of equal peaks, the faster by the model); None where every one was tried. The
    model's seconds leave memory out, and the search's budget counts the arguments alone:
    a faster plan may hold more activations (a batch not split where communication is
    dear) or more buffers compiled (a native schedule of many collectives)."""
    from ..backends import planned_memory
    from ..sharding.auto.problem import local_bytes
    names = {}
    for name, key in plan.keys.items():
        names.setdefault(key, name)
    left = [(key, got) for key, got in plan.reuse.get("judged", {}).items() if key not in tried]
    if not left:
        return None
    key, (propagated, partitioned, seconds) = min(
        left, key=lambda kv: (_estimated_peak(planned_memory(kv[1][1], "llvm")), kv[1][2]))
    faster = plan.chosen
    plan.chosen = names[key]
    plan.in_shardings, plan.out_shardings, plan.hints = list(key[0]), list(key[1]), dict(key[2])
    plan.programs = (propagated, partitioned)
    plan.note = (f"memory_limit decided: compiled, the {faster} plan needed more than the limit"
                 + (f" (and {len(tried) - 1} plan(s) tried after it)" if len(tried) > 1 else "")
                 + "; of the plans the search made, the one planned to hold least is kept")
    for w, i in zip(plan.why, auto_in):
        s = plan.in_shardings[i]
        w.update(chosen=s.text(), bytes=local_bytes(inputs[i].shape, inputs[i].dtype, s), runner_up=None,
                 decided_by="memory_limit (the faster plans need more, compiled)")
    return plan
