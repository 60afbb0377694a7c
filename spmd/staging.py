"""Staging a function: trace it once per input signature (frontend/), run the stages
of docs/design.md on the graph, cache the result, and run it.

    traced -> propagated -> partitioned -> optimized -> executable

(autodiff happens during tracing; without a mesh there is nothing to propagate or
partition.) The stages after tracing are one pipeline (compiler/pipeline.py). spmd.jit
(api.py) and eager mode's one-op programs (eager/) are both Jitted functions.

A Jitted function made with `fallback=True` (spmd.jit's default) whose tracing needs the
value of a traced array (ConcreteValueError: float(), `if` on data, math.sqrt, .item(),
np.array(traced)) runs eagerly instead, for that input signature from then on: the
function is called on its arguments placed as jit places them (spmd.Arrays split by
in_shardings), so numpy on them runs op by op on the sharded arrays (eager mode), and a
FallbackWarning names the function and the line that needed the value (once per line).
Without a mesh it is the plain numpy function.
"""
from __future__ import annotations

import functools
import os

import numpy as np

from .errors import ConcreteValueError, FallbackWarning, MemoryLimitError, SpmdError, TraceError, warn_at
from .frontend import core
from .frontend import functionalize as fz
from .frontend import numpy_buffers, random_guard
from . import graph_breaks as gb
from .frontend.trace import ShapeDtype, Trace, Tracer, current_trace, leaf_aval, runaway, tracing
from .ir import Graph
from .ir.mesh import Sharding
from .runtime.array import Array, device_put, donated_handles
from .tree import tree_flatten, tree_unflatten


STAGES = ("traced", "propagated", "partitioned", "optimized")
# what lowered.memory()'s figures leave out: memory the program does not plan
NOT_COUNTED = ("the communicator's own memory: MPI's internal buffers and shared-memory segments, the "
               "result buffers the MPI and Ray communicators keep for reuse (up to 4 of each size, "
               "collectives/pool.py), the per-member blocks a float all_reduce over MPI or Ray gathers "
               "to reduce in group order; the compiled code; Python's and numpy's own objects")


def trace_function(fn, args, static_argnums=(), mesh=None, oracle=None):
    """Trace fn on abstract versions of args. Returns (graph, in_tree, out_tree); the
    graph's `updates` are the arguments fn wrote, (leaf, new Value). `oracle` gives the
    values tracing needs from the data (graph_breaks.Oracle), where it is given."""
    dyn = [a for i, a in enumerate(args) if i not in static_argnums]
    leaves, in_tree = tree_flatten(dyn)
    g = Graph(getattr(fn, "__name__", "fn").replace("<", "").replace(">", ""))
    t = Trace(g, mesh)
    t.oracle = oracle
    tracers = _argument_tracers(t, leaves)
    it = iter(tree_unflatten(in_tree, tracers))
    call_args = [a if i in static_argnums else next(it) for i, a in enumerate(args)]
    with numpy_buffers.intercepting(), tracing(t):
        out = _call_traced(fn, call_args)
        out_leaves, out_tree = tree_flatten(out)
        g.outputs = [_output_value(fn, leaf, t) for leaf in out_leaves]
    # arguments the function wrote (x -= x.mean(0), x[i] = v): their new values, by leaf
    g.updates = fz.written_arguments(tracers, g.inputs)
    # results that are a written argument itself (`a += b; return a`): numpy hands back
    # the argument object, and so does jit (with no copy of it); result position -> leaf
    written = {k for k, _ in g.updates}
    g.returned = {i: k for i, leaf in enumerate(out_leaves) for k, tr in enumerate(tracers)
                  if leaf is tr and k in written}
    g.np_random_state = random_guard.state_after(t)
    _check_aliasing(fn, leaves, [k for k, _ in g.updates])
    return g, in_tree, out_tree


def _argument_tracers(t, leaves):
    tracers = []
    for k, leaf in enumerate(leaves):
        shape, dt, weak = leaf_aval(leaf)
        tr = Tracer(t.graph.add_input(shape, dt), t, weak)
        # numpy writes into an array argument in place: the caller sees it (see Jitted)
        tracers.append(fz.as_argument(tr, k, leaf) if _mutable(leaf) else tr)
    return tracers


def _call_traced(fn, call_args):
    try:
        return fn(*call_args)
    except RecursionError as e:
        err = runaway(e)          # spmd's own bookkeeping ran away: name the call and the line
        if err is None:
            raise
        raise err from None
    except ValueError as e:
        # numpy storing a traced scalar into a plain ndarray turns our error into
        # "setting an array element with a sequence": surface ours
        if isinstance(e.__cause__, TraceError):
            raise e.__cause__ from None
        raise


def _output_value(fn, leaf, t):
    try:
        return core.asarray(leaf, t=t).value
    except TypeError:
        why = getattr(leaf, "spmd_not_an_array", None)
        if why is not None:          # e.g. x[mask]: compacted (a graph break), or its error says why
            return core.asarray(why(), t=t).value
        raise TypeError(f"spmd.jit: {fn.__name__} returned a {type(leaf).__name__}, "
                        f"which is not an array") from None


def _check_aliasing(fn, leaves, written):
    """numpy would show a write through one argument in another that shares its memory
    (f(a, a), f(a, a[1:])); traced arguments are separate values, so refuse instead."""
    for k in written:
        for j, other in enumerate(leaves):
            if j == k:
                continue
            a, b = leaves[k], other
            same = a is b or (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)
                              and np.may_share_memory(a, b))
            if same:
                raise SpmdError(f"spmd.jit: {getattr(fn, '__name__', 'fn')} writes into argument leaf {k}, "
                                f"which shares memory with argument leaf {j}; numpy would show the write "
                                f"through both, spmd cannot. Pass a copy (x.copy()) or pass the array once.")


def _mutable(leaf):
    """An argument numpy could write into: an array (0-d too), not a Python or numpy scalar
    (an eager 0-d result that stands for numpy's scalar says so: numpy_scalar)."""
    return isinstance(leaf, (np.ndarray, ShapeDtype)) or \
        (hasattr(leaf, "sharding") and hasattr(leaf, "shape") and not isinstance(leaf, np.generic)
         and not getattr(leaf, "numpy_scalar", False))


class Lowered:
    """A traced and compiled program for one input signature: every stage's Graph,
    the mesh, the per-leaf input/output shardings, and (lazily) the executable."""

    def __init__(self, stages: dict, in_tree, out_tree, backend, mesh=None):
        self.stages = stages
        self.in_tree, self.out_tree = in_tree, out_tree
        self.backend = backend
        self.mesh = mesh
        self._exe = None
        self.updates = []             # argument leaves the program writes (extra outputs)
        self.returned = {}            # result position -> a written argument leaf it is
        # numpy's global random state as the function leaves it (it seeded it: random_guard)
        self.np_random_state = None
        self.donated = frozenset()    # argument leaves whose buffers the program may reuse
        self.breaks = []              # (loc, what, value) the trace took from the data (graph_breaks.py)
        self.timings = {}             # seconds per stage, from the pipeline
        self._fits_checked = False

    def as_text(self, stage="optimized", source=False, compact=False):
        """The program at `stage` as text: exact (it parses back) by default;
        `source=True` puts each op's user line and code in a comment column;
        `compact=True` also folds index arithmetic (masks, slice offsets) into one line
        each (ir/text.py)."""
        from .ir.text import print_graph
        if stage not in self.stages:
            raise ValueError(f"unknown stage {stage!r}; stages: {', '.join(self.stages)}")
        return print_graph(self.stages[stage], source=source, compact=compact)

    @property
    def graph(self):
        """The program every rank runs."""
        return self.stages["optimized"]

    @property
    def in_shardings(self):
        return [v.sharding for v in self.stages.get("propagated", self.stages["traced"]).inputs]

    @property
    def out_shardings(self):
        return [v.sharding for v in self.stages.get("propagated", self.stages["traced"]).outputs]

    def report(self) -> dict:
        """Per-device collectives (op, axes, group_size, in/out shapes, dtype, bytes) and
        comm_bytes of the partitioned program; `launched` / `launched_bytes`, the same for
        the program that runs (independent all-reduces combined); flops; out_shardings."""
        from .sharding.report import report
        return report(self)

    def explain(self, file=None, verbose=False) -> str:
        """Print the collectives and why, the annotations and the peak memory per device;
        with verbose=True also where every value's sharding came from and the largest
        values live at the peak."""
        from .sharding.explain import explain_lowered
        return explain_lowered(self, file, verbose)

    def memory(self) -> dict:
        """Per-device memory of one run of the compiled program, in bytes.

        `peak_bytes`: the most a device holds at once: its arguments, the arena of
        temporaries and the scratch (allocated for every run), and the largest set of
        buffers made per call live at one step (outputs, collectives' results, ops run
        through numpy). `peak`: the busiest step: its `op` and user line (`loc`),
        `live_bytes`, those bytes `by_kind` (arguments, constants, outputs, activations:
        made before the step and read after it, temporaries: made or last read by it)
        and the largest values `live` there (value, shape, dtype, bytes, kind, and the op
        and user line that made it). Also `temp_bytes` (the arena),
        `scratch_bytes` (copies of dot operands BLAS cannot read in place),
        `temporary_bytes` (what a run needs besides its arguments, constants and outputs:
        XLA's temp allocation), `peak_live_bytes` (the largest set of temporaries the arena
        holds at once), `argument_bytes`,
        `output_bytes`, `in_place` (values written into a dying input's buffer),
        `in_outputs` (temporaries computed in an output's buffer before the output is
        written: the arena and these figures leave them out, as XLA's do),
        `temporaries_in_outputs` (the largest of them: value, shape, dtype, bytes, the
        `output` whose buffer holds it, op and user line) and
        `donated` (argument positions whose buffers the program reuses). The numpy
        backend plans nothing: every result is a new array (None for the plan's figures).
        `not_counted` says what none of these figures holds: the communicator's own
        memory, the compiled code, Python's and numpy's objects."""
        from .ir.text import name_values
        g = self.graph
        size = lambda vs: int(sum(v.size * np.dtype(v.dtype).itemsize for v in vs))  # noqa: E731
        rep = {"temp_bytes": None, "peak_live_bytes": None, "argument_bytes": size(g.inputs),
               "output_bytes": size(g.outputs), "in_place": None, "donated": []}
        exe = self.compile()
        if hasattr(exe, "memory_report"):
            rep.update(exe.memory_report(_FakeComm(self.mesh)))
            prof = exe.memory_profile(_FakeComm(self.mesh))
        else:
            from .backends.memory_profile import profile_of_ops
            prof = profile_of_ops(g)
        # values named as in the printed program (as_text("optimized"))
        rep.update(prof.report(name_values(g)))
        rep["not_counted"] = NOT_COUNTED
        return rep

    @property
    def reused(self) -> frozenset:
        """Argument leaves the program writes in place (`updates`) whose buffers it may also
        reuse: numpy writes into them anyway, and the old value is read by no one after
        the run (a stencil step computes its new grid in the old one's buffers). The new
        value ends in them where the memory plan allows; else it is copied in after."""
        return frozenset(self.updates) - self.donated

    def memory_profile(self):
        """What one run holds per device, step by step (backends/memory_profile.py)."""
        exe = self.compile()
        if hasattr(exe, "memory_profile"):
            return exe.memory_profile(_FakeComm(self.mesh))
        from .backends.memory_profile import profile_of_ops
        return profile_of_ops(self.graph)

    def check_fits_machine(self):
        """Before the first run: does what the run will allocate in this process (the
        peak per device beyond the arguments, which exist already, times the devices this
        process runs) fit the memory the machine has free (its share of it, with other
        ranks on this host)? If not, say so now rather than be killed halfway.
        SPMD_MEMORY_CHECK=0 skips the check."""
        if os.environ.get("SPMD_MEMORY_CHECK", "1") == "0":
            return
        free = free_memory_bytes()
        if free is None:
            return
        n = 1
        if self.mesh is not None:
            from .runtime.context import get_runtime
            rt = get_runtime()
            if rt.name not in ("local", "mpi"):      # (Ray: the actors run elsewhere)
                return
            n = len(rt.local_devices(self.mesh))
        prof = self.memory_profile()
        per = prof.peak_bytes - sum(b.nbytes for b in prof.buffers if b.start < 0)
        share = free // max(ranks_on_this_host(), 1)
        if per * n <= share:
            return
        from .backends.memory_budget import SINGULAR, mb
        k = prof.peak_step
        at = prof.ops[k] if k >= 0 else None
        where = f" at {at.name} ({at.loc})" if at is not None and at.loc else ""
        live = ", ".join(f"{mb(b.nbytes)} {SINGULAR[prof.kind(b, k)]} made by "
                         f"{getattr(prof.value_at(b, k).producer, 'name', 'argument')}"
                         + (f" at {prof.value_at(b, k).producer.loc}" if prof.value_at(b, k).producer is not None
                            and prof.value_at(b, k).producer.loc else "")
                         for b in prof.live_at(k)[:4] if b.start >= 0)
        raise MemoryLimitError(
            f"{self.stages['traced'].name}: a run needs {mb(per * n)} more memory in this process ({n} "
            f"device{'s' if n > 1 else ''} x {mb(per)} beyond the arguments, at the peak{where}), but this "
            f"machine has {mb(share)} available{' for each of its ranks' if ranks_on_this_host() > 1 else ''}: it "
            f"would be killed. Largest at the peak: {live}. To fit: spmd.jit(..., memory_limit=bytes) recomputes "
            f"what it can, spmd.checkpoint recomputes layers, splitting parameters, optimizer state and the "
            f"batch over more devices (FSDP) divides them (SPMD_MEMORY_CHECK=0 skips this check).")

    def compile(self):
        if self._exe is None:
            from .backends import compile_graph
            from .compiler.gc_pause import paused
            n = len(self.graph.outputs) - len(self.updates)
            with paused():
                exe = compile_graph(self.graph, self.backend, donated=sorted(self.donated | self.reused),
                                    written={n + j: k for j, k in enumerate(self.updates)})
            # a result that is a written argument (the same value, laid out alike) is not
            # copied: the caller is handed the argument itself (Jitted.__call__)
            outs = self.graph.outputs
            same = {i: n + self.updates.index(k) for i, k in getattr(self, "returned", {}).items()
                    if outs[i] is outs[n + self.updates.index(k)]}
            if same:
                exe.same = same
            self._exe = exe
        return self._exe

    def __call__(self, *flat_args):
        from .runtime.execute import execute
        if not self._fits_checked:
            self.check_fits_machine()
            self._fits_checked = True
        try:
            return execute(self, list(flat_args))
        except Exception as e:
            if self.reused:
                e.add_note(f"spmd: {self.stages['traced'].name} writes argument leaves {sorted(self.reused)} in "
                           f"place; the failed run may have left them partly written")
            raise
        finally:
            if self.donated:        # (also when the run failed: its buffers may be half written)
                self.donate(flat_args)

    def donate(self, flat_args):
        """After a run: the donated spmd.Array arguments are invalid (their buffers may now
        hold the outputs), as jax deletes donated arrays."""
        for k in self.donated:
            x = flat_args[k]
            if isinstance(x, Array):
                x._handles = donated_handles(self.stages["traced"].name, k)


def free_memory_bytes():
    """The memory the machine has available (Linux: MemAvailable), or None if unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def ranks_on_this_host() -> int:
    """MPI processes sharing this machine (mpich's hydra and Open MPI say), else 1."""
    for var in ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE"):
        v = os.environ.get(var)
        if v and v.isdigit():
            return int(v)
    return 1


class _FakeComm:
    """The size of a mesh, where the executable asks a communicator for it."""

    def __init__(self, mesh):
        self.size = 1 if mesh is None else mesh.size


class Jitted:
    """A function traced once per input signature, lowered, compiled and cached; calling
    it runs the program. `write_array(arg, new)` is how an spmd.Array argument the function
    wrote takes its new value (numpy's in-place semantics: the caller sees the write)."""

    def __init__(self, fn, in_shardings=None, out_shardings=None, mesh=None, backend=None,
                 static_argnums=(), donate_argnums=(), write_array=None, memory_limit=None, fallback=False):
        self.fn = fn
        self.memory_limit = None if memory_limit is None else int(memory_limit)
        self.write_array = write_array
        self.fallback = fallback
        self._eager = set()           # signatures whose graph breaks would not pay: they run eagerly
        self._warned = set()          # lines of graph breaks already warned about
        self.in_shardings, self.out_shardings, self.mesh = in_shardings, out_shardings, mesh
        # the LLVM backend (fused native kernels) by default; "numpy" is the reference
        self.backend = backend or os.environ.get("SPMD_COMPILER", "llvm")
        self.static_argnums = (static_argnums,) if isinstance(static_argnums, int) else tuple(static_argnums)
        self.donate_argnums = (donate_argnums,) if isinstance(donate_argnums, int) else tuple(donate_argnums)
        both = set(self.static_argnums) & set(self.donate_argnums)
        if both:
            raise SpmdError(f"spmd.jit: argument(s) {sorted(both)} are both static and donated")
        self._cache = {}
        functools.update_wrapper(self, fn)

    def _key(self, args):
        dyn = [a for i, a in enumerate(args) if i not in self.static_argnums]
        leaves, tree = tree_flatten(dyn)
        static = tuple(args[i] for i in self.static_argnums if i < len(args))
        # a reshape is a view or a copy by the argument's strides: they are part of the key
        layouts = tuple(fz.layout_key(x) for x in leaves)
        return (tree, tuple(leaf_aval(x) for x in leaves), static, layouts), leaves

    def lower(self, *args) -> Lowered:
        return self._lower(args, *self._key(args))

    def _lower(self, args, key, leaves) -> Lowered:
        entry = self._cache.get(key)
        if isinstance(entry, Lowered):
            return entry
        from .compiler.gc_pause import paused
        with paused():
            return self._trace_and_lower(args, key, leaves, entry)

    def _trace_and_lower(self, args, key, leaves, entry) -> Lowered:
        low, known = gb.follow(entry, leaves)       # the graph breaks' programs, on this call's data
        if low is not None:
            return low
        fname = getattr(self.fn, "__name__", "fn")
        oracle = None
        if self.fallback and not any(isinstance(x, ShapeDtype) for x in leaves):
            oracle = gb.Oracle(fname, known, lambda g, v: self._lower_cone(args, leaves, g, v), leaves)
        graph, in_tree, out_tree = trace_function(self.fn, args, self.static_argnums, self.mesh, oracle)
        from .sharding.annotate import resolve_shardings
        mesh, in_sh, out_sh = resolve_shardings(self, args, leaves, graph, out_tree)
        graph.mesh = mesh
        # written arguments are extra outputs, laid out as they came in
        updates = getattr(graph, "updates", [])
        for k, v in updates:
            graph.outputs.append(v)
            out_sh.append(in_sh[k])
            out_sh.names.append(f"the new value of argument {in_sh.names[k]}")
        from .compiler import pipeline
        stages, timings = pipeline.lower(graph, mesh, in_sh, out_sh)
        low = Lowered(stages, in_tree, out_tree, self.backend, mesh)
        low.timings = timings
        low.updates = [k for k, _ in updates]
        low.returned = dict(getattr(graph, "returned", {}))
        low.np_random_state = graph.np_random_state
        low.donated = self._donated_leaves(args) - set(low.updates)
        if self.memory_limit is not None:
            self._fit(low, in_sh.leaves)
        taken = oracle.taken if oracle is not None else []
        low.breaks = [(brk.loc, brk.what, v) for brk, v in taken]
        gb.insert(self._cache, key, taken, low, fname)
        self._warn_breaks(fname, taken)
        return low

    def _lower_cone(self, args, leaves, graph, value) -> Lowered:
        """The program computing `value` of the trace `graph` (a graph break's), sharded as
        this call's arguments are, its result replicated."""
        from .sharding.annotate import resolve_shardings
        from .compiler import pipeline
        g = gb.cone(graph, value)
        mesh, in_sh, out_sh = resolve_shardings(self, args, leaves, g, None)
        g.mesh = mesh
        if mesh is not None:
            out_sh[0] = Sharding(mesh, (None,) * len(g.outputs[0].shape))
        stages, timings = pipeline.lower(g, mesh, in_sh, out_sh)
        dyn = [a for i, a in enumerate(args) if i not in self.static_argnums]
        low = Lowered(stages, tree_flatten(dyn)[1], tree_flatten(0)[1], self.backend, mesh)
        low.timings = timings
        return low

    def _warn_breaks(self, fname, taken):
        for brk, _ in taken:
            if brk.loc not in self._warned:
                self._warned.add(brk.loc)
                warn_at(f"spmd.jit: tracing {fname} needed the value of a traced array at {brk.loc} ({brk.what}), "
                        f"so {fname} is compiled in parts there (a graph break): the part before runs and gives "
                        f"the value, the rest is traced with it, once per value (at most {gb.MAX_VALUES}); "
                        f"spmd.jit(..., fallback=False) makes this an error.", FallbackWarning, brk.loc)

    def _fit(self, low, names):
        """Recompute what the program holds until its plan fits memory_limit per device
        (backends/memory_budget.py); the result is the "remat" stage, and what runs."""
        import time
        from .backends.memory_budget import fit
        t0 = time.perf_counter()
        what = f"spmd.jit({getattr(self.fn, '__name__', 'fn')}, memory_limit={self.memory_limit})"
        g, _ = fit(low.graph, self.backend, sorted(low.donated), self.memory_limit, names, what)
        low.stages["remat"] = low.stages["optimized"] = g
        low.timings["remat"] = time.perf_counter() - t0

    def _donated_leaves(self, args) -> set:
        """The flat argument leaves of the donated arguments."""
        out, at = set(), 0
        for i, a in enumerate(args):
            if i in self.static_argnums:
                continue
            n = len(tree_flatten(a)[0])
            if i in self.donate_argnums:
                out.update(range(at, at + n))
            at += n
        return out

    def __call__(self, *args):
        if current_trace() is not None:
            # a jitted function called while tracing another: inline it into that trace
            return self.fn(*args)
        key, leaves = self._key(args)
        if key in self._eager:
            return self._run_eagerly(args, leaves)
        try:
            low = self._lower(args, key, leaves)
        except Exception as e:
            need = needed_value(e)
            if need is None or not self.fallback:
                raise
            self._eager.add(key)
            name = getattr(self.fn, "__name__", "fn")
            warn_at(f"spmd.jit: tracing {name} needed the value of a traced array at {need.loc}, so {name} "
                    f"runs eagerly on the sharded arrays instead (numpy on spmd.Arrays, op by op: slower "
                    f"than one compiled program); spmd.jit(..., fallback=False) makes this an error. {need}",
                    FallbackWarning, need.loc)
            return self._run_eagerly(args, leaves)
        outs = low(*leaves)
        if low.np_random_state is not None:
            np.random.set_state(low.np_random_state)
        if low.updates:
            outs, new = outs[:len(outs) - len(low.updates)], outs[len(outs) - len(low.updates):]
            for k, v in zip(low.updates, new):
                self._write_back(leaves[k], v)
            for i, k in getattr(low, "returned", {}).items():
                outs[i] = leaves[k]
        return tree_unflatten(low.out_tree, outs)

    def _run_eagerly(self, args, leaves):
        """fn called outside tracing on its arguments placed as jit places them: numpy on
        the spmd.Arrays runs op by op (eager mode). An argument the function wrote that
        was placed as a copy (a numpy array, an Array resharded) takes the new value, as
        under jit; the results are spmd.Arrays, as jit's are (by out_shardings, else as
        the eager run left them, values it read back into numpy replicated)."""
        from .sharding.annotate import argument_shardings, result_shardings
        mesh, shardings = argument_shardings(self, args, leaves)
        if mesh is None:
            return self.fn(*args)
        placed = [x if _is_scalar(x) else _place(x, s, mesh) for x, s in zip(leaves, shardings)]
        handles = [getattr(p, "_handles", None) for p in placed]
        dyn = [a for i, a in enumerate(args) if i not in self.static_argnums]
        it = iter(tree_unflatten(tree_flatten(dyn)[1], placed))
        out = self.fn(*[a if i in self.static_argnums else next(it) for i, a in enumerate(args)])
        for x, p, h in zip(leaves, placed, handles):
            if p is not x and isinstance(p, Array) and p._handles is not h:
                self._write_back(x, p)
        outs, tree = tree_flatten(out)
        return tree_unflatten(tree, [_place(x, s, mesh) if _is_scalar(x) or hasattr(x, "__array__") else x
                                     for x, s in zip(outs, result_shardings(self, tree, len(outs), mesh))])

    def _write_back(self, arg, new):
        """The function wrote into argument `arg`, as numpy would in place: a numpy array
        gets the values copied in (unless the program computed them in its buffer), an
        spmd.Array takes them through write_array."""
        if isinstance(arg, np.ndarray):
            if not arg.flags.writeable:
                raise ValueError("spmd.jit: the function writes into a read-only numpy array argument "
                                 "(numpy raises 'assignment destination is read-only')")
            if new is not arg:
                arg[...] = new.numpy() if hasattr(new, "numpy") else new
            return
        if isinstance(arg, Array) and isinstance(new, np.ndarray) and self.write_array is not None:
            # an Array on a one-device mesh runs as numpy (no mesh): the new value comes
            # back as numpy, placed again as the argument is
            new = device_put(new, arg.sharding)
        if isinstance(arg, Array) and isinstance(new, Array) and self.write_array is not None:
            self.write_array(arg, new)
            return
        raise SpmdError(f"spmd.jit: the function writes into an argument of type {type(arg).__name__}, "
                        f"which spmd cannot update in place; return the new value instead")


def needed_value(e):
    """The ConcreteValueError that caused exception e (numpy may wrap it), or None."""
    seen = set()
    while e is not None and id(e) not in seen:
        if isinstance(e, ConcreteValueError):
            return e
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return None


def _is_scalar(x):
    return isinstance(x, (bool, int, float, complex, np.generic))


def _place(x, sharding, mesh):
    """A value as an spmd.Array on mesh: placed by its sharding (or replicated), an
    spmd.Array resharded if it must be (else kept)."""
    if isinstance(x, ShapeDtype):
        raise SpmdError("spmd.jit: a ShapeDtype argument has no values to run the function eagerly with")
    if sharding is None:
        x = x if isinstance(x, Array) else np.asarray(x)
        if isinstance(x, Array):
            return x
        sharding = Sharding(mesh, (None,) * x.ndim)
    placed = device_put(x, sharding)
    layout = fz.leaf_layout(x)          # numpy's strides of x decide whether a reshape of it is a view
    if layout is not None and placed is not x:
        placed.numpy_layout = layout
    return placed
