"""Memory planning for a scheduled per-device program (a backend's list of steps).

What a step writes into a buffer the plan controls: a fused kernel's outputs and a dot's
result. Everything else (collectives, indexing ops, ops run through their numpy reference)
makes its own arrays, and those ops may return *views* of their operands (reshape,
transpose, slice, ...), so their results are assumed to alias every operand -- but a
collective's: the communicator's results are new arrays (transports/communicator.py), so a
gradient reduce-scattered leaves its full buffer free at once.

Decisions made once at compile time, as XLA's buffer assignment makes them:

1. **In place.** A kernel that reads an input only at the index of the element it writes
   (elementwise ops on the way from that input to the outputs: no reduction, no
   broadcast/transpose/slice/reshape of it) may write an output computed from that input
   (so the element is loaded before the output's element is stored over it: a kernel
   stores each output as soon as it has it) of the same shape and dtype into that
   input's buffer, when the input is not read after this kernel (nor any
   value that may alias it: a view that is still alive pins its base), is not a program
   output, no other input of the kernel may alias it, and the buffer is ours: written
   by an earlier kernel or dot, or an argument the caller donated. The output joins the
   input's *buffer group* (one buffer, several values over time). An op whose result may
   be written over an operand is planned the same way: its OpDef says so
   (`out_may_be_operand`: all_reduce, which reads each block before writing it), or the
   backend does (`overwrites`: a scan's carried result over its initial value, which the
   first iteration reads and the last writes).
2. **Output groups.** A group that ends in a program output is allocated per call (the
   caller keeps it): every value of it is written straight into the output's array,
   so a weight gradient is computed into the new weight's buffer and updated there.
3. **One arena for the temporaries.** The other groups are temporaries: each is live
   from the step that writes its first value to the last step that reads a value of it
   (or of a view of it). They get static byte offsets in one per-thread arena (greedy by
   size: the largest first, each at the lowest offset that does not overlap a group
   whose live range meets its own), so a step allocates no temporaries at all, and the
   arena stays close to the largest live set. A buffer dying at a step is never handed
   to another output of that step except through (1).
4. **Joined in place.** The operands of a join (concatenate, OpDef `joins`, e.g. the
   gradients a combined all-reduce sums at once) are computed straight into their place
   in the join's buffer, when each is a temporary (or a same-bytes view of one: a
   reshape) whose buffer dies at the join and whose place is one contiguous range.
   Each part of the join's buffer is live from the step that writes it (an operand's
   part from the operand's first write, the copied parts from the join), not all of it
   from its first operand's: a gradient bucket takes its bytes as its gradients are
   made, and the activations of the backward pass use the rest of it until then.
5. **Temporaries in outputs' buffers.** An output's buffer holds nothing before the step
   that first writes it, so a temporary whose live range ends before that step (and
   whose bytes fit) may be computed there, as XLA's buffer assignment does: taken from
   the arena's busiest step on, largest first, while that shrinks the arena. Those
   outputs' buffers are then made before the first step (still one per call). Not an
   output written into a donated argument, one returned twice, nor any output of a
   loop's or branch's body (`in_outputs=False`: a loop gives its body buffers of its
   own, loops.py). The arena and its figures hold the rest.

`plan.report()` gives the figures (`lowered.memory()` shows them to users).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

ALIGN = 64


def nbytes(v) -> int:
    return int(v.size) * np.dtype(v.dtype).itemsize


@dataclass
class MemoryPlan:
    offset_of: dict          # Value -> byte offset in the per-thread arena (temporaries)
    arena_bytes: int         # the arena's size
    in_place: dict           # Value -> the Value whose buffer it is written into (same shape, dtype)
    free_after: list         # step index -> Values to drop after that step
    peak_bytes: int          # the largest total of live temporaries at any step
    output_bytes: int = 0    # program outputs written by steps into fresh per-call buffers
    donated: frozenset = field(default_factory=frozenset)   # input positions whose buffers may be reused
    joined: dict = field(default_factory=dict)   # join result -> operand positions already in place
    # Value -> (the first value of an output's buffer group, byte offset): temporaries
    # computed in an output's buffer before the output is written (5)
    in_outputs: dict = field(default_factory=dict)
    hosts: tuple = ()        # those outputs' first values: their buffers are made before the first step
    # Value -> the values whose memory it may lie in: the result of a step the plan does not
    # control and that makes no new array (numpy's dynamic_slice, reshape, ... may return a
    # view of an operand). Whoever orders steps by the memory they touch reads these too.
    may_view: dict = field(default_factory=dict)

    # the names the executors and older callers use
    @property
    def slot_of(self):
        return self.offset_of

    def report(self) -> dict:
        return {"temp_bytes": self.arena_bytes, "peak_live_bytes": self.peak_bytes,
                "temporaries": len(self.offset_of), "in_place": len(self.in_place),
                "in_outputs": len(self.in_outputs), "donated": sorted(self.donated)}

    def place(self, v):
        """Where v's bytes are: (None, offset in the arena), (an output's first value, offset
        in its buffer), or None (not placed by the plan)."""
        off = self.offset_of.get(v)
        return (None, off) if off is not None else self.in_outputs.get(v)

    def __str__(self):
        return (f"arena {self.arena_bytes} bytes for {len(self.offset_of)} temporaries (largest live set "
                f"{self.peak_bytes} bytes), {len(self.in_place)} written in place, {len(self.in_outputs)} in "
                f"outputs' buffers")


def _kernel(step):
    """The fused Kernel of a step (a Kernel or a backend's wrapper of one), or None."""
    k = getattr(step, "kernel", None)
    if k is not None:
        return k
    return step if hasattr(step, "root") and hasattr(step, "outputs") else None


def _written(step, writes):
    """Values a step writes into buffers the plan controls: a kernel's outputs, and the
    results of the ops the backend runs into buffers it is given (`writes(op)`)."""
    k = _kernel(step)
    if k is not None:
        return list(k.outputs)
    return list(step.results) if writes(step) else []


def _makes_new(step) -> bool:
    """A collective's result is a new array of the communicator's, a reduction's (numpy's
    or the native column sum's) a new array too: it aliases no operand. (Taking a bias
    gradient, a sum of the cotangent's rows, for a view of it kept the cotangent's buffer,
    and every buffer written in place into it, to the end of the run.)"""
    if _kernel(step) is not None or step.opdef.subgraphs:
        return False
    return step.opdef.needs_comm or step.opdef.fusion == "reduction"


def _reads(step):
    k = _kernel(step)
    return list(k.inputs) if k is not None else list(step.operands)


def _results(step):
    k = _kernel(step)
    return list(k.outputs) if k is not None else list(step.results)


def same_index_inputs(kernel) -> set:
    """The inputs of the root's shape a kernel reads only at the index of the element it
    stores: every op is elementwise or only re-indexes, there is no reduction, and no
    re-indexing op reads the input (directly or through elementwise ops). Every output
    is an ancestor of the root (or the code generator splits the kernel), so such an input
    and the elementwise values made from it are all at the root's own index."""
    ops = kernel.ops
    if any(op.opdef.fusion not in ("elementwise", "reindex") for op in ops):
        return set()
    shape = kernel.root.shape
    # pad(slice(x)) that puts every element back where it was (a partitioned write into
    # a window, out[r:-r, r:-r] += ...) reads x at the element's own index or not at all.
    # With one output nothing is stored before the last read of that index (with more, a
    # second load of x under the other index map could follow an output's store).
    aligned = _aligned_pads(kernel) if len(kernel.outputs) == 1 else set()
    starts = [o for op in ops if op.opdef.fusion != "elementwise" and op not in aligned for o in op.operands]
    bad = _inputs_reached(kernel, starts)
    return {x for x in kernel.inputs if x not in bad and x.shape == shape}


def _aligned_pads(kernel) -> set:
    """The pad ops of a kernel, and the slices they pad, that give back their slice's
    operand element for element (or the padding value): the slice's start is the pad's
    low edge, strides 1, no interior padding, the shapes equal. A slice counts only if
    every op of the kernel that reads it is such a pad."""
    users = {}
    for op in kernel.ops:
        for o in op.operands:
            users.setdefault(o, []).append(op)
    pads = set()
    for op in kernel.ops:
        if op.name != "pad" or any(op.attrs["interior"]):
            continue
        sl = op.operands[0].producer
        if (sl is None or sl.name != "slice" or sl not in kernel.ops or any(st != 1 for st in sl.attrs["stride"])
                or list(sl.attrs["start"]) != list(op.attrs["low"]) or sl.operands[0].shape != op.results[0].shape):
            continue
        pads.add(op)
    out = set(pads)
    for op in kernel.ops:
        if op.name == "slice" and all(u in pads for u in users.get(op.results[0], [None])):
            out.add(op)
    return out


def _depends_on(kernel, r) -> set:
    """The kernel's inputs r is computed from. A kernel stores an escaping output as soon as
    it is computed, so only such an input is sure to be loaded (once: the code generator
    memoises a value per index map) before r's element is stored over it."""
    return _inputs_reached(kernel, [r])


def _inputs_reached(kernel, starts) -> set:
    """The kernel inputs (values no op of the kernel makes) that `starts` are computed from."""
    members = {op.results[0]: op for op in kernel.ops}
    seen, stack, out = set(), list(starts), set()
    while stack:
        v = stack.pop()
        if v in seen:
            continue
        seen.add(v)
        op = members.get(v)
        if op is None:
            out.add(v)
        else:
            stack.extend(op.operands)
    return out


def _match(results, options) -> dict:
    """As many outputs as possible each over its own input (a maximum bipartite matching,
    by augmenting paths; a kernel has a handful of each): output -> input."""
    owner = {}

    def take(r, seen):
        for x in options[r]:
            if x in seen:
                continue
            seen.add(x)
            if x not in owner or take(owner[x], seen):
                owner[x] = r
                return True
        return False

    for r in results:
        if options.get(r):
            take(r, set())
    return {r: x for x, r in owner.items()}


def operand_written_over(op):
    """(result, operand) positions whose result its OpDef may write over the operand."""
    j = op.opdef.collective.out_may_be_operand
    return () if j is None else ((0, j),)


def plan_memory(graph, steps, writes=lambda op: False, donated=(), in_place=True,
                same_bytes=lambda op: False, overwrites=operand_written_over, in_outputs=True) -> MemoryPlan:
    """`steps`: Kernels (or wrappers with `.kernel`) and Ops, in execution order; `writes(op)`:
    does the backend run this op into a buffer it is given (a dot into BLAS's output)?
    `donated`: positions of graph inputs whose buffers the program may write into.
    `same_bytes(op)`: is op's result its (single) operand's bytes in the same order (a
    reshape the backend runs as a view)? `overwrites(op)`: (result, operand) positions of
    an op run into given buffers whose result may be written over that operand.
    `in_outputs`: may temporaries be computed in outputs' buffers (5)?"""
    n = len(steps)
    outs = set(graph.outputs)
    donated_vals = {graph.inputs[i] for i in donated}
    bufs = Buffers(graph, steps, writes, donated_vals)
    inplace = plan_in_place(bufs, steps, writes, outs, overwrites) if in_place else {}
    members = bufs.members()

    def is_temp(gid):
        return gid not in donated_vals and not any(v in outs for v in members[gid])

    inside, joined = plan_joins(bufs, steps, writes, same_bytes, is_temp)
    temps, out_bytes = temporaries(bufs, members, inside, donated_vals, outs)
    at, arena = assign_offsets(temps)
    hosted = {}
    hosts = output_hosts(bufs, members, donated_vals, graph.outputs) if in_outputs else []
    for last in (False, True):
        got, rest = place_in_outputs(temps, hosts, n, last)
        if got:
            at2, arena2 = assign_offsets(rest)
            if arena2 < arena:          # (else the outputs' buffers need not be made early)
                hosted, kept, at, arena = got, rest, at2, arena2
    if hosted:
        temps = kept
    offset_of = value_places(at, members, inside, lambda o, d: o + d)
    in_outs = value_places(hosted, members, inside, lambda o, d: (o[0], o[1] + d))
    return MemoryPlan(offset_of, arena, inplace, drops(bufs.last, outs, n), peak_live(temps, n), out_bytes,
                      frozenset(donated), joined, in_outs, tuple(dict.fromkeys(h for h, _ in hosted.values())),
                      bufs.may_view)


class Buffers:
    """The buffer groups of a program: each value a step writes into a buffer the plan
    controls starts a group (one buffer, several values over time once outputs are
    written in place); every value may alias the groups its producer's operands may
    (ops the plan does not control may return views). Also when each value is defined
    and last read."""

    def __init__(self, graph, steps, writes, donated_vals):
        self.define, self.last = {}, {}
        self.mine = set(donated_vals)                       # values whose buffer is ours to write into
        self.bufs = {v: {v} for v in donated_vals}          # value -> groups (their first value) it may alias
        self.group = {v: v for v in donated_vals}           # written value -> its group (first value)
        self.may_view = {}                                  # value -> the operands it may be a view of
        for v in graph.inputs:
            self.define.setdefault(v, -1)
            self.last.setdefault(v, -1)
        for k, step in enumerate(steps):
            for v in _reads(step):
                self.last[v] = k
            wset = set(_written(step, writes))
            for r in _results(step):
                self.define[r] = k
                self.last.setdefault(r, k)
                if r in wset:
                    self.group[r] = r
                    self.bufs[r] = {r}
                    self.mine.add(r)
                elif _makes_new(step):
                    self.bufs[r] = set()
                else:
                    self.bufs[r] = set().union(*[self.bufs.get(o, set()) for o in _reads(step)])
                    self.may_view[r] = tuple(dict.fromkeys(_reads(step)))
        for v in graph.outputs:
            self.last[v] = len(steps)
        self.aliases = {}                                   # group -> values that may alias it
        for v, gs in self.bufs.items():
            for gid in gs:
                self.aliases.setdefault(gid, set()).add(v)

    def busy(self, grp):
        """The last step any value aliasing the group is read at."""
        return max(self.last.get(v, self.define[v]) for v in self.aliases[grp])

    def shared(self, grp, values) -> bool:
        """May any of `values` alias the group's buffer?"""
        return any(grp in self.bufs.get(u, ()) for u in values)

    def join(self, r, x):
        """r is written into x's buffer: r's group is x's, and what aliased r aliases it."""
        gx, old = self.group[x], self.group[r]
        for v in self.aliases.pop(old, set()):
            self.bufs[v] = {gx if g is old else g for g in self.bufs[v]}
            self.aliases[gx].add(v)
        self.group[r] = gx

    def members(self) -> dict:
        """group -> its values, in the order they were written."""
        members = {}
        for v, gid in self.group.items():
            members.setdefault(gid, []).append(v)
        return members


def plan_in_place(bufs, steps, writes, outs, overwrites=operand_written_over) -> dict:
    """(1) output -> the input whose buffer it is written into, step by step."""
    inplace = {}
    for k, step in enumerate(steps):
        kern = _kernel(step)
        pairs = () if kern is not None or not writes(step) else overwrites(step)
        if kern is not None:
            same, results, reads = same_index_inputs(kern), kern.outputs, kern.inputs
        elif pairs:
            # an op that may write a result over an operand (all_reduce, a loop's carry)
            results, reads = [step.results[i] for i, _ in pairs], step.operands
            paired = {step.results[i]: {step.operands[j]} for i, j in pairs}
        else:
            continue
        options = {}
        for r in results:
            cands = same & _depends_on(kern, r) if kern is not None else paired[r]
            options[r] = [x for x in reads if x in cands and x in bufs.mine and x.dtype == r.dtype
                          and x.shape == r.shape and x not in outs and bufs.busy(bufs.group[x]) == k
                          # no other input of this step may share the buffer
                          and not bufs.shared(bufs.group[x], [u for u in reads if u is not x])]
        # donated arguments' buffers first (as many outputs as can go there), then the
        # rest: written into a temporary's buffer, a program output would hold it from the
        # temporary's first write to the end, where a donated buffer costs nothing
        given = {r: [x for x in xs if bufs.define[bufs.group[x]] < 0] for r, xs in options.items()}
        chosen = _match(results, given)
        taken = set(chosen.values())
        rest = [r for r in results if r not in chosen]
        chosen.update(_match(rest, {r: [x for x in options[r] if x not in taken] for r in rest}))
        for r, x in chosen.items():
            inplace[r] = x
            bufs.join(r, x)
    return inplace


def plan_joins(bufs, steps, writes, same_bytes, is_temp):
    """(4) ({group: (the join result's group, byte offset)} of the operands computed in
    their place in a join's buffer, {join result: the operand positions placed})."""
    group = bufs.group
    inside, joined, enclosing = {}, {}, set()
    for k, step in enumerate(steps):
        if _kernel(step) is not None or step.opdef.reindex.joins is None or not writes(step):
            continue
        c = step.results[0]
        d = step.opdef.reindex.joins(step.attrs)
        if int(np.prod(c.shape[:d], dtype=np.int64)) != 1 or not is_temp(group[c]) or group[c] in inside:
            continue
        off, placed, seen = 0, set(), set()
        for i, a in enumerate(step.operands):
            w = a
            while w not in group and w.producer is not None and same_bytes(w.producer):
                w = w.producer.operands[0]
            gw = group.get(w)
            if (gw is not None and w in bufs.mine and gw not in seen and gw not in inside and is_temp(gw)
                    and gw not in enclosing and gw is not group[c] and nbytes(w) == nbytes(a) == nbytes(gw)
                    and bufs.busy(gw) == k
                    and not bufs.shared(gw, [u for j, u in enumerate(step.operands) if j != i])):
                seen.add(gw)
                inside[gw] = (group[c], off)
                placed.add(i)
            off += nbytes(a)
        if placed:
            joined[c] = frozenset(placed)
            enclosing.add(group[c])
    return inside, joined


def temporaries(bufs, members, inside, donated_vals, outs):
    """(2, 3) [(group, first step, last step, bytes, parts)] of the groups the arena holds
    (not the donated ones, not the ones ending in an output, which are fresh per call,
    nor the ones placed inside a join's), and the bytes of the output groups. `parts`:
    [(byte offset in the group, bytes, first step, last step)], each range of the group
    with its own live range (a join's buffer: its operands' parts from when each is
    written; one part for any other group)."""
    placed = {}
    for gw, (gc, off) in inside.items():
        placed.setdefault(gc, []).append((off, nbytes(gw), bufs.define[gw]))
    temps, out_bytes = [], 0
    for gid, vs in members.items():
        if gid in donated_vals:
            continue
        if any(v in outs for v in vs):
            out_bytes += nbytes(gid)
            continue
        if gid in inside:
            continue
        end, size = bufs.busy(gid), nbytes(gid)
        parts = [(off, n, s, end) for off, n, s in sorted(placed.get(gid, ()))]
        at = 0
        for off, n, _, _ in list(parts):         # the rest: written by the join itself
            if off > at:
                parts.append((at, off - at, bufs.define[gid], end))
            at = max(at, off + n)
        if at < size or not parts:
            parts.append((at, size - at, bufs.define[gid], end))
        temps.append((gid, min(p[2] for p in parts), end, size, parts))
    return temps, out_bytes


# the orders groups are placed in, each tried (the smallest arena wins): largest first;
# in the order they become live; the longest-lived first
ORDERS = (lambda t: (-t[3], t[1]), lambda t: (t[1], -t[3]), lambda t: (t[1] - t[2], -t[3], t[1]))


def assign_offsets(temps):
    """(3) Static offsets in one arena: groups placed one by one, each at the lowest
    offset where none of its parts overlaps a part of a group placed before that is live
    at the same time, in each of ORDERS; the order that makes the smallest arena is kept
    (largest first leaves holes when big buffers come and go between long-lived smaller
    ones). ({group: offset}, the arena's size)"""
    best = None
    for order in ORDERS:
        placed = first_fit(sorted(temps, key=order))
        size = max([o + sz for _, _, o, sz, _ in placed], default=0)
        if best is None or size < best[1]:
            best = (placed, size)
    placed, size = best
    return {gid: off for _, _, off, _, gid in placed}, size


def value_places(group_at, members, inside, shift) -> dict:
    """value -> where it is: each group's values where the group is (`group_at`), and the
    values of a group placed inside a join's at `shift(the join's place, byte offset)`."""
    out = {}
    for gid, at in group_at.items():
        for v in members[gid]:
            out[v] = at
    for gw, (gc, off) in inside.items():
        if gc in group_at:
            for v in members[gw]:
                out[v] = shift(group_at[gc], off)
    return out


def first_fit(temps):
    """[(start, end, offset, size, group)]: each group, in the order given, at the lowest
    aligned offset where each of its parts is clear of the parts already placed that are
    live at the same time."""
    placed = []
    taken = LiveIndex()
    for gid, s, e, size, parts in temps:
        off = lowest_offset(parts, taken)
        placed.append((s, e, off, size, gid))
        for o, n, ps, pe in parts:
            taken.add((ps, pe, off + o, off + o + n))
    return placed


class LiveIndex:
    """Placed parts (first step, last step, first byte, last byte + 1), found by the steps
    they are live at: each is filed under every block of BLOCK steps it spans, so a query
    reads the parts near its steps, not every part placed (a program of thousands of
    small temporaries placed them in time quadratic in their count)."""
    BLOCK = 32

    def __init__(self):
        self.parts, self.blocks = [], {}

    def add(self, part):
        i = len(self.parts)
        self.parts.append(part)
        for b in range(part[0] // self.BLOCK, part[1] // self.BLOCK + 1):
            self.blocks.setdefault(b, []).append(i)

    def live(self, ps, pe):
        """The placed parts live at some step of [ps, pe], each once."""
        seen = set()
        for b in range(ps // self.BLOCK, pe // self.BLOCK + 1):
            seen.update(self.blocks.get(b, ()))
        parts = self.parts
        return [parts[i] for i in sorted(seen) if not (parts[i][1] < ps or pe < parts[i][0])]


def lowest_offset(parts, taken) -> int:
    """The lowest aligned offset of a group whose `parts` [(offset in the group, bytes, first
    step, last step)] are clear of the parts placed in `taken` (a LiveIndex) live at the
    same time."""
    # the group's offsets a placed part rules out: the open range (lo - o - n, hi - o)
    # for a part (o, n) of this group live with a placed part [lo, hi)
    banned = sorted((lo - o - n, hi - o) for o, n, ps, pe in parts for _, _, lo, hi in taken.live(ps, pe))
    off = 0
    for a, b in banned:
        if off <= a:
            break
        off = max(off, -(-b // ALIGN) * ALIGN)
    return off


def output_hosts(bufs, members, donated_vals, outputs) -> list:
    """(5) [(group, the step that first writes it, bytes)] of the output groups whose buffer
    may hold temporaries before that step: made by a step (not a donated argument, which
    holds the argument until then), and returned once (a buffer handed back twice is
    copied for one of them; keep it out of the question)."""
    count = {}
    for v in outputs:
        count[v] = count.get(v, 0) + 1
    hosts = []
    for gid, vs in members.items():
        outs = [v for v in vs if v in count]
        if gid in donated_vals or not outs or len(outs) > 1 or count[outs[0]] > 1:
            continue
        hosts.append((gid, bufs.define[gid], nbytes(gid)))
    return hosts


def place_in_outputs(temps, hosts, n, last=False):
    """(5) ({group: (host group, byte offset)} of the temporaries computed in an output's
    buffer, the temporaries left for the arena). From the step where the arena's
    temporaries are largest in all (the first such step, or the `last`), those live there
    that fit a buffer, largest first (each in the smallest buffer where it fits: one
    written after its last read, with room clear of what that buffer holds meanwhile),
    until what is live at the busiest step cannot move."""
    hosts = sorted(hosts, key=lambda h: (h[2], h[1]))
    taken = {h: LiveIndex() for h, _, _ in hosts}
    hosted, left = {}, list(temps)
    while left and hosts:
        d = np.zeros(n + 2, np.int64)
        for *_, parts in left:
            for _, size, s, e in parts:
                if min(e, n - 1) >= max(s, 0):
                    d[max(s, 0)] += size
                    d[min(e, n - 1) + 1] -= size
        live = np.cumsum(d)
        peak = int(np.flatnonzero(live == live.max())[-1]) if last else int(np.argmax(live))
        moved = set()
        for t in sorted((t for t in left if any(s <= peak <= e for _, _, s, e in t[4])), key=lambda t: -t[3]):
            gid, _, end, size, parts = t
            for h, first, cap in hosts:
                if end >= first or size > cap:
                    continue
                off = lowest_offset(parts, taken[h])
                if off + size <= cap:
                    hosted[gid] = (h, off)
                    for o, m, ps, pe in parts:
                        taken[h].add((ps, pe, off + o, off + o + m))
                    moved.add(gid)
                    break
        if not moved:
            break
        left = [t for t in left if t[0] not in moved]
    return hosted, left


def peak_live(temps, n) -> int:
    """The largest total of live temporaries at any step."""
    live = [0] * (n + 1)
    for *_, parts in temps:
        for _, size, s, e in parts:
            for k in range(max(s, 0), min(e, n - 1) + 1):
                live[k] += size
    return max(live, default=0)


def drops(last, outs, n) -> list:
    """step index -> the values to drop after it (their last read)."""
    free_after = [[] for _ in range(n)]
    for v, k in last.items():
        if v not in outs and 0 <= k < n:
            free_after[k].append(v)
    return free_after


def memory_profile(graph, steps, plan: MemoryPlan, writes, kept=(), scratch_bytes=0, made=None):
    """The run of a planned program as the buffers it holds (backends/memory_profile.py):
    the arena's temporaries with their live ranges, outputs and in-place chains, and the
    arrays made per call by the steps the plan does not place (collectives, numpy ops).
    `made`: {value: (first step, last step)} of the values a native schedule's segment
    makes buffers for when it starts (schedule.Segment.allocs): each is a buffer of its
    own, held from the segment's first step to the later of its last read and the
    segment's last step (the segment drops nothing before it returns)."""
    from ..memory_profile import profile
    rows = []
    for step in steps:
        k = _kernel(step)
        rows.append((k.root.producer if k is not None else step, _reads(step), _results(step),
                     _written(step, writes)))
    joined = {}
    for c, placed in plan.joined.items():
        for i in placed:
            joined[c.producer.operands[i]] = c
    return profile(graph, rows, plan.in_place, plan.offset_of, plan.arena_bytes, scratch_bytes, joined, kept,
                   plan.in_outputs, made)
