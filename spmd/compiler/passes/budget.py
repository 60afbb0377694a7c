"""What to recompute so that a program fits a memory budget (spmd.jit(memory_limit=...)).

Given a per-device program and its memory profile (backends/memory_profile.py: the
buffers a run holds, step by step, as the backend plans them), `choose` picks values held
across the busiest step (made before it, read after it: in training, what the backward
pass reads of the forward pass) to compute again before their first read after it,
cheapest per byte first, until the bytes they free cover the excess. A value can be
recomputed where its operands are there anyway (arguments, or values read at or after
that point); an operand that is not is recomputed with it when that is cheap (an
elementwise op or a re-index: a chain of at most MAX_CHAIN ops). Ops with bodies or
several results are not recomputed.

The caller (staging.py) applies the choice with rematerialize (remat.py), plans again,
and repeats while the peak is over the limit and something is left to choose; when
nothing is, it reports what is live at the peak and cannot be freed.
"""
from __future__ import annotations

from .remat import Uses, chain, flops

def choose(graph, profile, excess) -> dict:
    """{value: [position]}: what to recompute, and before which op, to bring the peak of
    `profile` down by `excess` bytes (as far as the values held across it allow)."""
    uses = Uses(graph)
    k = profile.peak_step
    if k < 0:
        return {}
    at = uses.index.get(profile.ops[k], -1)
    cands = []
    for b in profile.live_at(k):
        if profile.kind(b, k) != "activations":
            continue
        v = profile.value_at(b, k)
        p = uses.first_after(v, at)
        if p is None or p >= len(graph.ops):
            continue
        c = chain(v, p, uses)
        if c is None:
            continue
        cost = sum(flops(x.producer) for x in c)
        cands.append((cost / max(b.nbytes, 1), b.nbytes, v, p, c))
    cands.sort(key=lambda t: (t[0], -t[1]))
    where, freed = {}, 0
    for _, size, v, p, c in cands:
        if freed >= excess:
            break
        for x in c:
            where.setdefault(x, [])
            if p not in where[x]:
                where[x].append(p)
        freed += size
    return where

