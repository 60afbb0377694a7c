"""The stages of a program after tracing, built and run here, in order:

    traced -> inline -> roll -> simplify_global -> dce -> propagated -> partitioned -> simplify -> cse -> dce
           -> blocks_late -> hoist -> regather -> late_reads -> frees_first -> combine -> schedule -> exchanges -> barriers

(propagated and partitioned only with a mesh; the last stage's graph is "optimized").
Each stage is a plain Graph -> Graph function. `lower` is what jit calls; the runner is
the one place that

- writes every stage's program as text under SPMD_DUMP=dir (`<fn>.<i>.<stage>.txt`);
- records each stage's time (SPMD_TIMINGS=1 prints them to stderr; `Lowered.timings`);
- checks the graph after every stage with ir.verify when SPMD_VERIFY=1 (the tests set it),
  with what that stage promises: a global program has no per-device ops before
  partitioning, every value has a sharding after propagation. A pass that breaks an
  invariant is named at once.

Code generation is the backends' (spmd/backends): they take the "optimized" graph.
"""
from __future__ import annotations

import os
import sys
import time
from typing import Callable, NamedTuple

from ..ir.verify import verify
from ..sharding.partition import partition
from ..sharding.propagate import propagate
from . import program_cache
from .passes.bodies import in_bodies
from .passes.scalar_reads import batch_scalar_reads
from .passes import (blocks_late, combine_collectives, cse, dce, drop_barriers, exchanges_late, frees_first,
                     hoist_invariants, inline_calls, recompute_late_reads, regather, roll_loops, schedule_async,
                     simplify)


class Stage(NamedTuple):
    name: str
    run: Callable
    # what the program is after this stage: "global" (one program over global shapes),
    # "sharded" (global, every value carrying its sharding), "per_device" (partitioned),
    # or None (as it was before the stage)
    makes: str | None = None


# the passes run on the per-device program, in order; the last one's result is "optimized"
# (blocks_late: a collective's received blocks concatenated where they are read, not
# copied out of its receive buffer; hoist: loop-invariant work out of loop bodies; regather: parameters gathered again for
# each use, not held (after cse, which would merge the copies); late_reads: cheap values
# made again where read late, not held; frees_first: of independent ops in a row, the one
# that frees memory first; combine: gradient
# all-reduces in buckets; schedule: each started early, finished late; exchanges: each
# halo exchange moved to its first use, so a step's exchanges stand together; barriers: a
# checkpoint's recomputation is ordinary ops from here on)
OPTIMIZE = (("simplify", in_bodies(simplify)), ("cse", in_bodies(cse)), ("dce", in_bodies(dce)),
            ("blocks_late", in_bodies(blocks_late)), ("hoist", hoist_invariants), ("regather", in_bodies(regather)),
            ("late_reads", in_bodies(recompute_late_reads)), ("frees_first", in_bodies(frees_first)),
            ("combine", in_bodies(combine_collectives)), ("schedule", in_bodies(schedule_async)),
            ("exchanges", in_bodies(exchanges_late)), ("barriers", in_bodies(drop_barriers)))


def stages(mesh, in_shardings, out_shardings, hints=None) -> list:
    """Every stage after tracing, for a program on `mesh` (None: one device, nothing to
    propagate or partition). `hints`: {(op index, result index): Sharding} of the global
    program's values propagation is to keep (spmd.AUTO's interior choices)."""
    out = [Stage("inline", in_bodies(inline_calls), "global"), Stage("roll", roll_loops, "global"),
           Stage("simplify_global", in_bodies(simplify), "global"),
           Stage("dce", in_bodies(dce), "global")]
    if mesh is not None:
        out += [Stage("scalar_reads", in_bodies(batch_scalar_reads), "global"),
                Stage("propagated", lambda g: propagate(g, mesh, in_shardings, out_shardings, hints), "sharded"),
                Stage("partitioned", partition, "per_device")]
    return out + [Stage(name, fn) for name, fn in OPTIMIZE]


def global_stages(graph, mesh):
    """The traced `graph` through the stages before propagation -> (stages' graphs by
    name, "optimized" naming the global program propagation receives, what spmd.AUTO's
    search lays out; seconds per stage). `lower` takes it back as `done`."""
    plan = [st for st in stages(mesh, None, None) if st.makes == "global"]
    return run(plan, graph)


def global_program(graph, mesh):
    return global_stages(graph, mesh)[0]["optimized"]


def lower(graph, mesh, in_shardings, out_shardings, done=None, hints=None):
    """The traced `graph` through every stage, or every stage loaded from the disk cache
    when another process lowered the same program. `done`: global_stages(graph, mesh),
    run already (spmd.AUTO's search ran them): they are not run again. `hints`: as
    stages'. Returns (stages' graphs by name, in order, "optimized" naming the last;
    seconds per stage)."""
    plan = stages(mesh, in_shardings, out_shardings, hints)
    out, timings = program_cache.lower(lambda: run_after(plan, graph, done), graph, mesh, in_shardings,
                                       out_shardings, _hints_text(hints))
    if "cache" in timings and verifying():
        kinds = _kinds(plan)
        for name, g in out.items():
            verify(g, name, kinds.get(name))
    return out, timings


def verifying() -> bool:
    return os.environ.get("SPMD_VERIFY", "") not in ("", "0")


def run(plan, graph, name=None, kind="global"):
    """Run the stages of `plan` (Stages, or (name, fn) pairs that keep the program's
    kind) from `graph` (the "traced" stage). Returns (every stage's graph by name, in
    order, with "optimized" naming the last; seconds per stage). `kind`: what `graph` is
    (as Stage.makes)."""
    name = name or graph.name
    dump = os.environ.get("SPMD_DUMP")
    check = verifying()
    out, timings = {"traced": graph}, {}
    if check:
        verify(graph, "traced", kind)
    _dump(dump, name, 0, "traced", graph)
    for i, stage in enumerate(plan, 1):
        stage = Stage(*stage)
        t0 = time.perf_counter()
        graph = stage.run(graph)
        timings[stage.name] = time.perf_counter() - t0
        kind = stage.makes or kind
        if check:
            verify(graph, stage.name, kind)
        out[stage.name] = graph
        _dump(dump, name, i, stage.name, graph)
    out["optimized"] = graph
    if os.environ.get("SPMD_TIMINGS", "") not in ("", "0"):
        total = sum(timings.values())
        rows = ", ".join(f"{s} {t * 1e3:.1f}" for s, t in timings.items())
        print(f"spmd: {name}: stages (ms) {rows}; total {total * 1e3:.1f}", file=sys.stderr)
    return out, timings


def run_after(plan, graph, done=None):
    """run(plan, graph), the stages of `done` (run's result for the first of them) not
    run again."""
    if done is None:
        return run(plan, graph)
    stages_done, timings_done = done
    names = [n for n in stages_done if n not in ("traced", "optimized")]
    first = [Stage(*st).name for st in plan[:len(names)]]
    if first != names:
        raise ValueError(f"the stages run already ({names}) are not the first of the plan ({first})")
    kind = "global"
    for st in plan[:len(names)]:
        kind = Stage(*st).makes or kind
    out, timings = run(plan[len(names):], stages_done["optimized"], graph.name, kind)
    merged = {k: v for k, v in stages_done.items() if k != "optimized"}
    merged.update((k, v) for k, v in out.items() if k != "traced")
    return merged, {**timings_done, **timings}


def _hints_text(hints) -> str:
    if not hints:
        return ""
    return repr(sorted((k, s.text()) for k, s in hints.items()))


def _kinds(plan) -> dict:
    """Stage name -> the kind of program it leaves (for graphs loaded from the cache)."""
    kinds, kind = {"traced": "global"}, "global"
    for stage in plan:
        stage = Stage(*stage)
        kind = stage.makes or kind
        kinds[stage.name] = kind
    kinds["optimized"] = kind
    return kinds


def _dump(d, name, i, stage, graph):
    if not d:
        return
    from ..ir.text import print_graph
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"{name}.{i}.{stage}.txt"), "w") as f:
        f.write(print_graph(graph))
