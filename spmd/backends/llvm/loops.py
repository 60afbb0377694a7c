"""How the LLVM backend runs a scan (the lowering table's "scan_loop" row): natively, as
one instruction of its segment, when the body runs as one native segment (scan_instrs);
else from Python, calling its body's executable once per iteration, as the op's
reference does (ir/ops/control.py), but with no array made per iteration (run_scan).

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
straight into their row of the stacked result. Both ways use the same buffers.
"""
from __future__ import annotations

import numpy as np

from . import native
from .exchange import FromComm
from .steps import Here, Scratch


def scan_overwrites(op):
    """A carried result may be written over its initial value: the first iteration reads
    it, the last writes the result (two iterations at least: a lone one would read and
    write the same buffer)."""
    a = op.attrs
    return tuple((j, j) for j in range(a["num_carry"])) if a["length"] >= 2 else ()


def buffers(first, target, length, spare, same=lambda x, y: x is y):
    """The buffer each of `length` iterations writes a carried value into: the last one
    `target`, no iteration the one it reads (iteration 0 reads `first`), alternating
    with `spare(0)`; `spare(1)` once, when target is `first` and the count is odd (target
    may be `first` only for two iterations or more; `same` says whether two buffers are
    one)."""
    seq = [target if (length - 1 - i) % 2 == 0 else spare(0) for i in range(length)]
    if length and same(seq[0], first):
        seq[0] = spare(1)
    return seq


def same_memory(x, y) -> bool:
    """The same buffer (two views of one arena slot are different objects)."""
    return x is y or (x.__array_interface__["data"][0] == y.__array_interface__["data"][0] and x.nbytes == y.nbytes
                      and x.nbytes > 0)


def run_scan(exe, op, env, comm, slots, nthreads):
    a = op.attrs
    graph = a["body"]
    body = exe.subprograms[id(graph)]
    nc, nx, length = a["num_carry"], a["num_xs"], a["length"]
    args = [env[o] for o in op.operands]
    carry, xs, rest = args[:nc], args[nc:nc + nx], args[nc + nx:]
    targets = [exe.buffer(r, slots, env) for r in op.results]
    plans = [buffers(carry[j], targets[j], length, lambda k, j=j: exe.loop_spare(op, j, k), same_memory)
             for j in range(nc)]
    order = range(length - 1, -1, -1) if a["reverse"] else range(length)
    for step, i in enumerate(order):
        rows = [y[i, ...] for y in targets[nc:]]          # (views, also of 0-d rows)
        into = {j: plans[j][step] for j in range(nc)}
        # (a body whose output did not land where it was given leaves its own array: a
        # planned buffer is never the one the iteration reads)
        into = {j: b for j, b in into.items() if not same_memory(b, carry[j])}
        into.update((nc + j, r) for j, r in enumerate(rows))
        out = body(carry + [x[i] for x in xs] + rest, comm, into=into)
        carry = out[:nc]
        for r, o in zip(rows, out[nc:]):
            if o is not r:
                r[...] = o
    for j in range(nc):
        if not same_memory(carry[j], targets[j]):
            np.copyto(targets[j], carry[j])
    for r, x in zip(op.results, targets):
        env[r] = x


# -- natively ---------------------------------------------------------------------------------
def scan_instrs(sched, op):
    """The whole scan as one instruction of the enclosing segment, when its body runs as
    one native segment: native.LOOP_IR runs the body's instructions `length` times. Each
    iteration reads and writes the carried buffers `buffers` plans, which follow one
    pattern at iteration 0, another at 1, then two alternating ones: the body's argument
    blocks are laid out four times, one per pattern, so no carried pointer changes while
    the loop runs; the rows of scanned inputs and outputs are set per iteration (a
    stride). None (the loop runs from Python): a body that needs Python, or one that
    writes a result anywhere but the buffer it is given."""
    a = op.attrs
    nc, nx, length = a["num_carry"], a["num_xs"], a["length"]
    if length == 0 or any(o in sched.views for o in op.operands):
        return None
    body = sched.exe.subprograms[id(a["body"])]
    bsched = body.schedule(sched.nthreads, sched.fixed_blas, sched.native_comm)
    seg = bsched.only_segment()
    homes = None if seg is None else _homes(body, bsched, seg)
    if homes is None:
        return None
    sched.kept.append(bsched)           # (its constants are read where they are)
    bmem = body.memory
    arena = Scratch(bmem.arena_bytes, ("loop arena", id(a["body"])))
    kept = updated_in_place(body, bsched, seg, nc)
    bufs = [_carried(sched.exe.memory, op, j, length, j in kept) for j in range(nc)]

    def row(x, off):
        """(entry at iteration 0, bytes to the next iteration's) of a scanned row"""
        n = _nbytes(x) // length
        return ((x, off + (length - 1) * n), -n) if a["reverse"] else ((x, off), n)

    strided = []                        # (variant, instruction, position, entry at iteration 0, stride)
    blocks = []                         # per variant: the entries of each instruction
    for var in range(4):
        blocks.append([])
        for k, (_, entries) in enumerate(seg.instrs):
            out = []
            for pos, e in enumerate(entries):
                if isinstance(e, tuple) and not isinstance(e[0], Scratch):
                    v, off = e
                    if v in bmem.offset_of:
                        e = (arena, bmem.offset_of[v] + off)
                    elif v in bsched.consts:
                        e = bsched.consts[v].ctypes.data + off
                    else:
                        kind, p = homes[v]
                        if p < nc:
                            buf = bufs[p][var][0 if kind == "in" else 1]
                            e = (buf[0], buf[1] + off)
                        elif kind == "in" and p >= nc + nx:
                            e = (op.operands[p], off)
                        else:
                            x = op.operands[p] if kind == "in" else op.results[p]
                            strided.append((var, k, pos) + row(x, off))
                            e = 0
                out.append(e)
            blocks[-1].append(out)
    n = len(seg.instrs)
    progs_at = native.LOOP_HEAD + 3 * len(strided)
    starts, at = [], progs_at + 4 * 2 * n
    for instrs in blocks:
        starts.append([])
        for out in instrs:
            starts[-1].append(at)
            at += len(out)
    stop = FromComm(lambda c: c.native_exchange.status.ctypes.data) if sched.native_comm else 0
    entries = [length, n, len(strided)] + [Here(progs_at + 2 * n * var) for var in range(4)] + [stop]
    for var, k, pos, first, step in strided:
        entries += [Here(starts[var][k] + pos), first, step]
    for var in range(4):
        entries += [x for k, (fn, _) in enumerate(seg.instrs) for x in (fn, Here(starts[var][k]))]
    for var in range(4):
        for k, out in enumerate(blocks[var]):
            entries += [Here(e.k + starts[var][k]) if isinstance(e, Here) else e for e in out]
    return [(sched.helpers["spmd_loop"], entries)]


def _nbytes(v) -> int:
    return int(v.size) * np.dtype(v.dtype).itemsize


def _carried(mem, op, j, length, kept=False):
    """[(read, write) buffer entries of carried value j at iterations 0, 1, 2, 3], as
    `buffers` plans them (its spares are this loop's scratch); `kept`: every iteration
    writes the result's buffer, the ones after the first also reading it."""
    first, target = (op.operands[j], 0), (op.results[j], 0)
    if kept:
        return [(first, target)] + [(target, target)] * 3
    spare = [(Scratch(_nbytes(op.results[j]), ("loop spare", id(op), j, k)), 0) for k in (0, 1)]
    write = [target if (length - 1 - i) % 2 == 0 else spare[0] for i in range(4)]
    if write[0] is target and _same_buffer(mem, op.results[j], op.operands[j]):
        write[0] = spare[1]
    return [(first if i == 0 else write[i - 1], write[i]) for i in range(4)]


def updated_in_place(body, bsched, seg, nc) -> set:
    """The carried values an iteration may update in the buffer it reads (a loop's
    `y[i] = v`): carried output j is a block copy (lowering_table's row:
    steps.update_instrs copies the operand, then writes the window) of carried input j, which no
    instruction reads after it and no other value is a view of, and the segment's
    instructions run in the steps' order (no exchange halves to reorder). The update's
    copy of its operand is then a copy of a buffer onto itself, which spmd_scopy skips,
    and the loop moves only the window each iteration instead of the whole array."""
    if any(fn == bsched.helpers["spmd_permute_post"] for fn, _ in seg.instrs):
        return set()
    g, steps = body.graph, body.steps
    pos = {}
    for k in seg.steps:
        st = steps[k]
        for v in (st.kernel.outputs if hasattr(st, "kernel") else st.results):
            pos[v] = k
    out = set()
    for j in range(nc):
        x, y = g.inputs[j], g.outputs[j]
        op = y.producer
        if op is None or op.opdef.lowering != "block_copy" or op.operands[0] is not x or y not in pos \
                or g.inputs.count(x) != 1 or x in g.outputs or y in bsched.views \
                or any(bsched.views.get(v) is x for v in bsched.views):
            continue
        late = any(k > pos[y] and x in (steps[k].kernel.inputs if hasattr(steps[k], "kernel") else steps[k].operands)
                   for k in seg.steps)
        if not late and body.out_first.get(j) is y:
            out.add(j)
    return out


def _same_buffer(mem, r, x) -> bool:
    """Does the memory plan put result r in x's buffer?"""
    if mem.in_place.get(r) is x:
        return True
    return r in mem.offset_of and x in mem.offset_of and mem.offset_of[r] == mem.offset_of[x]


def _homes(body, bsched, seg):
    """value -> ("in", input position) | ("out", output position): where each value the
    segment reads or writes outside the body's arena lives; None when an output is not
    written where the caller gives it (an input or constant passed through, a view, two
    outputs of one buffer) or the body writes into an input."""
    g = body.graph
    firsts = {}
    for k, v in enumerate(g.outputs):
        f = body.out_first.get(k)
        if f is None or f in firsts or v in bsched.views or v in bsched.consts:
            return None
        firsts[f] = k
    ins = {}
    for p, v in enumerate(g.inputs):
        ins.setdefault(v, p)
    written = {v for v, _ in seg.allocs}
    homes = {}
    for _, entries in seg.instrs:
        for e in entries:
            if not isinstance(e, tuple) or isinstance(e[0], Scratch):
                continue
            v = e[0]
            if v in body.memory.offset_of or v in bsched.consts or v in homes:
                continue
            u = v
            while u not in firsts and u not in ins and u in body.memory.in_place:
                u = body.memory.in_place[u]
            if u in firsts:
                homes[v] = ("out", firsts[u])
            elif u in ins and v not in written and v in ins:
                homes[v] = ("in", ins[u])
            else:
                return None
    return homes
