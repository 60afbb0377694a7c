"""What a per-device program holds in memory during one run, step by step.

A backend describes a run as the buffers it allocates: each holds one or more values
(written in place over one another, or read through views of it), is allocated at a
step (or comes in with the call: an argument) and is released after the last step that
reads any of its values (or leaves with the results: an output). The LLVM backend's
temporaries share one arena, allocated once for every run (memory.py places them), or
live in an output's buffer before the output is written (that buffer is then made before
the first step, and the temporary holds no bytes of its own); the other buffers
(outputs, collectives' results, ops run through numpy) are made per call.

From them, `MemoryProfile` gives the bytes live at each step, the busiest step, what is
live there (each value with the op and user line that made it) and the bytes by kind:

- arguments: the inputs (parameters, optimizer state, the batch), held by the caller;
- constants: arrays the program keeps (folded constants);
- outputs: buffers made for the results (not those written into a donated argument);
- activations: values made before the step and read after it, held meanwhile (in a
  training step: what the backward pass reads of the forward pass);
- temporaries: values the step itself makes or reads for the last time.

`peak_bytes` is what is allocated at once at worst: the arguments, the constants, the
whole arena and the scratch, and the largest set of per-call buffers live at one step.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

KINDS = ("arguments", "constants", "outputs", "activations", "temporaries")


def nbytes(v) -> int:
    return int(v.size) * np.dtype(v.dtype).itemsize


@dataclass
class Buffer:
    values: list             # (step, value) of the values it holds, in the order they are written
    nbytes: int
    start: int               # the step that writes it first; -1: it comes in with the call
    end: int                 # the last step that reads it; the step count: it leaves with the results
    arena: bool = False      # a place in the arena of temporaries
    constant: bool = False   # kept by the program between runs
    outer: object = None     # the join result it is made for, when operands are computed inside it
    host: object = None      # the output whose buffer holds it before the output is written


@dataclass
class MemoryProfile:
    ops: list                # per step, the op it runs (a fused kernel: the op of its root)
    buffers: list
    arena_bytes: int = 0
    scratch_bytes: int = 0
    _live: list = field(default=None, repr=False)

    @property
    def n(self) -> int:
        return len(self.ops)

    def live(self, buf: Buffer, k: int) -> bool:
        return buf.host is None and (buf.start <= k <= buf.end or buf.start < 0 or buf.constant)

    @property
    def own(self) -> list:
        """The buffers that hold bytes of their own (not a temporary in an output's)."""
        return [b for b in self.buffers if b.host is None]

    def live_bytes(self) -> np.ndarray:
        """Bytes live at each step (the arena counted by what it holds then), scratch included."""
        if self._live is None:
            n = self.n
            d = np.zeros(n + 2, np.int64)
            for b in self.own:
                held = b.start < 0 or b.constant         # (the caller's arguments, the program's constants)
                s = 0 if held else b.start
                e = n - 1 if held else min(b.end, n - 1)
                if e >= s:
                    d[s] += b.nbytes
                    d[e + 1] -= b.nbytes
            self._live = np.cumsum(d)[:max(n, 1)] + self.scratch_bytes
        return self._live

    def per_call_bytes(self, outputs=True) -> np.ndarray:
        """Bytes of the buffers made per call (not the arena, arguments, constants; nor the
        outputs' unless `outputs`) live at each step."""
        n = self.n
        d = np.zeros(n + 2, np.int64)
        for b in self.own:
            if b.arena or b.start < 0 or b.constant or (not outputs and b.end >= n):
                continue
            e = min(b.end, n - 1)
            if e >= b.start:
                d[b.start] += b.nbytes
                d[e + 1] -= b.nbytes
        return np.cumsum(d)[:max(n, 1)]

    @property
    def temporary_bytes(self) -> int:
        """What a run needs besides its arguments, constants and outputs (XLA's temp
        allocation): the arena, scratch, and the most other per-call buffers live at once."""
        most = int(self.per_call_bytes(outputs=False).max()) if self.n else 0
        return self.arena_bytes + self.scratch_bytes + most

    @property
    def peak_step(self) -> int:
        return int(np.argmax(self.live_bytes())) if self.n else -1

    @property
    def peak_bytes(self) -> int:
        held = sum(b.nbytes for b in self.own if (b.start < 0 or b.constant) and not b.arena)
        most = int(self.per_call_bytes().max()) if self.n else 0
        return held + self.arena_bytes + self.scratch_bytes + most

    def kind(self, buf: Buffer, k: int) -> str:
        if buf.start < 0:
            return "arguments"
        if buf.constant:
            return "constants"
        if buf.end >= self.n:
            return "outputs"
        return "activations" if buf.start < k < buf.end else "temporaries"

    def live_at(self, k: int) -> list:
        """The buffers live at step k, largest first."""
        return sorted((b for b in self.buffers if self.live(b, k)), key=lambda b: -b.nbytes)

    def value_at(self, buf: Buffer, k: int):
        """The value `buf` holds at step k (the last written by then)."""
        return current_value(buf, k)

    def by_kind(self, k: int) -> dict:
        out = dict.fromkeys(KINDS, 0)
        for b in self.live_at(k):
            out[self.kind(b, k)] += b.nbytes
        return out

    def report(self, names=None, top=12) -> dict:
        """The figures `lowered.memory()` shows: `peak_bytes`, and at the busiest step its
        op and user line, the bytes live by kind, and the largest values live there.
        `names`: Value -> its name in the printed program."""
        k = self.peak_step
        names = names or {}
        rows = []
        # (a join's buffer whose parts are all its operands' holds no bytes of its own)
        held = [b for b in self.live_at(k) if b.nbytes]
        for b in held[:top]:
            v = b.outer if b.outer is not None else current_value(b, k)
            op = v.producer
            rows.append({"value": names.get(v) or v.name or "", "shape": tuple(v.shape), "dtype": v.dtype,
                         "bytes": b.nbytes, "kind": self.kind(b, k),
                         "op": op.name if op is not None else "argument", "loc": op.loc if op is not None else None})
        at = self.ops[k] if 0 <= k < self.n else None
        # the temporaries computed in outputs' buffers (counted there, not in the arena)
        hosted = []
        for b in sorted((b for b in self.buffers if b.host is not None), key=lambda b: -b.nbytes)[:top]:
            v = b.outer if b.outer is not None else b.values[0][1]
            op = v.producer
            hosted.append({"value": names.get(v) or v.name or "", "shape": tuple(v.shape), "dtype": v.dtype,
                           "bytes": b.nbytes, "output": names.get(b.host) or b.host.name or "",
                           "op": op.name if op is not None else "argument", "loc": op.loc if op is not None else None})
        return {"peak_bytes": self.peak_bytes, "temporary_bytes": self.temporary_bytes,
                "peak": {"step": k, "of": self.n, "live_bytes": int(self.live_bytes()[k]) if self.n else 0,
                         "op": at.name if at is not None else None, "loc": at.loc if at is not None else None,
                         "by_kind": self.by_kind(k), "live": rows},
                "temporaries_in_outputs": hosted}


def current_value(buf: Buffer, k: int):
    """The value a buffer holds at step k (the last written by then)."""
    v = buf.values[0][1]
    for s, w in buf.values[1:]:
        if s <= k:
            v = w
    return v


def profile_of_ops(graph) -> MemoryProfile:
    """The numpy backend's run: every op a step, every result a new array but a view's
    (a view keeps the buffer it looks into alive)."""
    return profile(graph, [(op, list(op.operands), list(op.results), ()) for op in graph.ops])


def profile(graph, steps, in_place=None, arena=(), arena_bytes=0, scratch_bytes=0, joined=None,
            kept=(), in_outputs=None, made=None) -> MemoryProfile:
    """`steps`: (op, values read, results, values written into buffers the backend plans)
    per step, in order. `in_place`: written value -> the value whose buffer it is written
    into; `arena`: written values placed in the arena; `joined`: value -> the value whose
    buffer it is placed inside (an operand computed in its place in a join's result);
    `kept`: values the program makes once and keeps (besides constants); `in_outputs`:
    written value -> (the first value of an output's buffer, offset): temporaries in that
    buffer before the output is written (the buffer is made before the first step). A
    result that is not written is a view of its first operand when its op is a view
    (OpDef.view: numpy returns one), else a new array."""
    in_place, joined, arena, kept = in_place or {}, joined or {}, set(arena), set(kept)
    in_outputs, made = in_outputs or {}, made or {}
    of = {}                      # value -> its Buffer
    buffers = []

    def new(v, start, **kw):
        b = Buffer([(start, v)], nbytes(v), start, start, **kw)
        buffers.append(b)
        of[v] = b
        return b

    for v in graph.inputs:
        new(v, -1)
    n = len(steps)
    for k, (op, reads, results, written) in enumerate(steps):
        for v in reads:
            b = of.get(v)
            if b is not None:
                b.end = max(b.end, k)
        written = set(written)
        for r in results:
            src = in_place.get(r)
            if r in written and src is not None and src in of:
                of[r] = of[src]
                of[r].values.append((k, r))
            elif r in written or r in made:
                new(r, k, arena=r in arena, host=in_outputs[r][0] if r in in_outputs else None)
            elif op.opdef.reindex.view and op.operands and op.operands[0] in of:
                of[r] = of[op.operands[0]]              # a view: the base stays alive while it is read
            elif op.name == "constant" or r in kept:
                new(r, k, constant=True)
            else:
                new(r, k)
    for v in graph.outputs:
        b = of.get(v)
        if b is not None and b.start >= 0 and not b.constant:
            b.end = n
    for h, _ in in_outputs.values():
        of[h].start = 0
    for v, (first, last) in made.items():
        b = of.get(v)
        if b is not None and b.start >= 0 and not b.arena and b.host is None:
            b.start, b.end = min(b.start, first), max(b.end, last)
    for v, outer in joined.items():
        # an operand computed in its place in the join's buffer: that part of the buffer
        # is held from the operand's first write, the rest from the join
        inner, b = of.get(v), of.get(outer)
        if inner is None or b is None or inner is b:
            continue
        inner.end = max(inner.end, b.end)
        b.nbytes -= inner.nbytes
        b.outer = outer
    return MemoryProfile([op for op, *_ in steps], buffers, arena_bytes, scratch_bytes)
