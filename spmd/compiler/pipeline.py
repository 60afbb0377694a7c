"""One pass pipeline: a list of named stages, each a plain Graph -> Graph function, run
in order by one runner. The runner is the one place that

- writes every stage's program as text under SPMD_DUMP=dir (`<fn>.<i>.<stage>.txt`);
- records each stage's time (SPMD_TIMINGS=1 prints them to stderr; `Lowered.timings`);
- checks the graph after every stage with ir.verify when SPMD_VERIFY=1 (the tests set it),
  so a pass that breaks an invariant is named at once.

Which stages run is the caller's list (api.py builds it: propagate and partition only
with a mesh); the optimisation passes are `OPTIMIZE` below.
"""
from __future__ import annotations

import os
import sys
import time

from ..ir.verify import verify
from .passes import combine_collectives, cse, dce, schedule_async, simplify

# the passes run on the per-device program, in order; the last one's result is "optimized"
# (combine: gradient all-reduces in buckets; schedule: each started early, finished late)
OPTIMIZE = (("simplify", simplify), ("cse", cse), ("dce", dce), ("combine", combine_collectives),
            ("schedule", schedule_async))


def verifying() -> bool:
    return os.environ.get("SPMD_VERIFY", "") not in ("", "0")


def run(stages, graph, name=None):
    """Run `stages` [(stage name, Graph -> Graph)] from `graph` (the "traced" stage).
    Returns (every stage's graph by name, in order, with "optimized" naming the last;
    seconds per stage)."""
    name = name or graph.name
    dump = os.environ.get("SPMD_DUMP")
    check = verifying()
    out, timings = {"traced": graph}, {}
    if check:
        verify(graph, "traced")
    _dump(dump, name, 0, "traced", graph)
    for i, (stage, fn) in enumerate(stages, 1):
        t0 = time.perf_counter()
        graph = fn(graph)
        timings[stage] = time.perf_counter() - t0
        if check:
            verify(graph, stage)
        out[stage] = graph
        _dump(dump, name, i, stage, graph)
    out["optimized"] = graph
    if os.environ.get("SPMD_TIMINGS", "") not in ("", "0"):
        total = sum(timings.values())
        rows = ", ".join(f"{s} {t * 1e3:.1f}" for s, t in timings.items())
        print(f"spmd: {name}: stages (ms) {rows}; total {total * 1e3:.1f}", file=sys.stderr)
    return out, timings


def _dump(d, name, i, stage, graph):
    if not d:
        return
    from ..ir.text import print_graph
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"{name}.{i}.{stage}.txt"), "w") as f:
        f.write(print_graph(graph))
