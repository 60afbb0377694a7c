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

When that is not enough (a layer's activation is a matmul's result, or more than one
cheap op away from one), `segment_plans` recomputes whole segments of layers from the
activation held at each segment's start, as a hand grouping in spmd.checkpoint does.

The caller (jit/jitted.py) applies the choice with rematerialize (remat.py), plans again,
and repeats while the peak is over the limit and something is left to choose; when
nothing is, it reports what is live at the peak and cannot be freed.
"""
from __future__ import annotations

from .remat import Uses, chain, flops

def busiest_step(profile) -> int:
    """The step that holds the most activations and temporaries. (The peak adds the
    arena, sized for that step, to the most outputs held at once, which is usually at
    the end: what recomputing can lower is held at this step, not at the peak's.)"""
    if profile.n == 0:
        return -1
    held = [0] * profile.n
    for b in profile.own:
        if b.start < 0 or b.constant or b.end >= profile.n:
            continue
        for k in range(max(b.start, 0), b.end + 1):
            held[k] += b.nbytes
    return max(range(profile.n), key=lambda k: held[k])


def held_activations(graph, profile, uses) -> list:
    """[(buffer, value, position)] of the activations held across the busiest step of
    `profile`, each with the position of its first use after that step (those used
    again inside the graph only)."""
    k = busiest_step(profile)
    if k < 0:
        return []
    at = uses.index.get(profile.ops[k], -1)
    held = []
    for b in profile.live_at(k):
        if profile.kind(b, k) != "activations":
            continue
        v = profile.value_at(b, k)
        p = uses.first_after(v, at)
        if p is not None and p < len(graph.ops):
            held.append((b, v, p))
    return held


def choose(graph, profile, excess) -> dict:
    """{value: [position]}: what to recompute, and before which op, to bring the peak of
    `profile` down by `excess` bytes (as far as the values held across it allow)."""
    uses = Uses(graph)
    cands = []
    for b, v, p in held_activations(graph, profile, uses):
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


def segment_plans(graph, profile):
    """Ways to hold fewer of the activations held across the busiest step, as a hand
    grouping of layers in spmd.checkpoint does: the activations, in the order the
    backward pass first reads them, cut into groups of g (g = 2, 3, ...); each group keeps
    the one read last (the input of its segment of layers) and makes the others again,
    together, before the group's first read, from that one (matmuls and all). Held
    across the peak then: one value per group, plus one group's recomputed values while
    its backward pass runs. Yields (g, {value: [position]}), fewest recomputed first."""
    uses = Uses(graph)
    acts = [(p, uses.index[v.producer], v) for _, v, p in held_activations(graph, profile, uses)
            if v.producer is not None]
    acts.sort(key=lambda t: (t[0], -t[1]))
    seen = set()
    for g in range(2, len(acts) + 1):
        groups = [acts[i:i + g] for i in range(0, len(acts), g)]
        key = tuple(len(x) for x in groups)
        if key in seen:
            continue
        seen.add(key)
        dropped = {v for grp in groups for _, _, v in grp[:-1]}
        where, memo = {}, {}
        for grp in groups:
            first = grp[0][0]
            memo = {}
            for _, _, v in grp[:-1]:
                c = chain(v, first, uses, dropped, deep=True, memo=memo)
                for x in c or ():
                    where.setdefault(x, [])
                    if first not in where[x]:
                        where[x].append(first)
        if where:
            yield g, where
