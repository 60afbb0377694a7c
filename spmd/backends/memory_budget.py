"""spmd.jit(memory_limit=bytes): recompute what a program holds until its plan fits the
limit per device, or say that it cannot and why.

`fit(graph, backend, donated, limit)` plans the program's memory as the backend would
(memory_profile: no code is compiled), and while the peak is over the limit, recomputes
the values held across the busiest step that are cheapest to make again
(compiler/passes/budget.py chooses, remat.py rewrites), then plans again. When nothing
held there can be recomputed (what is live is arguments, outputs, or values made and
read at that step), it raises MemoryLimitError naming the peak, its op and user line, and
the values live there with the op and line that made each (arguments by the caller's
names), and what to do about them.
"""
from __future__ import annotations

from ..compiler.passes import budget, rematerialize
from ..errors import MemoryLimitError
from . import planned_memory as planned

ROUNDS = 12
# fits of a program against its compiled peak (jit: the plan leaves room for what the
# compiled program holds beyond it, measured after each fit)
FITS = 3
LEVELS = 3             # segments within segments, at most this deep
SINGULAR = {"arguments": "argument", "constants": "constant", "outputs": "output", "activations": "activation",
            "temporaries": "temporary"}


def mb(n) -> str:
    """Bytes for people: 512 B, 12.0 KB, 1.5 MB, 3.2 GB."""
    for unit, size in (("GB", 2**30), ("MB", 2**20), ("KB", 2**10)):
        if abs(n) >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} B"


def fit(graph, backend, donated, limit, names=(), what="the program", beyond=0):
    """The program, with values recomputed so that its planned peak per device is at most
    `limit` bytes; (graph, its MemoryProfile). `names`: per graph input, what the
    caller calls it. `beyond`: bytes the compiled program holds more than this plan
    says (its native schedule's: jitted.py measures them), which the plan leaves room
    for. First the cheapest values held across the peak, one by one; when
    that is not enough, segments of layers (budget.segment_plans), the fewest
    recomputed that fit."""
    given, limit = limit, limit - beyond
    prof = planned(graph, backend, donated)
    if prof.peak_bytes <= limit:
        return graph, prof
    held = sum(b.nbytes for b in prof.buffers if b.start < 0 or b.constant)
    if held > limit:                        # (arguments over the limit: nothing helps)
        raise MemoryLimitError(too_big(graph, prof, given, names, what, beyond))
    best = _rounds(graph, prof, backend, donated, limit)
    start = (graph, prof)
    for _ in range(LEVELS):
        if best[1].peak_bytes <= limit:
            return best
        # segments of the program as it is (at the next level: of what the best plan of
        # this one still holds across its peak, as nested checkpoints would)
        level = None
        for _, where in budget.segment_plans(*start):
            g = rematerialize(start[0], where)
            got = _rounds(g, planned(g, backend, donated), backend, donated, limit)
            if got[1].peak_bytes <= limit:
                return got
            if level is None or got[1].peak_bytes < level[1].peak_bytes:
                level = got
        if level is None or level[1].peak_bytes >= best[1].peak_bytes:
            break
        best = start = level
    if best[1].peak_bytes <= limit:
        return best
    raise MemoryLimitError(too_big(*best, given, names, what, beyond))


def _rounds(graph, prof, backend, donated, limit):
    """Values held across the peak recomputed, cheapest per byte first, planning again
    after each round: (graph, profile) with the lowest peak reached."""
    best = (graph, prof)
    for _ in range(ROUNDS):
        if prof.peak_bytes <= limit:
            break
        where = budget.choose(graph, prof, prof.peak_bytes - limit)
        if not where:
            break
        graph = rematerialize(graph, where)
        prof = planned(graph, backend, donated)
        if prof.peak_bytes < best[1].peak_bytes:
            best = (graph, prof)
    return best


def too_big(graph, prof, limit, names, what, beyond=0) -> str:
    """The MemoryLimitError's message; `beyond`: what the compiled program holds more
    than `prof` counts (counted in its peak here)."""
    from ..ir.text import name_values
    k = prof.peak_step
    named = dict(zip(graph.inputs, names))
    printed = name_values(graph)
    rows = []
    for b in prof.live_at(k)[:10]:
        v = prof.value_at(b, k)
        kind = SINGULAR[prof.kind(b, k)]
        if v in named:
            rows.append(f"  {mb(b.nbytes):>9}  argument {named[v]} {v.dtype}{list(v.shape)}")
        else:
            op = v.producer
            rows.append(f"  {mb(b.nbytes):>9}  {kind} {printed.get(v, '')} {v.dtype}{list(v.shape)} made by "
                        f"{op.name if op is not None else 'argument'}"
                        + (f" at {op.loc}" if op is not None and op.loc else ""))
    by = prof.by_kind(k)
    at = prof.ops[k] if k >= 0 else None
    where = f" at {at.name}" + (f" ({at.loc})" if at is not None and at.loc else "") if at is not None else ""
    args = by["arguments"]
    hint = ("the arguments alone take " + mb(args) + " per device: split the parameters and optimizer state "
            "over more devices (mesh.sharding('data', None) on them: FSDP) or run on more devices"
            if args > limit else
            "recompute more of the forward pass (spmd.checkpoint on blocks of layers), split the batch over "
            "more devices, or raise memory_limit")
    extra = f" (with {mb(beyond)} its native schedule holds besides)" if beyond > 0 else ""
    return (f"{what} needs {mb(prof.peak_bytes + beyond)} per device at its peak{where}{extra}, over "
            f"memory_limit={mb(limit)}, "
            f"and recomputing what it holds there cannot bring it under: live there "
            f"(arguments {mb(args)}, activations {mb(by['activations'])}, temporaries {mb(by['temporaries'])}, "
            f"outputs {mb(by['outputs'])}), largest first:\n" + "\n".join(rows) + f"\nTo fit: {hint}.")


def plan_checkpoints(written, without, backend, donated):
    """Of a program with spmd.checkpoint as written, the same program with nothing
    recomputed (`without`: its checkpoints' recomputation merged back into the forward
    pass), and that one with segments of layers recomputed as the planner groups them
    (budget.segment_plans: neighbouring checkpoints merged), the one with the lowest
    planned peak; the one as written where it is as low. (graph, its profile, which:
    "as written", "merged" or "held"). The values are the same bits in each: a
    recomputation runs the same kernels on the same values as the forward pass."""
    best = (written, planned(written, backend, donated), "as written")
    prof = planned(without, backend, donated)
    if prof.peak_bytes < best[1].peak_bytes:
        best = (without, prof, "held")
    for _, where in budget.segment_plans(without, prof):
        g = rematerialize(without, where)
        p = planned(g, backend, donated)
        if p.peak_bytes < best[1].peak_bytes:
            best = (g, p, "merged")
    return best
