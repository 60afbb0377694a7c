"""How the LLVM backend runs a scan (the lowering table's "scan_loop" row): from Python,
calling its body's executable once per iteration, as the op's reference does
(ir/ops/control.py), but with no array made per iteration.

A stencil's time loop carries a grid whose new value is computed from the old one's
neighbours, so an iteration cannot write it over the one it reads: it writes it over the
one the iteration before read (double buffering), a buffer the body's executable is
given for its output (Executable `into`). The buffers alternate so that the last
iteration writes the scan's result where the memory plan wants it: a new output array,
a temporary in the arena, or the carried operand's own buffer when that operand dies
here and is ours (an argument the caller donated, or one the function writes in place:
then the loop makes no array at all). The second buffer of each carried value is kept
by the executable between calls, per thread (a third one when the carried operand's own
buffer must take an odd number of iterations' results). The scanned outputs are written
straight into their row of the stacked result.
"""
from __future__ import annotations

import numpy as np


def scan_overwrites(op):
    """A carried result may be written over its initial value: the first iteration reads
    it, the last writes the result (two iterations at least: a lone one would read and
    write the same buffer)."""
    a = op.attrs
    return tuple((j, j) for j in range(a["num_carry"])) if a["length"] >= 2 else ()


def buffers(first, target, length, spare):
    """The buffer each of `length` iterations writes a carried value into: the last one
    `target`, no iteration the one it reads (iteration 0 reads `first`), alternating
    with `spare(0)`; `spare(1)` once, when target is `first` and the count is odd (target
    may be `first` only for two iterations or more)."""
    seq = [target if (length - 1 - i) % 2 == 0 else spare(0) for i in range(length)]
    if length and seq[0] is first:
        seq[0] = spare(1)
    return seq


def run_scan(exe, op, env, comm, slots, nthreads):
    a = op.attrs
    graph = a["body"]
    body = exe.subprograms[id(graph)]
    nc, nx, length = a["num_carry"], a["num_xs"], a["length"]
    args = [env[o] for o in op.operands]
    carry, xs, rest = args[:nc], args[nc:nc + nx], args[nc + nx:]
    targets = [exe.buffer(r, slots, env) for r in op.results]
    plans = [buffers(carry[j], targets[j], length, lambda k, j=j: exe.loop_spare(op, j, k))
             for j in range(nc)]
    order = range(length - 1, -1, -1) if a["reverse"] else range(length)
    for step, i in enumerate(order):
        rows = [y[i, ...] for y in targets[nc:]]          # (views, also of 0-d rows)
        into = {j: plans[j][step] for j in range(nc)}
        # (a body whose output did not land where it was given leaves its own array: a
        # planned buffer is never the one the iteration reads)
        into = {j: b for j, b in into.items() if b is not carry[j]}
        into.update((nc + j, r) for j, r in enumerate(rows))
        out = body(carry + [x[i] for x in xs] + rest, comm, into=into)
        carry = out[:nc]
        for r, o in zip(rows, out[nc:]):
            if o is not r:
                r[...] = o
    for j in range(nc):
        if carry[j] is not targets[j]:
            np.copyto(targets[j], carry[j])
    for r, x in zip(op.results, targets):
        env[r] = x
