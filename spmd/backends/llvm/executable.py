"""Run a fusion plan: native kernels called through ctypes (which releases the GIL), with
the outer loop of large kernels split over a thread pool; dot_general through numpy's
matmul (BLAS) into a preallocated output with the operands' transposes folded into the
call; collectives and every op without a native lowering through its numpy reference.

Temporaries come from the memory plan (passes/memory.py): static offsets in one arena
per thread, kept between calls, so a step allocates no temporaries; an elementwise kernel
writes in place into a dying input's buffer where the plan says so, and a program output
is computed in the buffer the caller gets (a dot's result updated in place by a kernel).
"""
from __future__ import annotations

import ctypes
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ...errors import SpmdError
from ...ir import Graph
from ...ir.ops.dot import dims as dot_dims
from ...tools import timeline
from .fuse import Kernel, fuse, reindexes
from .memory import plan_memory
from ..executor import Executable, op_label, run_op
from .codegen import Split, kernel_ir
from .jit import compile_ir
from . import native
from .scalar import SV, ScalarBuilder, Unsupported, compute_dtype, is_complex

# a kernel is split over threads only when it has this many elements to touch: below it,
# waking a pool thread (which may not get a core at once on a loaded machine) costs more
PAR_WORK = 1 << 20

_pool = None
_pool_lock = threading.Lock()


def cores():
    return os.cpu_count() or 1


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


# a reduction over leading axes that keeps the last one (a bias's gradient, summing the
# rows of a batch) is not fused from this size on: the kernel would read its operand
# column by column; on its own it runs row by row (natively, or numpy's sum)
COLUMN_REDUCE = 1 << 16


def column_reduce(op) -> bool:
    if op.name != "reduce":
        return False
    x = op.operands[0]
    axes = op.attrs["axes"]
    return bool(axes) and x.ndim - 1 not in axes and x.size >= COLUMN_REDUCE


# ops the scalar builder lowers on complex values (a pair of floats); the others (divide,
# exp, abs, reductions...) run through their numpy reference
COMPLEX_LOWERED = ("add", "subtract", "multiply", "negate", "conj", "real", "imag", "select", "compare",
                   "convert", "broadcast_in_dim", "transpose", "slice", "reshape", "constant")


def _complex_lowered(op) -> bool:
    return op.name in COMPLEX_LOWERED


def fusible(op) -> bool:
    d = op.opdef
    if column_reduce(op):
        return False
    if any(is_complex(v.dtype) for v in (*op.operands, *op.results)) and not _complex_lowered(op):
        return False        # the op runs through its numpy reference
    if d.fusion in ("reindex", "reduce"):
        return all(v.dtype != "bool" or op.name != "iota" for v in op.results)
    if d.fusion != "elementwise" or d.scalar is None:
        return False
    try:   # a dry run: does the builder lower this op for these dtypes?
        b = ScalarBuilder(lambda line: None, lambda: "%x", lambda line: None)
        d.scalar(b, *[SV("%a", compute_dtype(o.dtype)) for o in op.operands], **op.attrs)
    except Unsupported:
        return False
    return True


class KernelStep:
    def __init__(self, kernel, cg):
        self.kernel = kernel
        self.name = cg.name
        self.params = list(cg.params)                   # Values, in parameter order
        self.par, self.extent = cg.par, cg.extent
        self.root = kernel.root
        # timeline name: the ops it fuses ("tanh+reduce"), data movement left out
        ops = [op.name for op in kernel.ops if not reindexes(op)] or [kernel.root.producer.name]
        self.label = "+".join(ops)
        self.fn = None
        self.addr_t = None                              # the trampoline (native schedules)
        self.work = cg.work

    def bind(self, addr):
        n = len(self.params)
        proto = ctypes.CFUNCTYPE(None, *([ctypes.c_void_p] * n), ctypes.c_int64, ctypes.c_int64, ctypes.c_int64)
        self.fn = proto(addr)


def writes_into(op) -> bool:
    """Ops the backend runs into a buffer it is given (BLAS's output, `out=` of an OpDef
    that takes one): the memory plan places their results like a kernel's."""
    return op.name == "dot_general" or op.opdef.takes_out


class LLVMExecutable(Executable):
    def __init__(self, graph: Graph, threads=None, donated=()):
        self.graph = graph
        self.threads = threads
        self.donated = tuple(sorted(donated))
        t0 = time.perf_counter()
        roots, memo = set(), {}
        for _ in range(len(graph.ops) + 1):
            plan = fuse(graph, fusible, frozenset(roots))
            # every kernel that wants a value materialised says so in one pass; kernels the
            # new roots leave alone are generated once (memo) across the re-plans
            gen, split = [], set()
            for i, k in enumerate(plan.kernels()):
                key = (tuple(map(id, k.ops)), id(k.root), tuple(map(id, k.outputs)), tuple(map(id, k.inputs)))
                hit = memo.get(key)
                if hit is None:
                    try:
                        hit = memo[key] = kernel_ir(k, f"k{i}", cores())
                    except Split as e:
                        hit = memo[key] = e
                if isinstance(hit, Split):
                    split.add(hit.value)
                    continue
                text, decls, cg = hit
                if cg.name != f"k{i}":
                    cg.name = f"k{i}"
                    text = cg.render()
                    hit = memo[key] = (text, decls, cg)
                gen.append(hit)
            if not split:
                break
            roots |= split
        else:
            raise SpmdError(f"internal error: fusion of {graph.name} did not converge")
        self.plan = plan
        self.memory = plan_memory(graph, plan.steps, writes_into, self.donated,
                                  in_place=os.environ.get("SPMD_IN_PLACE", "1") != "0",
                                  same_bytes=lambda op: op.name == "reshape")
        # kernels that write an output in place read and write it through one pointer
        for j, (k, (text, decls, cg)) in enumerate(zip(plan.kernels(), gen)):
            pairs = {r: self.memory.in_place[r] for r in k.outputs if r in self.memory.in_place}
            if pairs:
                gen[j] = (cg.render(pairs), decls, cg)
        self.steps = []
        ki = iter(gen)
        for s in plan.steps:
            self.steps.append(KernelStep(s, next(ki)[2]) if isinstance(s, Kernel) else s)
        kernels = [s for s in self.steps if isinstance(s, KernelStep)]
        self.stats = {"kernels": len(kernels), "codegen_s": time.perf_counter() - t0}
        t1 = time.perf_counter()
        # two modules: big kernels get the full O3 (unrolled, interleaved), small ones a
        # cheaper pipeline: most kernels of a real program are small, and compile 5x faster
        self.ir = {}
        for big in (True, False):
            part = [(t, d, cg) for t, d, cg in gen if cg.big == big]
            if not part:
                continue
            decls = sorted(set().union(*[d for _, d, _ in part]))
            tramps = [native.trampoline(cg.name, len(cg.params)) for _, _, cg in part]
            ir = "\n".join(decls + [t for t, _, _ in part] + tramps
                           + ['attributes #0 = { nounwind "no-trapping-math"="true" }'])
            self.ir["big" if big else "small"] = ir
            addrs = compile_ir(ir, [n for _, _, cg in part for n in (cg.name, cg.name + "_t")], self.stats, big)
            for k in kernels:
                if k.name in addrs:
                    k.bind(addrs[k.name])
                    k.addr_t = addrs[k.name + "_t"]
        self.stats["compile_s"] = time.perf_counter() - t1
        self._dots = {s: dot_plan(s) for s in self.steps if getattr(s, "name", None) == "dot_general"}
        self._nbytes = {v: v.size * np.dtype(v.dtype).itemsize for v in self.memory.offset_of}
        self._local = threading.local()
        # control-flow bodies (while, cond, scan) run as native executables of their own
        self._subs = {id(op.attrs[k]): LLVMExecutable(op.attrs[k], threads)
                      for op in graph.ops for k in op.opdef.subgraphs}
        self._schedules = {}
        _dump(self)

    def __reduce__(self):
        # shipped to Ray actors: rebuilt there from the graph (the object-code cache,
        # keyed by the IR, makes that a load when the actor's host compiled it before)
        return (LLVMExecutable, (self.graph, self.threads, self.donated))

    # -- running --------------------------------------------------------------------------
    @property
    def planned(self):
        return self.memory.offset_of

    def run(self, env, comm):
        nthreads = self.threads or threads_for(comm)
        if timeline.enabled() or os.environ.get("SPMD_NATIVE", "1") == "0":
            # step by step from Python, each step a span on the timeline
            slots = self._arena()

            def step_fn(step, env, comm):
                if isinstance(step, KernelStep):
                    self._run_kernel(step, env, nthreads, self.memory, slots)
                else:
                    self._run_op(step, env, comm, self.memory, slots, nthreads)
            self.run_steps(self.steps, self.memory.free_after, env, comm, step_fn, _label)
            return
        sched = self._schedules.get(nthreads)
        if sched is None:
            sched = self._schedules[nthreads] = Schedule(self, nthreads)
        sched.run(env, comm)

    def memory_report(self, comm=None) -> dict:
        """The plan's figures (passes/memory.py) plus the native schedule's scratch (the
        copies of dot operands BLAS cannot read where they are), per device."""
        n = self.threads or threads_for(comm)
        sched = self._schedules.get(n)
        if sched is None and os.environ.get("SPMD_NATIVE", "1") != "0":
            sched = self._schedules[n] = Schedule(self, n)
        rep = self.memory.report()
        rep["scratch_bytes"] = sum(sched.scratch_sizes.values()) if sched is not None else 0
        return rep

    def _arena(self):
        """This thread's arena of temporaries (the local runtime runs ranks as threads)."""
        a = getattr(self._local, "arena", None)
        if a is None:
            a = self._local.arena = np.empty(max(self.memory.arena_bytes, 1), np.uint8)
        return a

    def _buffer(self, v, mem, arena, env=None):
        """The array step writes v into: the buffer of the input it is written in place
        into, its place in the arena, or (a program output) a fresh array."""
        off = mem.offset_of.get(v)
        if off is not None:             # (in place into a temporary: the same offset)
            return arena[off:off + self._nbytes[v]].view(v.dtype).reshape(v.shape)
        src = mem.in_place.get(v)
        if src is not None:
            x = env.get(src) if env is not None else None
            if x is None or not x.flags.c_contiguous:
                raise SpmdError(f"internal error: {v} is planned in place into {src}, which is not live")
            return x
        return np.empty(v.shape, v.dtype)

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

    def _run_kernel(self, step: KernelStep, env, nthreads, mem, slots):
        arrays = []
        for v in step.params:
            x = env.get(v)
            if x is None:
                x = env[v] = self._buffer(v, mem, slots, env)
            elif not x.flags.c_contiguous:
                x = np.ascontiguousarray(x)
            arrays.append(x)
        fn = step.fn
        if step.par == "reduce" and nthreads > 1 and step.work >= PAR_WORK:
            t = max(1, min(nthreads, step.extent))
            out_i = step.params.index(step.root)
            partial = np.empty((t,) + step.root.shape, step.root.dtype)
            arrays[out_i] = partial
            ptrs = [a.ctypes.data for a in arrays]
            self._split(fn, ptrs, step.extent, t)
            _combine(step.root.producer.attrs["kind"], partial, env[step.root])
            return
        ptrs = [a.ctypes.data for a in arrays]
        if step.par == "rows" and nthreads > 1 and step.work >= PAR_WORK:
            self._split(fn, ptrs, step.extent, min(nthreads, step.extent))
        else:
            fn(*ptrs, 0, step.extent, 0)

    @staticmethod
    def _split(fn, ptrs, extent, t):
        bounds = [extent * i // t for i in range(t + 1)]
        futs = [pool().submit(fn, *ptrs, bounds[i], bounds[i + 1], i) for i in range(1, t)]
        fn(*ptrs, bounds[0], bounds[1], 0)
        for f in futs:
            f.result()

    def _run_op(self, op, env, comm, mem, slots, nthreads=1):
        if op.name == "dot_general":
            _, (_, m, k), _, _, (_, _, n) = self._dots[op]
            native.set_blas_threads(1 if m * n * k < native.SMALL_DOT else nthreads)
            out = self._buffer(op.result, mem, slots, env)
            try:
                _dot(*[env[o] for o in op.operands], out, self._dots[op])
            except Exception as e:
                raise SpmdError(f"{op.name} at {op.loc} failed at run time: {type(e).__name__}: {e}") from e
            env[op.result] = out
            return
        if op.opdef.takes_out:
            # into the plan's buffer (maybe its operand's: all_reduce in place)
            out = self._buffer(op.result, mem, slots, env)
            placed = mem.joined.get(op.result)
            if placed is not None:
                _join(op, [env[o] for o in op.operands], out, placed)
                env[op.result] = out
                return
            run_op(op, env, comm, out=out)
            if env[op.result] is not out:
                np.copyto(out, env[op.result])
                env[op.result] = out
            return
        # control-flow bodies (while, cond, scan) run as native executables of their own
        run_op(op, env, comm, run=lambda g, xs: self._subs[id(g)](xs, comm))


def _join(op, xs, out, placed):
    """A join (concatenate) whose operands at `placed` were computed in their place in
    `out` (the memory plan): only the others are copied in."""
    d = op.opdef.joins(op.attrs)
    at = 0
    for i, x in enumerate(xs):
        n = x.shape[d]
        region = out[(slice(None),) * d + (slice(at, at + n),)]
        at += n
        if i in placed and x.__array_interface__["data"][0] == region.__array_interface__["data"][0] \
                and x.strides == region.strides:
            continue
        region[...] = x


def _label(step):
    if isinstance(step, KernelStep):
        return step.label, "compute", getattr(step.root.producer, "loc", None)
    return op_label(step)


def _combine(kind, partial, out):
    f = {"sum": np.sum, "prod": np.prod, "max": np.max, "min": np.min}[kind]
    out[...] = f(partial, axis=0)


def dot_plan(op):
    """(lhs permutation, lhs 3-d shape, rhs permutation, rhs 3-d shape, out 3-d shape):
    dot_general as one batched matmul, worked out once at compile time."""
    lhs, rhs = op.operands
    lb, rb, lc, rc = (op.attrs[k] for k in ("lhs_batch", "rhs_batch", "lhs_contract", "rhs_contract"))
    lf, rf = dot_dims(lhs.ndim, rhs.ndim, lb, rb, lc, rc)
    size = lambda v, ds: int(np.prod([v.shape[d] for d in ds], dtype=np.int64))  # noqa: E731
    b, m, n, k = size(lhs, lb), size(lhs, lf), size(rhs, rf), size(lhs, lc)
    return (list(lb) + lf + list(lc), (b, m, k), list(rb) + list(rc) + rf, (b, k, n), (b, m, n))


def _dot(lhs, rhs, out, plan):
    """The operands' transposes are views (BLAS reads them transposed); the result goes
    straight into `out`."""
    pa, sa, pb, sb, so = plan
    a = lhs.transpose(pa).reshape(sa)
    c = rhs.transpose(pb).reshape(sb)
    o = out.reshape(so)
    if so[0] == 1:
        np.matmul(a[0], c[0], out=o[0])
    else:
        np.matmul(a, c, out=o)


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


def compile_llvm(graph: Graph, threads=None, donated=()) -> LLVMExecutable:
    return LLVMExecutable(graph, threads, donated)


class _Scratch:
    """A per-thread buffer an instruction uses internally (not a value of the program).
    Instructions run one at a time, so scratch of the same `slot` (a dot's lhs copy is
    slot 0, its rhs copy slot 1) shares one buffer, as large as the largest."""

    def __init__(self, nbytes, slot=0):
        self.nbytes, self.slot = nbytes, slot


def _in_place(view, dbase, perm, shape4, isz):
    """(offset, transpose flag, leading dim, outer and inner batch strides) for BLAS to read
    `view`, permuted and reshaped to (outer, inner, rows, cols), where it is; or None."""
    try:
        v4 = view.transpose(perm).reshape(shape4)
    except ValueError:
        return None
    if not np.may_share_memory(v4, dbase):
        return None
    lay = native.gemm_operand(v4.strides[2], v4.strides[3], isz, shape4[2], shape4[3])
    if lay is None:
        return None
    off = v4.__array_interface__["data"][0] - dbase.__array_interface__["data"][0]
    return (off,) + lay + (v4.strides[0], v4.strides[1])


class _Segment:
    def __init__(self):
        self.instrs = []        # (function address, [entries]); an entry is an int or (Value, byte offset)
        self.allocs = []        # (value, in-place source or None): values it writes outside the arena
        self.steps = []         # step indices it covers


class Schedule:
    """The program's steps as native segments (one call each, see native.py) and the steps
    that run in Python between them (collectives, ops without a native lowering, kernels
    big enough to split over threads)."""

    def __init__(self, exe, nthreads):
        self.exe = exe
        self.nthreads = nthreads
        mem = exe.memory
        b = native.blas()
        helpers = native.helpers()
        self.run_fn = helpers["run"]
        self.views = {}          # value -> (base value, dummy view, dummy base): a view computed for free
        self.consts = {}         # value -> its array (constants are not made per call)
        self.items = []          # _Segment | step index
        seg = None

        def flush():
            nonlocal seg
            if seg is not None and seg.instrs:
                self.items.append(seg)
            elif seg is not None:
                self.items.extend(seg.steps)
            seg = None

        for k, step in enumerate(exe.steps):
            instr = None
            if isinstance(step, KernelStep):
                threaded = step.par is not None and nthreads > 1 and step.work >= PAR_WORK
                if not threaded and step.addr_t and not any(v in self.views for v in step.params):
                    instr = (step.addr_t, [(v, 0) for v in step.params] + [0, step.extent, 0])
            elif step.name == "dot_general" and b:
                instr = self._dot(step, b, helpers)
            elif step.opdef.view and self._view(step):
                if seg is None:
                    seg = _Segment()
                seg.steps.append(k)
                continue
            elif step.opdef.view:
                instr = self._copy(step, helpers)
            elif step.name in ("gather", "scatter"):
                instr = self._take(step, helpers)
            elif step.name == "reduce":
                instr = self._colsum(step, helpers)
            elif step.name == "constant":
                # made once: read where it is (the graph keeps the array)
                c = np.asarray(step.attrs["value"], dtype=step.result.dtype)
                self.consts[step.result] = c if c.flags.c_contiguous else c.copy()
                if seg is None:
                    seg = _Segment()
                seg.steps.append(k)
                continue
            if instr is None:
                flush()
                self.items.append(k)
                continue
            if seg is None:
                seg = _Segment()
            seg.instrs += instr if isinstance(instr, list) else [instr]
            seg.steps.append(k)
            written = step.kernel.outputs if isinstance(step, KernelStep) else step.results
            seg.allocs += [(v, mem.in_place.get(v)) for v in written if v not in mem.offset_of]
        flush()
        # the argument blocks' layout in the arena, and what each segment patches per call
        self.size = 0
        for it in self.items:
            if not isinstance(it, _Segment):
                continue
            it.offsets, dyn, pos, idx, offs = [], {}, [], [], []
            for fn, entries in it.instrs:
                it.offsets.append(self.size)
                for j, e in enumerate(entries):
                    if (isinstance(e, tuple) and not isinstance(e[0], _Scratch) and e[0] not in mem.offset_of
                            and e[0] not in self.consts):
                        pos.append(self.size + j)
                        idx.append(dyn.setdefault(e[0], len(dyn)))
                        offs.append(e[1])
                self.size += len(entries)
            it.dyn = list(dyn)
            it.pos, it.idx = np.array(pos, np.int64), np.array(idx, np.int64)
            it.offs = np.array(offs, np.int64)
        self.views = {v: t[0] for v, t in self.views.items()}     # the dummies are not needed any more
        self.scratch_sizes = {}          # scratch slot -> bytes (one buffer per slot and thread)
        for it in self.items:
            if isinstance(it, _Segment):
                for _, entries in it.instrs:
                    for e in entries:
                        if isinstance(e, tuple) and isinstance(e[0], _Scratch):
                            s = e[0].slot
                            self.scratch_sizes[s] = max(self.scratch_sizes.get(s, 0), e[0].nbytes)
        # a value is dropped after its last use, where reading a view made for free reads its base
        last, n = {}, len(exe.steps)
        for k, step in enumerate(exe.steps):
            for v in (step.kernel.inputs if isinstance(step, KernelStep) else step.operands):
                last[self.views.get(v, v)] = k
                last[v] = k
        outs = set(exe.graph.outputs)
        for v in outs:
            last[self.views.get(v, v)] = n
        self.free_after = [[] for _ in range(n)]
        for v, k in last.items():
            if v not in outs and k < n:
                self.free_after[k].append(v)
        self._local = threading.local()

    # -- building --------------------------------------------------------------------------
    def _dummy(self, v):
        t = self.views.get(v)
        if t is not None:
            return t
        base = np.empty(v.shape, v.dtype)
        return (v, base, base)

    def _view(self, op):
        """Can op's result be read as a strided view of a buffer (no copy)? Records it."""
        base, view, dbase = self._dummy(op.operands[0])
        try:
            r = op.opdef.ref(view, **op.attrs)
        except Exception:     # noqa: BLE001 - then it simply runs in Python
            return False
        if not isinstance(r, np.ndarray) or r.size == 0 or not np.may_share_memory(r, dbase):
            return False
        self.views[op.result] = (base, r, dbase)
        return True

    def _copy(self, op, helpers):
        """A view op numpy would copy (a reshape of a transposed view): a native strided copy
        of its operand, in row-major order, into a fresh buffer."""
        isz = np.dtype(op.result.dtype).itemsize
        if op.name != "reshape" or isz not in (1, 4, 8) or op.result.size == 0:
            return None
        base, view, dbase = self._dummy(op.operands[0])
        ext = native.copy_entries(view, isz)
        if ext is None:
            return None
        off = view.__array_interface__["data"][0] - dbase.__array_interface__["data"][0]
        return helpers[f"spmd_copy{isz}"], [(op.result, 0), (base, off)] + ext

    def _colsum(self, op, helpers):
        """A float sum over the leading axes of a contiguous operand, row by row."""
        x = op.operands[0]
        axes = tuple(op.attrs["axes"])
        if (op.attrs["kind"] != "sum" or x.dtype not in ("float32", "float64") or x in self.views
                or axes != tuple(range(len(axes))) or x.size == 0):
            return None
        cols = op.result.size
        name = "spmd_colsum_f32" if x.dtype == "float32" else "spmd_colsum_f64"
        return helpers[name], [(op.result, 0), (x, 0), x.size // cols, cols]

    def _take(self, op, helpers):
        """gather / scatter(-add) along axis 0 of contiguous operands, natively."""
        if op.attrs["axis"] != 0 or any(o in self.views for o in op.operands):
            return None
        x, idx = op.operands[0], op.operands[1]
        if x.shape[0] == 0 or idx.dtype not in ("int32", "int64"):
            return None
        is64 = int(idx.dtype == "int64")
        row = x.size // x.shape[0]
        isz = np.dtype(x.dtype).itemsize
        if op.name == "gather":
            return helpers["spmd_gather"], [(op.result, 0), (idx, 0), (x, 0), idx.size, x.shape[0], row * isz, is64]
        if x.dtype not in ("float32", "float64"):
            return None
        name = "spmd_scatter_f32" if x.dtype == "float32" else "spmd_scatter_f64"
        return helpers[name], [(op.result, 0), (x, 0), (idx, 0), (op.operands[2], 0), idx.size, x.shape[0],
                               row, is64, x.size * isz]

    def _dot(self, op, b, helpers):
        """A dot as cblas calls reading its operands in place, or, for an operand BLAS cannot
        read as it is (a reshape of a transposed view), from a native copy into scratch."""
        dt = op.result.dtype
        if dt not in ("float32", "float64") or any(o.dtype != dt for o in op.operands):
            return None
        pa, sa, pb, sb, so = self.exe._dots[op]
        _, m, n = so
        k = sa[2]
        lhs, rhs = op.operands
        bshape = [lhs.shape[d] for d in op.attrs["lhs_batch"]]
        if min([m, n, k] + bshape) == 0:
            return None
        isz = np.dtype(dt).itemsize
        da, db = self._dummy(lhs), self._dummy(rhs)
        bt = int(np.prod(bshape, dtype=np.int64))
        # in place with some split of the batch loops; else the operands that cannot be
        # read in place are copied, in the dot's order, to contiguous scratch
        for b1, b2, copy in [lv + (False,) for lv in native.batch_levels(bshape)] + [(1, bt, True)]:
            got, pre = [], []
            for (base, view, dbase), perm, rows, cols in ((da, pa, m, k), (db, pb, k, n)):
                lay = _in_place(view, dbase, perm, (b1, b2, rows, cols), isz)
                if lay is not None:
                    got.append((base,) + lay)
                    continue
                if not copy:
                    break
                vt = view.transpose(perm)
                ext = native.copy_entries(vt, isz)
                if ext is None:
                    return None
                sc = _Scratch(vt.size * isz, len(pre))
                off = vt.__array_interface__["data"][0] - dbase.__array_interface__["data"][0]
                pre.append((helpers[f"spmd_copy{isz}"], [(sc, 0), (base, off)] + ext))
                got.append((sc, 0, 111, cols, bt * rows * cols * isz, rows * cols * isz))
            if len(got) < 2:
                continue
            (ba, offa, ta, lda, a1, a2), (bb, offb, tb, ldb, c1, c2) = got
            name = "spmd_dot_f32" if dt == "float32" else "spmd_dot_f64"
            entries = [b["gemm"][dt], (ba, offa), (bb, offb), (op.result, 0), m, n, k, lda, ldb, n, ta, tb,
                       b1, a1, c1, b2 * m * n * isz, b2, a2, c2, m * n * isz,
                       native.set_threads_addr(), 1 if m * n * k < native.SMALL_DOT else self.nthreads,
                       native.blas_threads_cell.ctypes.data]
            return pre + [(helpers[name], entries)]
        return None

    # -- running ---------------------------------------------------------------------------
    def _state(self):
        """This thread's arena and program arrays (the memory plan's buffers are per thread)."""
        st = getattr(self._local, "st", None)
        if st is not None:
            return st
        exe, mem = self.exe, self.exe.memory
        slots = exe._arena()
        arena = np.zeros(max(self.size, 1), np.int64)
        base = arena.ctypes.data
        progs = []
        scratch = {s: np.empty(n, np.uint8) for s, n in self.scratch_sizes.items()}
        for it in self.items:
            if not isinstance(it, _Segment):
                continue
            prog = np.zeros(2 * len(it.instrs), np.int64)
            for i, ((fn, entries), o) in enumerate(zip(it.instrs, it.offsets)):
                prog[2 * i], prog[2 * i + 1] = fn, base + 8 * o
                for j, e in enumerate(entries):
                    if isinstance(e, tuple):
                        v, off = e
                        if isinstance(v, _Scratch):
                            arena[o + j] = scratch[v.slot].ctypes.data + off
                        elif v in mem.offset_of:
                            arena[o + j] = slots.ctypes.data + mem.offset_of[v] + off
                        elif v in self.consts:
                            arena[o + j] = self.consts[v].ctypes.data + off
                    else:
                        arena[o + j] = e
            progs.append(prog)
        st = self._local.st = (arena, progs, slots, scratch)
        return st

    def _get(self, v, env, slots):
        x = env.get(v)
        if x is not None:
            return x
        c = self.consts.get(v)
        if c is not None:
            return c
        mem = self.exe.memory
        if v in mem.offset_of:
            return self.exe._buffer(v, mem, slots)
        op = v.producer           # a view the native code read for free: numpy makes it now
        x = env[v] = op.opdef.ref(*[self._get(o, env, slots) for o in op.operands], **op.attrs)
        return x

    def run(self, env, comm):
        exe, mem = self.exe, self.exe.memory
        arena, progs, slots, _ = self._state()
        run_fn = self.run_fn
        steps = exe.steps
        si = 0
        for it in self.items:
            if isinstance(it, _Segment):
                for v, src in it.allocs:
                    env[v] = np.empty(v.shape, v.dtype) if src is None else self._get(src, env, slots)
                if it.dyn:
                    addrs = np.empty(len(it.dyn), np.int64)
                    for j, v in enumerate(it.dyn):
                        x = env.get(v)
                        if x is None:
                            x = self._get(v, env, slots)
                        if not x.flags.c_contiguous:
                            x = env[v] = np.ascontiguousarray(x)
                        addrs[j] = x.ctypes.data
                    arena[it.pos] = addrs[it.idx] + it.offs
                prog = progs[si]
                si += 1
                run_fn(prog.ctypes.data, len(it.instrs))
                done = it.steps
            else:
                step = steps[it]
                if isinstance(step, KernelStep):
                    for v in step.kernel.inputs:
                        if v not in env:
                            env[v] = self._get(v, env, slots)
                    exe._run_kernel(step, env, self.nthreads, mem, slots)
                else:
                    for o in step.operands:
                        if o not in env:
                            env[o] = self._get(o, env, slots)
                    exe._run_op(step, env, comm, mem, slots, self.nthreads)
                done = (it,)
            for k in done:
                for v in self.free_after[k]:
                    env.pop(v, None)
        for v in exe.graph.outputs:
            if v not in env:
                env[v] = self._get(v, env, slots)
