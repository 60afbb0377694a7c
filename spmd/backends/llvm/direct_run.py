"""A call of a program whose native schedule (schedule.py) is one segment, on the calling
thread: the one device of a program without a mesh, or the ranks of the local runtime's
small programs that exchange nothing, one after another (transports/local/local_runtime.py).
Such a call is a few microseconds of native work, so what Python does around it is its cost.

`DirectRun` works out once per schedule where every address the segment is given per
call comes from (an argument, or a buffer the call makes: an output, or a donated
argument's buffer written in place), and whether the outputs come out fresh as made (then
they are the results as they are). A call is then: check the arguments, make the buffers,
write their addresses into this thread's argument block, one native call, the results.
What it does is what `Executable.__call__` does (LLVMExecutable.run, Schedule.run): a call
whose arguments that path would copy or refuse (read-only or strided donated arguments,
other shapes, dtypes or types) takes that path instead, and results that are not fresh
as made (an argument handed back, a view, a constant, the same value twice) go through
`Executable.results`.
"""
from __future__ import annotations

import ctypes
import threading

import numpy as np

from .exchange import noted_op
from .schedule import address


class DirectRun:
    def __init__(self, exe, sched, seg):
        self.exe, self.sched, self.seg = exe, sched, seg
        self._local = threading.local()      # this thread's run function
        g = exe.graph
        self.n_in = len(g.inputs)
        # per argument: (shape, dtype, must be writeable, plain) where plain: a builtin
        # dtype, not empty (a writeable one's address is read through a ctypes view,
        # schedule.address)
        self.takes = [(tuple(v.shape), np.dtype(v.dtype), i in exe.donated, _plain(v))
                      for i, v in enumerate(g.inputs)]
        slot = {v: i for i, v in enumerate(g.inputs)}
        # the buffers the segment writes outside the arena, in order: (shape, dtype, plain,
        # None) made fresh, or (.., .., .., slot) the buffer of an argument or earlier one
        self.makes = []
        for v, src in seg.allocs:
            self.makes.append((tuple(v.shape), np.dtype(v.dtype), _plain(v), None if src is None else slot[src]))
            slot[v] = len(slot)
        self.values = list(slot)             # slot -> Value
        # (position in the argument block, slot, byte offset): the addresses a call writes
        self.patches = [(int(p), slot[seg.dyn[j]], int(o)) for p, j, o in zip(seg.pos, seg.idx, seg.offs)]
        outs = g.outputs
        # every output a buffer the run made fresh, once, and nothing else was computed in
        # it: the results as they are
        shared = {m[3] for m in self.makes if m[3] is not None}
        fresh = [k for k, v in enumerate(outs)
                 if slot.get(v, -1) >= self.n_in and self.makes[slot[v] - self.n_in][3] is None
                 and slot[v] not in shared and outs.count(v) == 1 and k not in exe.written and k not in exe.same]
        self.out_slots = [slot[v] for v in outs] if len(fresh) == len(outs) else None

    @staticmethod
    def of(exe, sched):
        """The DirectRun of a schedule, or None where it does not apply: steps outside one
        segment, buffers made before the first step (memory.hosts), an address from
        elsewhere."""
        seg = sched.only_segment()
        if seg is None or exe.memory.hosts:
            return None
        known = set(exe.graph.inputs)
        for v, src in seg.allocs:
            if src is not None and src not in known:
                return None
            known.add(v)
        if any(v not in known for v in seg.dyn):
            return None
        return DirectRun(exe, sched, seg)

    def runner(self):
        """run(inputs, comm) -> outputs, for calls on this thread."""
        run = getattr(self._local, "run", None)
        if run is None:
            run = self._local.run = self._runner()
        return run

    def _runner(self):
        """The run function of this thread: its argument block and segment (sched.state)."""
        sched, exe, seg = self.sched, self.exe, self.seg
        st = sched.state()
        arena = (ctypes.c_int64 * len(st[0])).from_buffer(st[0])
        prog, n_instr, run_fn = st[5][0], len(seg.instrs), sched.run_fn
        takes, makes, patches, n_in, out_slots = self.takes, self.makes, self.patches, self.n_in, self.out_slots
        native_comm = sched.native_comm
        addressof, view, empty = ctypes.addressof, ctypes.c_char.from_buffer, np.empty

        def run(inputs, comm):
            if len(inputs) != n_in:
                return exe(inputs, comm)
            bufs, addrs = list(inputs), []
            for x, (shape, dtype, donated, plain) in zip(bufs, takes):
                if type(x) is not np.ndarray or x.shape != shape or x.dtype != dtype:
                    return exe(inputs, comm)
                flags = x.flags
                if not flags.c_contiguous or donated and not (flags.writeable and flags.aligned):
                    return exe(inputs, comm)
                addrs.append(addressof(view(x)) if plain and flags.writeable else address(x))
            for shape, dtype, plain, src in makes:
                if src is None:
                    x = empty(shape, dtype)
                    bufs.append(x)
                    addrs.append(addressof(view(x)) if plain else address(x))
                else:
                    bufs.append(bufs[src])
                    addrs.append(addrs[src])
            sched.for_comm(st, comm)
            for p, j, off in patches:
                arena[p] = addrs[j] + off
            run_fn(prog, n_instr)
            if native_comm and comm.native_exchange.status[0]:
                comm.native_exchange.failure(*noted_op(int(comm.native_exchange.status[2])))
            if out_slots is not None:
                return [bufs[j] for j in out_slots]
            return self.results(bufs, st)
        return run

    def results(self, bufs, st):
        """What Executable.results gives of a run's buffers (an output the segment did not
        write, a view or a constant, as Schedule.run finds it)."""
        exe = self.exe
        env = dict(zip(self.values, bufs))
        for v in exe.graph.outputs:
            if v not in env:
                env[v] = self.sched.value(v, env, st[2])
        given = bufs[:self.n_in]
        keep = {o: given[i] for o, i in exe.written.items()}
        return exe.results(env, keep, {id(given[i]) for i in exe.written.values()})


def _plain(v) -> bool:
    return np.dtype(v.dtype).isbuiltin == 1 and int(np.prod(v.shape)) > 0
