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

import numpy as np

MAX_CHAIN = 4


def nbytes(v) -> int:
    return int(v.size) * np.dtype(v.dtype).itemsize


def flops(op) -> float:
    f = op.opdef.flops
    if f is None:
        return float(sum(r.size for r in op.results))
    return float(f([o.aval for o in op.operands], op.results[0].aval, op.attrs))


def cheap(op) -> bool:
    """No more work than its size: an elementwise op, a re-index, a collective."""
    return op.opdef.needs_comm or flops(op) <= 4 * max(op.results[0].size, 1)


def recomputable(op) -> bool:
    return op is not None and len(op.results) == 1 and not op.opdef.subgraphs and op.operands != () \
        and op.opdef.identity_of is None


class Uses:
    """Where each value of the program is read (op positions; outputs read at the end)."""

    def __init__(self, graph):
        self.index = {op: i for i, op in enumerate(graph.ops)}
        self.at = {}
        for q, op in enumerate(graph.ops):
            for o in op.operands:
                self.at.setdefault(o, []).append(q)
        for v in graph.outputs:
            self.at.setdefault(v, []).append(len(graph.ops))
        self.inputs = set(graph.inputs)

    def first_after(self, v, p):
        later = [q for q in self.at.get(v, ()) if q > p]
        return min(later) if later else None

    def there(self, v, p) -> bool:
        """Is v in memory at position p anyway (an argument, or read at p or later)?"""
        if v in self.inputs or v.producer is None or not v.producer.operands:
            return True
        return any(q >= p for q in self.at.get(v, ()))


def chain(v, p, uses, depth=0):
    """The values to recompute at p to have v again there (v last), or None."""
    op = v.producer
    if not recomputable(op) or depth > MAX_CHAIN or (depth and not cheap(op)):
        return None
    out = []
    for o in op.operands:
        if uses.there(o, p) or o in out:
            continue
        sub = chain(o, p, uses, depth + 1)
        if sub is None:
            return None
        out += [s for s in sub if s not in out]
    return out + [v]


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

