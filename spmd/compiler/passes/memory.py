"""Memory planning: assign the temporaries of a step sequence to reusable buffers (slots)
by liveness, so the peak memory of a run stays near its largest live set.

A temporary is a value a kernel or a dot writes that is not a program output. Its slot
is busy from the step that writes it to the last step that reads it *or any value that
may alias it*: ops run by numpy (reshape, transpose, slice, ...) may return views of their
operands, so their results are assumed to alias every operand. A slot freed by a step is
only reused by later steps (never for the outputs of the step that frees it), so no
kernel reads and writes the same buffer.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class MemoryPlan:
    slot_of: dict          # Value -> slot index
    slot_bytes: list       # slot index -> size in bytes
    free_after: list       # step index -> Values to drop after that step
    peak_bytes: int        # the largest total of live temporaries at any step

    def __str__(self):
        return (f"{len(self.slot_bytes)} slots, {sum(self.slot_bytes)} bytes "
                f"(largest live set {self.peak_bytes} bytes)")


def _written(step):
    """Values a step writes into planned buffers (kernel outputs, dot results)."""
    if hasattr(step, "kernel"):
        return list(step.kernel.outputs)
    if getattr(step, "name", None) == "dot_general":
        return list(step.results)
    return []


def _reads(step):
    if hasattr(step, "kernel"):
        return list(step.kernel.inputs)
    return list(step.operands)


def _results(step):
    return _written(step) if hasattr(step, "kernel") else list(step.results)


def plan_memory(graph, steps) -> MemoryPlan:
    n = len(steps)
    outs = set(graph.outputs)
    alias = {}                 # value -> set of planned values whose buffer it may share
    define, last = {}, {}
    planned = []
    for k, step in enumerate(steps):
        for v in _reads(step):
            last[v] = k
        written = set(_written(step))
        for r in _results(step):
            define[r] = k
            last.setdefault(r, k)
            if r in written and r not in outs:
                alias[r] = {r}
                planned.append(r)
            elif r not in written:
                alias[r] = set().union(*[alias.get(o, set()) for o in _reads(step)])
    for v in outs:
        last[v] = n
    busy_until = {}
    for v, roots in alias.items():
        for r in roots:
            busy_until[r] = max(busy_until.get(r, 0), last.get(v, define[v]))

    slot_of, slot_bytes, free = {}, [], []
    by_step = {}
    for r in planned:
        by_step.setdefault(define[r], []).append(r)
    release = {}
    for r in planned:
        release.setdefault(busy_until[r], []).append(r)
    live = peak = 0
    for k in range(n):
        for r in by_step.get(k, []):
            need = r.size * np.dtype(r.dtype).itemsize
            fits = [s for s in free if slot_bytes[s] >= need]
            if fits:
                s = min(fits, key=lambda s: slot_bytes[s])
            elif free:
                s = max(free, key=lambda s: slot_bytes[s])
                slot_bytes[s] = need
            else:
                s = len(slot_bytes)
                slot_bytes.append(need)
            if s in free:
                free.remove(s)
            slot_of[r] = s
            live += need
        peak = max(peak, live)
        for r in release.get(k, []):
            free.append(slot_of[r])
            live -= r.size * np.dtype(r.dtype).itemsize

    free_after = [[] for _ in range(n)]
    for v, k in last.items():
        if v not in outs and k < n:
            free_after[k].append(v)
    return MemoryPlan(slot_of, slot_bytes, free_after, peak)
