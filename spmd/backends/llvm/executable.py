"""Run a planned program (plan.py): native kernels called through ctypes (which releases
the GIL), with the outer loop of large kernels split over a thread pool; every other step
as its row of the lowering table says (lowering_table.py): dot_general through BLAS into a
preallocated output with the operands' transposes folded into the call; collectives and
every op without a native lowering through its numpy reference.

Temporaries come from the memory plan (memory.py): static offsets in one arena per
thread, kept between calls, so a step allocates no temporaries; an elementwise kernel
writes in place into a dying input's buffer where the plan says so, and a program output
is computed in the buffer the caller gets (a dot's result updated in place by a kernel).
An output whose buffer the plan lends to temporaries before the output is written has
that buffer made before the first step (per call, as every output's).
By default the steps run as a native schedule (schedule.py): stretches of steps in one
native call each.
"""
from __future__ import annotations

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ...errors import SpmdError
from ...ir import Graph
from ...tools import timeline
from ..executor import Executable, op_label, part_groups
from .direct_run import DirectRun
from .jit import InvalidModule, compile_ir
from .lowering_table import lowering_of, writes_into
from .memory import memory_profile
from . import native
from .native import cores
from .plan import KernelStep, ProgramPlan, plan_program
from .schedule import PAR_WORK, Schedule

_pool = None
_pool_lock = threading.Lock()


def pool():
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=max(cores() - 1, 1), thread_name_prefix="spmd-kernel")
    return _pool


def threads_for(comm):
    """Threads per rank: SPMD_THREADS, else the host's cores divided by the ranks."""
    env = os.environ.get("SPMD_THREADS")
    if env:
        return max(1, int(env))
    ranks = getattr(comm, "size", 1) if comm is not None else 1
    return max(1, cores() // max(1, ranks))


class LLVMExecutable(Executable):
    def __init__(self, plan: ProgramPlan, threads=None, written=None, build=True):
        """`build=False`: the plan and its schedules without compiling the kernels, for
        what a run would hold (memory_report, memory_profile); such an executable does
        not run."""
        self.graph = plan.graph
        self.written = dict(written or {})
        self.plan = plan
        self.steps = plan.steps
        self.memory = plan.memory
        self.threads = threads
        self.donated = plan.donated
        kernels = [s for s in self.steps if isinstance(s, KernelStep)]
        self.stats = {"kernels": len(kernels), "codegen_s": plan.codegen_s}
        t1 = time.perf_counter()
        self.built = build
        if build:
            self.ir = compile_kernels(kernels, plan.modules, self.stats)
        else:
            self.ir = {}
            for k in kernels:
                k.bind_unbuilt()
        self.stats["compile_s"] = time.perf_counter() - t1
        self.prepared = {s: lowering_of(s).prepare(s) for s in self.steps
                         if not isinstance(s, KernelStep) and lowering_of(s).prepare is not None}
        # svd's u, s, vh of one matrix: one numpy call (executor.run_op)
        self.parts = part_groups([s for s in self.steps if not isinstance(s, KernelStep)])
        self._nbytes = {v: v.size * np.dtype(v.dtype).itemsize
                        for v in (*self.memory.offset_of, *self.memory.in_outputs)}
        self._local = threading.local()
        # control-flow bodies (while, cond, scan) run as native executables of their own,
        # their outputs not lent to temporaries: a loop gives its body the buffers to
        # write its results into (loops.py), which a body's native loop reads as its own
        self.subprograms = {id(op.attrs[k]): compile_llvm(op.attrs[k], threads, in_outputs=False, build=build)
                            for op in self.graph.ops for k in op.opdef.subgraphs}
        self._schedules = {}
        self._direct = {}              # schedule key -> its DirectRun, None where it does not apply
        self._schedule_lock = threading.Lock()
        # output position -> the first value of its buffer group (the one a step writes
        # into a new buffer), where that buffer may be one the caller gives (`into`)
        self.out_first = {}
        for k, v in enumerate(self.graph.outputs):
            while v in self.memory.in_place:
                v = self.memory.in_place[v]
            if v not in self.graph.inputs and v not in self.memory.offset_of:
                self.out_first[k] = v
        _dump(self)

    def __reduce__(self):
        # shipped to Ray actors: rebuilt there from the graph (the object-code cache,
        # keyed by the IR, makes that a load when the actor's host compiled it before)
        return (compile_llvm, (self.graph, self.threads, self.donated, self.written, self.plan.in_outputs))

    # -- running --------------------------------------------------------------------------
    @property
    def planned(self):
        return self.memory.offset_of

    def run_into(self, env, comm, into):
        given = {}
        for k, x in into.items():
            v = self.out_first.get(k)
            if v is not None and x.shape == v.shape and x.dtype == np.dtype(v.dtype) and x.flags.c_contiguous \
                    and x.flags.writeable and v not in given:
                given[v] = x
        self._local.into = given
        try:
            self.run(env, comm)
        finally:
            self._local.into = None

    def loop_spare(self, op, j, k):
        """Spare buffer k of a loop's carried value j (loops.py), this thread's, kept
        between calls."""
        spares = getattr(self._local, "spares", None)
        if spares is None:
            spares = self._local.spares = {}
        x = spares.get((op, j, k))
        if x is None:
            v = op.results[j]
            x = spares[(op, j, k)] = np.empty(v.shape, v.dtype)
        return x

    def new_buffer(self, v):
        """The buffer a step writes an output group's first value into: the one made for
        this run before its first step (it holds temporaries until then), the one the
        caller gave for it, else a new array."""
        made = getattr(self._local, "hosts", None)
        x = made.get(v) if made else None
        if x is not None:
            return x
        given = getattr(self._local, "into", None)
        x = given.get(v) if given else None
        return np.empty(v.shape, v.dtype) if x is None else x

    def _check_built(self):
        if not self.built:
            raise SpmdError("internal error: an executable planned without its kernels (build=False) was run")

    def run(self, env, comm):
        self._check_built()
        # the outputs' buffers that hold temporaries before the outputs are written, made
        # now and read where they are from the first step on
        made = {v: self.new_buffer(v) for v in self.memory.hosts}
        self._local.hosts = made or None
        env.update(made)
        try:
            nthreads = self.threads or threads_for(comm)
            if timeline.enabled() or os.environ.get("SPMD_NATIVE", "1") == "0":
                # step by step from Python, each step a span on the timeline
                slots = self.arena()

                def step_fn(step, env, comm):
                    self.run_step(step, env, comm, slots, nthreads)
                self.run_steps(self.steps, self.memory.free_after, env, comm, step_fn, _label)
                return
            self.schedule(nthreads, native.shares_blas(comm), native_collectives(comm)).run(env, comm)
        finally:
            self._local.hosts = None

    def runner(self, comm):
        """Executable.runner: where the schedule is one native segment, its DirectRun
        (direct_run.py), the environment read and the schedule found once a run."""
        self._check_built()
        if timeline.enabled() or os.environ.get("SPMD_NATIVE", "1") == "0":
            return self
        key = (self.threads or threads_for(comm), native.shares_blas(comm), native_collectives(comm))
        direct = self._direct.get(key, False)
        if direct is False:
            direct = self._direct[key] = DirectRun.of(self, self.schedule(*key))
        return self if direct is None else direct.runner()

    def schedule(self, nthreads, fixed_blas=False, native_comm=False) -> Schedule:
        """The native schedule for this many threads (built on first use); `fixed_blas`:
        its dots leave the BLAS thread count as the runtime set it (native.shares_blas);
        `native_comm`: its collectives run natively (native_collectives: False, or the
        scope of the memory the ranks share, exchange.py)."""
        key = (nthreads, fixed_blas, native_comm)
        sched = self._schedules.get(key)
        if sched is None:
            # the local runtime's ranks ask at once: one builds it, the others wait. One
            # schedule, kept as long as the executable: its per-thread state holds the
            # mailboxes of native permutes (exchange.py), which a neighbour may still
            # read after the sender's run returned; a second schedule built at the same
            # time would be dropped, and its mailboxes freed, at the end of that run

            with self._schedule_lock:
                sched = self._schedules.get(key)
                if sched is None:
                    sched = self._schedules[key] = Schedule(self, nthreads, fixed_blas, native_comm)
        return sched

    def memory_report(self, comm=None) -> dict:
        """The plan's figures (memory.py) plus what the native schedule holds besides the
        arena (`scratch_bytes`: the copies of dot operands BLAS cannot read where they are,
        and the native all-reduces' mailboxes), per device."""
        sched = self.profiled_schedule(comm)
        rep = self.memory.report()
        rep["scratch_bytes"] = sched.held_bytes if sched is not None else 0
        return rep

    def memory_profile(self, comm=None):
        """What a run holds, step by step (backends/memory_profile.py), as the schedule a
        run with `comm` builds holds it: the buffers a native segment makes when it starts,
        held until it returns, and the schedule's scratch and mailboxes."""
        sched = self.profiled_schedule(comm)
        if sched is None:
            return memory_profile(self.graph, self.steps, self.memory, writes_into)
        return memory_profile(self.graph, self.steps, self.memory, writes_into, kept=sched.consts,
                              scratch_bytes=sched.held_bytes, made=sched.made())

    def profiled_schedule(self, comm):
        """The native schedule a run with `comm` (a communicator, or an object with its
        `size`, `ranks_in_process` and `native_exchange`) uses; None where runs go step by
        step from Python (SPMD_NATIVE=0)."""
        if os.environ.get("SPMD_NATIVE", "1") == "0":
            return None
        return self.schedule(self.threads or threads_for(comm), native.shares_blas(comm), native_collectives(comm))

    def arena(self):
        """This thread's arena of temporaries (the local runtime runs ranks as threads)."""
        a = getattr(self._local, "arena", None)
        if a is None:
            a = self._local.arena = np.empty(max(self.memory.arena_bytes, 1), np.uint8)
        return a

    def buffer(self, v, arena, env=None):
        """The array a step writes v into: the buffer of the input it is written in place
        into, its place in the arena or in an output's buffer, or (a program output) a
        fresh array."""
        mem = self.memory
        off = mem.offset_of.get(v)
        if off is not None:             # (in place into a temporary: the same offset)
            return arena[off:off + self._nbytes[v]].view(v.dtype).reshape(v.shape)
        at = mem.in_outputs.get(v)
        if at is not None:
            host, off = at
            raw = self.new_buffer(host).reshape(-1).view(np.uint8)
            return raw[off:off + self._nbytes[v]].view(v.dtype).reshape(v.shape)
        src = mem.in_place.get(v)
        if src is not None:
            x = env.get(src) if env is not None else None
            if x is None or not x.flags.c_contiguous:
                raise SpmdError(f"internal error: {v} is planned in place into {src}, which is not live")
            return x
        return self.new_buffer(v)

    def check_inputs(self, inputs) -> dict:
        env = super().check_inputs(inputs)
        for i in self.donated:
            # the plan writes into a donated buffer as it is: one numpy could not write
            # through directly (read-only, strided) is copied first
            v = self.graph.inputs[i]
            x = env[v]
            if not (x.flags.c_contiguous and x.flags.writeable and x.flags.aligned):
                env[v] = np.array(x, order="C", copy=True)      # (0-d stays 0-d)
        return env

    def run_step(self, step, env, comm, slots, nthreads):
        """One step from Python: a kernel, or an op as its lowering's `run` says."""
        if isinstance(step, KernelStep):
            self.run_kernel(step, env, nthreads, slots)
        else:
            lowering_of(step).run(self, step, env, comm, slots, nthreads)

    def run_kernel(self, step: KernelStep, env, nthreads, slots):
        arrays = []
        for v in step.params:
            x = env.get(v)
            if x is None:
                x = env[v] = self.buffer(v, slots, env)
            elif not x.flags.c_contiguous:
                x = np.ascontiguousarray(x)
            arrays.append(x)
        fn = step.fn
        if step.par == "reduction" and nthreads > 1 and step.work >= PAR_WORK:
            t = max(1, min(nthreads, step.extent))
            out_i = step.params.index(step.root)
            partial = np.empty((t,) + step.root.shape, step.root.dtype)
            arrays[out_i] = partial
            ptrs = [a.ctypes.data for a in arrays]
            _split(fn, ptrs, step.extent, t)
            _combine(step.root.producer.attrs["kind"], partial, env[step.root])
            return
        ptrs = [a.ctypes.data for a in arrays]
        if step.par == "rows" and nthreads > 1 and step.work >= PAR_WORK:
            _split(fn, ptrs, step.extent, min(nthreads, step.extent))
        else:
            fn(*ptrs, 0, step.extent, 0)


def native_collectives(comm):
    """Which of this communicator's collectives run as native instructions (exchange.py):
    False for none, else its `native_exchange`'s scope (backends/native_exchange.py)."""
    if comm is None or comm.native_exchange is None:
        return False
    return comm.native_exchange.scope


def compile_kernels(kernels, modules, stats) -> dict:
    """Compiles the plan's LLVM modules and binds each KernelStep to its function; the IR
    text of each module (kept for SPMD_DUMP)."""
    ir = {}
    for key, (text, names) in modules.items():
        ir[key] = text
        try:
            addrs = compile_ir(text, names, stats, key == "big")
        except InvalidModule as e:
            raise InvalidModule(_kernel_named(kernels, e.function), e.message) from None
        for k in kernels:
            if k.name in addrs:
                k.bind(addrs[k.name], addrs[k.name + "_t"])
    return ir


def _kernel_named(kernels, name):
    """A function's name with the ops it fuses and their user lines (for an error)."""
    for k in kernels:
        if k.name == name:
            locs = sorted({op.loc for op in k.kernel.ops if op.loc})
            return f"kernel {name} ({k.label}{', from ' + ', '.join(locs) if locs else ''})"
    return name


def _split(fn, ptrs, extent, t):
    bounds = [extent * i // t for i in range(t + 1)]
    futs = [pool().submit(fn, *ptrs, bounds[i], bounds[i + 1], i) for i in range(1, t)]
    fn(*ptrs, bounds[0], bounds[1], 0)
    for f in futs:
        f.result()


def _label(step):
    if isinstance(step, KernelStep):
        return step.label, "compute", getattr(step.root.producer, "loc", None)
    return op_label(step)


def _combine(kind, partial, out):
    f = {"sum": np.sum, "prod": np.prod, "max": np.max, "min": np.min}[kind]
    out[...] = f(partial, axis=0)


def _dump(exe):
    d = os.environ.get("SPMD_DUMP")
    if not d:
        return
    os.makedirs(d, exist_ok=True)
    base = os.path.join(d, f"{exe.graph.name}.llvm")
    with open(base + ".fusion.txt", "w") as f:
        f.write(str(exe.plan))
    with open(base + ".ll", "w") as f:
        f.write("\n\n".join(exe.ir.values()))
    if "optimized_ir" in exe.stats:
        with open(base + ".opt.ll", "w") as f:
            f.write("\n\n".join(exe.stats["optimized_ir"]))


def compile_llvm(graph: Graph, threads=None, donated=(), written=None, in_outputs=True,
                 build=True) -> LLVMExecutable:
    """`in_outputs`: may temporaries be computed in outputs' buffers before the outputs are
    written (memory.py)? `build=False`: the kernels not compiled (LLVMExecutable)."""
    return LLVMExecutable(plan_program(graph, donated, in_outputs), threads, written, build)
