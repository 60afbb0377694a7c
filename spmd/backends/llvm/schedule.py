"""A native schedule: the program's steps as native segments (one call from Python each,
see native.py) and the steps that run in Python between them (collectives, ops without a
native lowering, kernels big enough to split over threads).

Built once per executable and thread count: which steps join segments (the lowering
table's `native` entry of each step, lowering_table.py), the layout of the segments' argument
blocks, the scratch they need, and when each value is dropped.
"""
from __future__ import annotations

import ctypes
import threading

import numpy as np

from . import native
from .exchange import FromComm, noted_op
from .lowering_table import lowering_of
from .plan import KernelStep
from .reorder import Instr, reorder
from .steps import FREE, Here, Scratch

# a kernel is split over threads only when it has this many elements to touch: below it,
# waking a pool thread (which may not get a core at once on a loaded machine) costs more
PAR_WORK = 1 << 20
# a program whose kernels (its loops' too) touch fewer elements than this each is small:
# where ranks are more than the cores, all its ranks' segments run on one thread (their
# exchanges then never wait for another thread, which costs more than the work)
SMALL_WORK = 1 << 15
WHOLE = 1 << 62          # the end of a range covering a whole buffer
# Python's bytes for each array a run makes besides its data (the ndarray object, its
# shape and strides, its entry in the run's environment, the ctypes view its address is
# read through): tracemalloc sees a train_gpt step hold about 300 a made array beyond the
# memory plan; counted in the schedule's held bytes so that a plan under memory_limit
# holds what a run measures
ARRAY_OBJECT_BYTES = 400


class Segment:
    def __init__(self):
        self.instrs = []        # (function address, [entries]); an entry is an int, (Value, byte offset) or Here
        self.allocs = []        # (value, in-place source or None): values it writes outside the arena
        self.steps = []         # step indices it covers


_VIEW = ctypes.c_char.from_buffer


def address(x) -> int:
    """The address of a C-contiguous array's data. A ctypes view of a writeable buffer
    gives it in a fifth of the time of numpy's x.ctypes (which builds an object of
    several attributes): a run reads the address of every argument and output. (Not for
    dtypes numpy cannot export as a buffer: ml_dtypes' bfloat16 and the like.)"""
    if x.flags.writeable and x.size and x.dtype.isbuiltin == 1:
        return ctypes.addressof(_VIEW(x))
    return x.ctypes.data


class Schedule:
    def __init__(self, exe, nthreads, fixed_blas=False, native_comm=False):
        self.exe = exe
        self.nthreads = nthreads
        self.fixed_blas = fixed_blas         # dots leave the BLAS thread count as it is
        self.native_comm = native_comm       # collectives run natively (exchange.py)
        self.blas = native.blas()
        self.helpers = native.helpers()
        self.run_fn = self.helpers["run"]
        self.views = {}          # value -> (base value, dummy view, dummy base): a view computed for free
        self.consts = {}         # value -> its array (constants are not made per call)
        self.kept = []           # loop bodies' schedules, whose constants the instructions read
        self.native_starts = {}  # a started all-reduce's handle -> its region, when it runs natively (exchange_reduce.py)
        self.mailboxes = {}      # a native collective's region key -> the bytes a member holds of it
        self.slot_bytes = {}     # a native collective's region key -> the bytes of a member's slot in it
        self._locations = {}     # value -> the memory it lies in (locations)
        self.items = self.segments()                       # Segment | step index
        self.small = self.largest_kernel() < SMALL_WORK
        self.size = self.lay_out_arguments()
        self.views = {v: t[0] for v, t in self.views.items()}     # the dummies are not needed any more
        self.scratch_sizes = self.scratch()
        self.free_after = self.last_uses()
        self._local = threading.local()

    # -- building --------------------------------------------------------------------------
    def segments(self) -> list:
        """Consecutive steps with native instructions, as Segments; the others by index."""
        exe, mem = self.exe, self.exe.memory
        items, seg = [], None
        for k, step in enumerate(exe.steps):
            instr = self.instructions(step)
            if instr is None:
                if seg is not None:
                    items += [seg] if seg.instrs else seg.steps
                    seg = None
                items.append(k)
                continue
            seg = seg or Segment()
            seg.steps.append(k)
            if instr is FREE:
                continue
            seg.instrs += self.records(step, instr)
            written = step.kernel.outputs if isinstance(step, KernelStep) else step.results
            seg.allocs += [(v, mem.in_place.get(v)) for v in written if mem.place(v) is None]
        if seg is not None:
            items += [seg] if seg.instrs else seg.steps
        for it in items:
            if isinstance(it, Segment):
                it.instrs = self.in_order(reorder(it.instrs))
        return items

    def records(self, step, instrs) -> list:
        """The step's instructions as reorder.Instr records (what each reads and writes);
        a permute as its two halves."""
        kernel = step.kernel if isinstance(step, KernelStep) else None
        reads = [k for v in (kernel.inputs if kernel else step.operands) for k in self.locations(v)]
        writes = [k for v in (kernel.outputs if kernel else step.results) for k in self.locations(v)]
        out = []
        for fn, entries in instrs:
            scratch = [("scratch", e[0].slot) for e in entries if isinstance(e, tuple) and isinstance(e[0], Scratch)]
            scratch += [e.touches for e in entries if isinstance(e, FromComm) and e.touches is not None]
            if fn == self.helpers["spmd_permute_post"]:
                post = Instr(fn, entries, reads, scratch, board=tuple(step.attrs["axes"]))
                out += [post, Instr(fn, None, (), writes, board=post.board, post=post)]
            else:
                out.append(Instr(fn, entries, reads, writes + scratch, fence=fn == self.helpers["spmd_loop"]))
        return out

    def locations(self, v) -> tuple:
        """The memory a value lies in, as reorder.py reads it: its byte range of the arena,
        of an output's buffer (a temporary the memory plan placed there), or all of its own
        buffer (a view's is its base's; a value written in place lies in its source's).
        A value a step run from Python made may be numpy's view of an operand (a
        dynamic_slice of a concatenation in the arena): it lies in that operand's memory
        too (the memory plan's may_view), or a segment would move a write of the arena
        across a read of the view."""
        got = self._locations.get(v)
        if got is not None:
            return got
        mem = self.exe.memory
        r = self._root(v)
        place = mem.place(r)
        if place is None:
            keys = [("range", ("buffer", r), 0, WHOLE)]
            for o in mem.may_view.get(r, ()):
                keys += self.locations(o)
            got = tuple(dict.fromkeys(keys))
        else:
            host, off = place
            end = off + int(r.size) * np.dtype(r.dtype).itemsize
            got = (("range", "arena" if host is None else ("buffer", self._root(host)), off, end),)
        self._locations[v] = got
        return got

    def _root(self, v):
        t = self.views.get(v)
        if t is not None:
            v = t[0]
        mem = self.exe.memory
        while mem.place(v) is None and v in mem.in_place:
            v = mem.in_place[v]
        return v

    def in_order(self, ordered) -> list:
        """(function, entries) of reorder's order; a receive reads its post's block (Here,
        back to it). A post and its receive stay two instructions even when adjacent:
        ranks run in lockstep on one thread (transports/local/local_communicator.py hosts) run each
        instruction for all of them before the next, so a receive from a rank of the
        same thread must come after that rank's post."""
        h = self.helpers
        out, at, off = [], {}, 0
        for ins in ordered:
            if ins.is_post:
                at[id(ins)] = off
                out.append((h["spmd_permute_post"], ins.entries))
            elif ins.is_recv:
                out.append((h["spmd_permute_recv_of"], [Here(at[id(ins.post)] - off)]))
            else:
                out.append((ins.fn, ins.entries))
            off += len(out[-1][1])
        return out

    def largest_kernel(self) -> int:
        """The most elements a kernel of the program (or of a loop it runs natively) touches."""
        own = [step.work for step in self.exe.steps if isinstance(step, KernelStep)]
        return max(own + [b.largest_kernel() for b in self.kept], default=0)

    def made(self) -> dict:
        """{value: (first step, last step) of its segment}: the buffers outside the arena a
        segment makes when it starts (its allocs not written over another value) and holds
        until it returns (backends/memory_profile.py counts them so)."""
        out = {}
        for it in self.items:
            if isinstance(it, Segment):
                for v, src in it.allocs:
                    if src is None:
                        out[v] = (it.steps[0], it.steps[-1])
        return out

    @property
    def held_bytes(self) -> int:
        """Bytes a device holds for this schedule as long as it is kept, besides the
        arena: its scratch (one buffer per slot and thread), its slots of the native
        all-reduces' shared regions (exchange_reduce.py: a mailbox per member and op),
        its segments' argument blocks and programs (state: int64 entries), and Python's
        objects of the arrays a run makes (ARRAY_OBJECT_BYTES each)."""
        blocks = 8 * self.size + sum(16 * len(it.instrs) for it in self.items if isinstance(it, Segment))
        arrays = sum(len(it.allocs) if isinstance(it, Segment) else len(self.exe.steps[it].results)
                     if not isinstance(self.exe.steps[it], KernelStep) else len(self.exe.steps[it].kernel.outputs)
                     for it in self.items)
        return sum(self.scratch_sizes.values()) + sum(self.mailboxes.values()) + blocks + \
            ARRAY_OBJECT_BYTES * arrays

    def only_segment(self):
        """The one Segment running every step of the program, or None (some run from Python)."""
        if len(self.items) == 1 and isinstance(self.items[0], Segment):
            return self.items[0]
        return None

    def instructions(self, step):
        """The step's native instructions, FREE, or None (it runs from Python)."""
        if isinstance(step, KernelStep):
            threaded = step.par is not None and self.nthreads > 1 and step.work >= PAR_WORK
            if threaded or not step.addr_t or any(v in self.views for v in step.params):
                return None
            return [(step.addr_t, [(v, 0) for v in step.params] + [0, step.extent, 0])]
        if step.opdef.reindex.view and self.view(step):
            return FREE
        native_step = lowering_of(step).native
        return native_step(self, step) if native_step is not None else None

    def lay_out_arguments(self) -> int:
        """Places each segment's argument blocks in the arena, and records the entries
        patched per call (values the memory plan does not place in the arena; one in an
        output's buffer as that output's, at its offset: one address to look up per
        output); returns the arena's size."""
        mem = self.exe.memory
        size = 0
        self.from_comm = []      # (arena position, FromComm): entries filled in per communicator
        for it in self.items:
            if not isinstance(it, Segment):
                continue
            it.offsets, dyn, pos, idx, offs = [], {}, [], [], []
            for fn, entries in it.instrs:
                it.offsets.append(size)
                for j, e in enumerate(entries):
                    if isinstance(e, FromComm):
                        self.from_comm.append((size + j, e))
                    if (isinstance(e, tuple) and not isinstance(e[0], Scratch) and e[0] not in mem.offset_of
                            and e[0] not in self.consts):
                        v, off = mem.in_outputs.get(e[0], (e[0], 0))
                        pos.append(size + j)
                        idx.append(dyn.setdefault(v, len(dyn)))
                        offs.append(off + e[1])
                size += len(entries)
            it.dyn = list(dyn)
            it.pos, it.idx = np.array(pos, np.int64), np.array(idx, np.int64)
            it.offs = np.array(offs, np.int64)
        return size

    def scratch(self) -> dict:
        """scratch slot -> bytes (one buffer per slot and thread)"""
        sizes = {}
        for it in self.items:
            if isinstance(it, Segment):
                for _, entries in it.instrs:
                    for e in entries:
                        if isinstance(e, tuple) and isinstance(e[0], Scratch):
                            s = e[0].slot
                            sizes[s] = max(sizes.get(s, 0), e[0].nbytes)
        return sizes

    def last_uses(self) -> list:
        """step index -> values to drop after it; reading a view made for free reads its base."""
        exe = self.exe
        last, n = {}, len(exe.steps)
        for k, step in enumerate(exe.steps):
            for v in (step.kernel.inputs if isinstance(step, KernelStep) else step.operands):
                last[self.views.get(v, v)] = k
                last[v] = k
        outs = set(exe.graph.outputs)
        for v in outs:
            last[self.views.get(v, v)] = n
        free_after = [[] for _ in range(n)]
        for v, k in last.items():
            if v not in outs and k < n:
                free_after[k].append(v)
        return free_after

    def dummy(self, v):
        """(base value, view, base array) of v on dummy buffers: how it lies in its base."""
        t = self.views.get(v)
        if t is not None:
            return t
        base = np.empty(v.shape, v.dtype)
        return (v, base, base)

    def view(self, op):
        """Can op's result be read as a strided view of a buffer (no copy)? Records it."""
        base, view, dbase = self.dummy(op.operands[0])
        try:
            r = op.opdef.ref(view, **op.attrs)
        except Exception:     # noqa: BLE001 - then it simply runs in Python
            return False
        if not isinstance(r, np.ndarray) or r.size == 0 or not np.may_share_memory(r, dbase):
            return False
        self.views[op.result] = (base, r, dbase)
        return True

    # -- running ---------------------------------------------------------------------------
    def state(self):
        """This thread's arena and program arrays (the memory plan's buffers are per thread)."""
        st = getattr(self._local, "st", None)
        if st is not None:
            return st
        exe, mem = self.exe, self.exe.memory
        slots = exe.arena()
        arena = np.zeros(max(self.size, 1), np.int64)
        base = arena.ctypes.data
        progs = []
        scratch = {s: np.empty(n, np.uint8) for s, n in self.scratch_sizes.items()}
        for it in self.items:
            if not isinstance(it, Segment):
                continue
            prog = np.zeros(2 * len(it.instrs), np.int64)
            for i, ((fn, entries), o) in enumerate(zip(it.instrs, it.offsets)):
                prog[2 * i], prog[2 * i + 1] = fn, base + 8 * o
                for j, e in enumerate(entries):
                    if isinstance(e, tuple):
                        v, off = e
                        if isinstance(v, Scratch):
                            arena[o + j] = scratch[v.slot].ctypes.data + off
                        elif v in mem.offset_of:
                            arena[o + j] = slots.ctypes.data + mem.offset_of[v] + off
                        elif v in self.consts:
                            arena[o + j] = self.consts[v].ctypes.data + off
                    elif isinstance(e, Here):
                        arena[o + j] = base + 8 * (o + e.k)
                    elif isinstance(e, FromComm):
                        pass
                    else:
                        arena[o + j] = e
            progs.append(prog)
        # (the programs' addresses asked once: x.ctypes builds an object, microseconds a call)
        st = self._local.st = [arena, progs, slots, scratch, None, [p.ctypes.data for p in progs]]
        return st

    def for_comm(self, st, comm):
        """Fill in the entries that depend on the rank's communicator (a new one per run)."""
        if st[4] is comm or not self.from_comm:
            return
        arena = st[0]
        for pos, e in self.from_comm:
            arena[pos] = e.fn(comm)
        st[4] = comm

    def value(self, v, env, slots):
        """v's array after a run's native steps: from env, a constant, its place in the
        arena or an output's buffer, or a view of its base made by numpy now."""
        x = env.get(v)
        if x is not None:
            return x
        c = self.consts.get(v)
        if c is not None:
            return c
        mem = self.exe.memory
        if v in mem.offset_of or v in mem.in_outputs:
            return self.exe.buffer(v, slots)
        op = v.producer           # a view the native code read for free: numpy makes it now
        x = env[v] = op.opdef.ref(*[self.value(o, env, slots) for o in op.operands], **op.attrs)
        return x

    def run(self, env, comm):
        exe = self.exe
        st = self.state()
        arena, _, slots, _, _, prog_at = st
        self.for_comm(st, comm)
        steps = exe.steps
        si = 0
        addrs = {}               # value -> its array's address, this run (an input read by several segments: once)
        for it in self.items:
            if isinstance(it, Segment):
                self._run_segment(it, prog_at[si], arena, env, slots, comm, si, addrs)
                si += 1
                if self.native_comm and comm.native_exchange.status[0]:
                    comm.native_exchange.failure(*noted_op(int(comm.native_exchange.status[2])))
                done = it.steps
            else:
                step = steps[it]
                for v in (step.kernel.inputs if isinstance(step, KernelStep) else step.operands):
                    if v not in env:
                        env[v] = self.value(v, env, slots)
                exe.run_step(step, env, comm, slots, self.nthreads)
                done = (it,)
            for k in done:
                for v in self.free_after[k]:
                    env.pop(v, None)
        for v in exe.graph.outputs:
            if v not in env:
                env[v] = self.value(v, env, slots)

    def _run_segment(self, seg, prog_at, arena, env, slots, comm, si, known):
        for v, src in seg.allocs:
            env[v] = self.exe.new_buffer(v) if src is None else self.value(src, env, slots)
        if seg.dyn:
            # (known: the addresses earlier segments of this run looked up; a value's
            # array does not change during a run once made)
            addrs = np.empty(len(seg.dyn), np.int64)
            for j, v in enumerate(seg.dyn):
                a = known.get(v)
                if a is None:
                    x = env.get(v)
                    if x is None:
                        x = self.value(v, env, slots)
                    if not x.flags.c_contiguous:
                        x = env[v] = np.ascontiguousarray(x)
                    a = known[v] = address(x)
                addrs[j] = a
            arena[seg.pos] = addrs[seg.idx] + seg.offs
        # (ranks more than the cores: a host runs several ranks' segments, transports/local/local_communicator.py)
        host = comm.native_exchange.host if self.native_comm else None
        if host is not None:
            host((id(self), si), prog_at, len(seg.instrs), self.helpers["run_multi"], self.small)
        else:
            self.run_fn(prog_at, len(seg.instrs))
