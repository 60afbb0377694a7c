"""`Jitted`: spmd.jit's function object. A call runs jit's stages, each in its own file:

    arguments.py   the call's signature (the cache key) and flat argument leaves
    tracing.py     the function traced once per signature -> a Graph over global shapes
    lowering.py    every stage after tracing (compiler/pipeline.py) -> a Lowered
    compiling.py   the Lowered's executable and layout -> a declared Program (runtime/program.py)
    placing.py     before the first run: does it fit this machine's memory
    running.py     the Program run by the runtime on the call's leaves (runtime/execute.py)

and graph_breaks.py where tracing needs a value of the data. spmd.jit (api.py) and eager
mode's one-op programs (eager/) are both Jitted functions.

A Jitted function made with `fallback=True` (spmd.jit's default) whose tracing needs the
value of a traced array (ConcreteValueError: float(), `if` on data, math.sqrt, .item(),
np.array(traced)) is compiled in parts (graph breaks), or, where breaks would not pay,
runs eagerly instead, for that input signature from then on: the function is called on
its arguments placed as jit places them (spmd.Arrays split by in_shardings), so numpy on
them runs op by op on the sharded arrays (eager mode), and a FallbackWarning names the
function and the line that needed the value (once per line). Without a mesh it is the
plain numpy function.
"""
from __future__ import annotations

import copy
import functools
import os

import numpy as np

from ..errors import ConcreteValueError, FallbackWarning, MemoryLimitError, SpmdError, warn_at
from ..frontend import loop_conversion as lc
from ..frontend.core import check_int_fits
from ..frontend.trace import ShapeDtype, current_trace
from ..ir.mesh import Sharding, is_auto
from ..ir.ops.control import run_graph
from ..runtime.array import Array, device_put
from ..tree import tree_flatten, tree_unflatten
from . import graph_breaks as gb
from .auto_plan import choose_auto
from .arguments import donated_leaves, dynamic, is_scalar, needed_value, signature
from .lowering import Lowered, lower_graph
from .placing import place
from .tracing import trace_function

# plans of spmd.AUTO's search lowered after the first whose compiled program needed more
# than memory_limit, before MemoryLimitError (each is traced, searched and lowered again)
AUTO_MEMORY_TRIES = 3


class Jitted:
    """A function traced once per input signature, lowered, compiled and cached; calling
    it runs the program. `write_array(arg, new)` is how an spmd.Array argument the function
    wrote takes its new value (numpy's in-place semantics: the caller sees the write)."""

    def __init__(self, fn, in_shardings=None, out_shardings=None, mesh=None, backend=None,
                 static_argnums=(), donate_argnums=(), write_array=None, memory_limit=None, fallback=False,
                 network=None):
        self.fn = fn
        self.network = network
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
        # what sharding/jit_shardings.py is told of this function: plain values (sharding/ and
        # the compiler are loaded when a function is first traced, not with spmd)
        from ..sharding.jit_shardings import Given
        self.given = Given(fn, in_shardings, out_shardings, mesh, self.static_argnums)
        self._cache = {}
        self._paths = {}              # signature -> its graph breaks' last path (graph_breaks.Path)
        # loops on data traced as while loops (frontend/loop_conversion.py), by loop_key;
        # _no_loops once a rewrite failed: fn is traced as written from then on
        self._loops, self._no_loops = frozenset(), False
        functools.update_wrapper(self, fn)

    @property
    def fname(self) -> str:
        return getattr(self.fn, "__name__", "fn")

    def lower(self, *args) -> Lowered:
        key, leaves = signature(args, self.static_argnums)
        low = self._lower(args, key, leaves)
        # (a signature covers numpy arrays and spmd.Arrays alike: the cached program may
        # have been lowered for the other kind, and cost() prices this call's numpy ones)
        mine = numpy_arg_bytes(leaves)
        if isinstance(low, Lowered) and low.numpy_args != mine:
            low = copy.copy(low)
            low.numpy_args = mine
        return low

    def _lower(self, args, key, leaves) -> Lowered:
        entry = self._cache.get(key)
        if isinstance(entry, Lowered):
            return entry
        from ..compiler.gc_pause import paused
        with paused():
            return self._trace_and_lower(args, key, leaves, entry)

    def _trace_and_lower(self, args, key, leaves, entry) -> Lowered:
        low, known = gb.follow(entry, leaves)       # the graph breaks' programs, on this call's data
        if low is not None:
            return low
        # spmd.AUTO under memory_limit: the plan the model finds fastest may need more,
        # compiled, than the search's share of the limit for the arguments saw (its
        # activations, its native schedule's buffers): then the other plans the search
        # made are lowered, the least planned memory first, before saying none fits
        tried, first = [], None
        while True:
            try:
                return self._lower_plan(args, key, leaves, known, tried)
            except MemoryLimitError as e:
                if not tried:
                    raise
                first = first or e
                if len(tried) > AUTO_MEMORY_TRIES:
                    break
            except _NoPlanLeft:
                break
        raise MemoryLimitError(f"{first}\n(spmd.AUTO lowered {len(tried)} of the plans its search made: the "
                               f"fastest by its model, whose peak this is, then the least planned memory "
                               f"first; none fits)") from None

    def _lower_plan(self, args, key, leaves, known, tried) -> Lowered:
        fname = self.fname
        graph, in_tree, out_tree, oracle = self._trace(args, key, leaves, known)
        from ..sharding.jit_shardings import resolve_shardings
        mesh, in_sh, out_sh = resolve_shardings(self.given, args, leaves, graph, out_tree)
        graph.mesh = mesh
        # the breaks' values, as this program computes them: a call runs the path whole and
        # checks them (graph_breaks.Path)
        checks = oracle.values if oracle is not None else []
        for v in checks:
            graph.outputs.append(v)
            out_sh.append(Sharding(mesh, (None,) * len(v.shape)) if mesh is not None else None)
            out_sh.names.append("a graph break's value")
        # errors Python would raise (core.error_at_run): flags checked after each run. Both
        # are outputs before spmd.AUTO's search, which then plans the program that runs
        for v, _, _ in graph.errors:
            graph.outputs.append(v)
            out_sh.append(Sharding(mesh, ()) if mesh is not None else None)
            out_sh.names.append("an error's condition")
        auto, done, hints = None, None, None
        if any(is_auto(s) for s in list(in_sh) + list(out_sh)):
            auto, done = choose_auto(graph, mesh, in_sh, out_sh, in_tree, out_tree, self.network, self.memory_limit,
                                     tried)
            if auto is None:
                raise _NoPlanLeft
            if self.memory_limit is not None:
                tried.append(auto.keys.get(auto.chosen))
            hints = auto.hints
        n_out = len(graph.outputs)
        # written arguments are extra outputs, laid out as they came in
        for k, v in graph.updates:
            graph.outputs.append(v)
            out_sh.append(in_sh[k])
            out_sh.names.append(f"the new value of argument {in_sh.names[k]}")
        if len(graph.outputs) != n_out:
            # (results added since the search: its global program and interior choices
            # are of a different program; propagation lays this one out from the arguments)
            done, hints = None, None
        low = lower_graph(graph, mesh, in_sh, out_sh, in_tree, out_tree, self.backend, done, hints)
        low.auto = auto
        low.network = self.network
        low.updates = [k for k, _ in graph.updates]
        low.numpy_args = numpy_arg_bytes(leaves)
        low.checks = len(checks)
        low.errors = [(exc, msg) for _, exc, msg in graph.errors]
        low.returned = dict(graph.returned)
        low.scalars = dict(graph.scalar_outputs)
        low.int_arguments = dict(graph.int_arguments)
        low.np_random_state = graph.np_random_state
        low.donated = frozenset(donated_leaves(args, self.static_argnums, self.donate_argnums) - set(low.updates))
        # (spmd.checkpoint's recomputation reads its values through barriers: ops whose
        # result is an operand itself, compiler/passes/barriers.py)
        if any(op.opdef.identity_of is not None for op in graph.ops):
            self._plan_checkpoints(low, graph, mesh, in_sh, out_sh)
        if self.memory_limit is not None:
            self._fit(low, in_sh.leaves)
        taken = oracle.taken if oracle is not None else []
        low.breaks = [(brk.loc, brk.what, v) for brk, v in taken]
        gb.insert(self._cache, key, taken, low, fname)
        self._warn_breaks(fname, taken)
        return low

    def _trace(self, args, key, leaves, known):
        """(graph, in_tree, out_tree, oracle): self.fn traced, with the loops whose test
        needed a value of the data rewritten into traced while loops where they can be
        (loop_conversion.py; then no graph breaks there), else with graph breaks."""
        while True:
            fn = self.fn
            if self._loops:
                try:
                    fn = lc.convert(self.fn, self._loops)
                except lc.Refused:
                    self._drop_loops()
                    continue
            oracle = None
            if self.fallback and not any(isinstance(x, ShapeDtype) for x in leaves):
                oracle = gb.Oracle(self.fname, known, lambda g, v: self._lower_cone(args, leaves, g, v), leaves)
                if self._convertible:
                    oracle.before_new = functools.partial(self._loop_on_data, {fn.__code__: self.fn.__code__})
            try:
                return (*trace_function(fn, args, self.static_argnums, self.mesh, oracle), oracle)
            except _ConvertLoop as e:
                self._loops = self._loops | {e.key}
            except Exception as e:
                # (an if on data inside a converted if's branch: spmd.cond traced the
                # branch, where a value cannot be asked for, so the error names it)
                inner = lc.loop_needing_value({fn.__code__: self.fn.__code__}, e.__traceback__) \
                    if isinstance(e, ConcreteValueError) and fn is not self.fn else None
                if inner is not None and inner not in self._loops:
                    self._loops = self._loops | {inner}
                elif fn is not self.fn:
                    if isinstance(e, gb.BreakLimit):
                        # its loops traced: what stops it is further on, and the user's
                        # fix is there (as written, tracing would stop at a converted loop)
                        raise
                    self._drop_loops()      # the rewritten function did not trace: as written
                elif oracle is None and isinstance(e, ConcreteValueError) and self._convertible:
                    # (fallback=False: no graph breaks, but a loop on data may still be converted)
                    got = lc.loop_needing_value({fn.__code__: fn.__code__}, e.__traceback__)
                    if got is None or got in self._loops:
                        raise
                    self._loops = self._loops | {got}
                else:
                    raise
            self._cache.clear()             # (a tree of breaks traced from another version of fn)
            self._paths.clear()
            known = []

    @property
    def _convertible(self) -> bool:
        return lc.convertible(self.fn) and not self._no_loops

    def _loop_on_data(self, codes):
        got = lc.loop_needing_value(codes)
        if got is not None and got not in self._loops:
            raise _ConvertLoop(got)

    def _drop_loops(self):
        self._loops, self._no_loops = frozenset(), True
        self._cache.clear()
        self._paths.clear()

    def _lower_cone(self, args, leaves, graph, value) -> Lowered:
        """The program computing `value` of the trace `graph` (a graph break's), sharded as
        this call's arguments are, its result replicated."""
        from ..sharding.jit_shardings import resolve_shardings
        g = gb.cone(graph, value)
        mesh, in_sh, out_sh = resolve_shardings(self.given, args, leaves, g, None)
        in_sh[:] = [None if is_auto(s) else s for s in in_sh]     # (a break's part: propagation lays it out)
        g.mesh = mesh
        if mesh is not None:
            out_sh[0] = Sharding(mesh, (None,) * len(g.outputs[0].shape))
        in_tree = tree_flatten(dynamic(args, self.static_argnums))[1]
        return lower_graph(g, mesh, in_sh, out_sh, in_tree, tree_flatten(0)[1], self.backend)

    def _warn_breaks(self, fname, taken):
        for brk, _ in taken:
            if brk.loc not in self._warned:
                self._warned.add(brk.loc)
                warn_at(f"spmd.jit: tracing {fname} needed the value of a traced array at {brk.loc} ({brk.what}), "
                        f"so {fname} is compiled in parts there (a graph break): the part before runs and gives "
                        f"the value, the rest is traced with it, once per value (at most {gb.MAX_VALUES}); "
                        f"spmd.jit(..., fallback=False) makes this an error.", FallbackWarning, brk.loc)

    def _plan_checkpoints(self, low, graph, mesh, in_sh, out_sh):
        """spmd.checkpoint never holds more than the program without it: of the program
        as written, without its recomputation, and with neighbouring checkpoints merged
        into segments (backends/memory_budget.plan_checkpoints), the lowest planned peak
        runs; `low.checkpoints` says which ("as written", "held", "merged")."""
        import time
        from ..backends.memory_budget import plan_checkpoints
        from ..compiler import pipeline
        from ..compiler.passes import drop_barriers
        from ..compiler.passes.bodies import in_bodies
        t0 = time.perf_counter()
        plain = in_bodies(drop_barriers)(graph)
        plain.mesh = graph.mesh
        without, _ = pipeline.lower(plain, mesh, in_sh, out_sh)
        g, _, which = plan_checkpoints(low.graph, without["optimized"], self.backend, sorted(low.donated))
        low.stages["checkpoints"] = low.stages["optimized"] = g
        low.checkpoints = which
        low.timings["checkpoints"] = time.perf_counter() - t0

    def _fit(self, low, names):
        """Recompute what the program holds until its plan fits memory_limit per device
        (backends/memory_budget.py); the result is the "remat" stage, and what runs. The
        compiled program's peak (Lowered.memory_profile: its native schedule makes a
        segment's buffers when the segment starts, and holds scratch and mailboxes) is
        the one that must fit: where it is over, the plan is fitted again with room for
        what the compiled program held beyond it, and MemoryLimitError says when that
        does not converge."""
        import time
        from ..backends.memory_budget import FITS, fit, too_big
        t0 = time.perf_counter()
        what = f"spmd.jit({self.fname}, memory_limit={self.memory_limit})"
        donated = sorted(low.donated)
        start, beyond = low.graph, 0
        for _ in range(FITS):
            g, prof = fit(start, self.backend, donated, self.memory_limit, names, what, beyond)
            low.replace_stage("remat", g)
            peak = low.memory_profile().peak_bytes
            if peak <= self.memory_limit:
                break
            beyond = max(beyond + 1, peak - prof.peak_bytes)
        else:
            raise MemoryLimitError(too_big(g, low.memory_profile(), self.memory_limit, names, what))
        low.timings["remat"] = time.perf_counter() - t0

    def __call__(self, *args):
        if current_trace() is not None:
            # a jitted function called while tracing another: inline it into that trace
            return self.fn(*args)
        key, leaves = signature(args, self.static_argnums)
        if key in self._eager:
            return self._run_eagerly(args, leaves)
        low, outs = self._run_guess(key, leaves)
        if low is None:
            low, outs = self._lower_and_run(args, key, leaves)
            if low is None:
                return outs
        if low.np_random_state is not None:
            np.random.set_state(low.np_random_state)
        if low.updates:
            outs, new = outs[:len(outs) - len(low.updates)], outs[len(outs) - len(low.updates):]
            for k, v in zip(low.updates, new):
                self._write_back(leaves[k], v)
            for i, k in low.returned.items():
                outs[i] = leaves[k]
        if low.scalars:             # `return float(x)`: numpy's Python number (frontend/returned_scalars.py)
            outs = list(outs)
            for i, conv in low.scalars.items():
                outs[i] = conv(np.asarray(outs[i]))
        return tree_unflatten(low.out_tree, outs)

    def _run_guess(self, key, leaves):
        """(the program, its outputs) where the signature's graph breaks have a guessed path
        (graph_breaks.Path) and its run gives the values that path took; else (None, None)."""
        path = self._paths.get(key)
        if path is None or path.guess is None:
            return None, None
        low = path.guess
        _check_int_arguments(low, leaves)
        outs = low.run_flat(*leaves)
        n = len(outs) - len(low.updates) - len(low.errors)
        if not path.holds(low, outs[n - low.checks:n]):
            return None, None
        return low, _without_checks(low, outs)

    def _lower_and_run(self, args, key, leaves):
        """(the program, its outputs) for the call, its graph breaks' programs run on the
        way; (None, the results) where the signature runs eagerly from now on."""
        try:
            low = self._lower(args, key, leaves)
        except Exception as e:
            need = needed_value(e)
            if need is None or not self.fallback:
                raise
            self._eager.add(key)
            name = self.fname
            warn_at(f"spmd.jit: tracing {name} needed the value of a traced array at {need.loc}, so {name} "
                    f"runs eagerly on the sharded arrays instead (numpy on spmd.Arrays, op by op: slower "
                    f"than one compiled program); spmd.jit(..., fallback=False) makes this an error. {need}",
                    FallbackWarning, need.loc)
            return None, self._run_eagerly(args, leaves)
        if isinstance(self._cache.get(key), gb.Node):
            self._paths.setdefault(key, gb.Path()).took(low)
        _check_int_arguments(low, leaves)
        return low, _without_checks(low, low.run_flat(*leaves))

    def _run_eagerly(self, args, leaves):
        """fn called outside tracing on its arguments placed as jit places them: numpy on
        the spmd.Arrays runs op by op (eager mode). An argument the function wrote that
        was placed as a copy (a numpy array, an Array resharded) takes the new value, as
        under jit; the results are spmd.Arrays, as jit's are (by out_shardings, else as
        the eager run left them, values it read back into numpy replicated)."""
        from ..sharding.jit_shardings import argument_shardings, result_shardings
        mesh, shardings = argument_shardings(self.given, args, leaves)
        if mesh is None:
            return self.fn(*args)
        placed = [x if is_scalar(x) else place(x, s, mesh) for x, s in zip(leaves, shardings)]
        handles = [getattr(p, "_handles", None) for p in placed]
        it = iter(tree_unflatten(tree_flatten(dynamic(args, self.static_argnums))[1], placed))
        out = self.fn(*[a if i in self.static_argnums else next(it) for i, a in enumerate(args)])
        for x, p, h in zip(leaves, placed, handles):
            if p is not x and isinstance(p, Array) and p._handles is not h:
                self._write_back(x, p)
        outs, tree = tree_flatten(out)
        return tree_unflatten(tree, [place(x, s, mesh) if is_scalar(x) or hasattr(x, "__array__") else x
                                     for x, s in zip(outs, result_shardings(self.given, tree, len(outs), mesh))])

    def _write_back(self, arg, new):
        """The function wrote into argument `arg`, as numpy would in place: a numpy array
        gets the values copied in (unless the program computed them in its buffer), an
        spmd.Array takes them through write_array."""
        if isinstance(arg, np.ndarray):
            if not arg.flags.writeable:
                raise ValueError("spmd.jit: the function writes into a read-only numpy array argument "
                                 "(numpy raises 'assignment destination is read-only')")
            if new is not arg:
                if isinstance(new, Array):
                    new.numpy(out=arg)
                else:
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


def _check_int_arguments(low, leaves):
    """numpy's OverflowError for a Python int argument, or a weak int the program computes
    from such arguments (frontend/int_arguments.py), that meets an integer array whose
    dtype cannot hold it (traced, it would wrap)."""
    for key, uses in low.int_arguments.items():
        if isinstance(key, int):
            value, what = leaves[key], f"argument leaf {key}"
        else:
            sub, positions = key
            if not all(isinstance(leaves[k], int) for k in positions):
                continue
            value = int(run_graph(sub, [np.int64(leaves[k]) for k in positions])[0])
            what = f"a value computed from argument leaves {list(positions)}"
        for dt, loc in uses:
            check_int_fits(value, dt, f"{loc}: {what} of {low.graph.name}, combined with a {dt} array")


class _NoPlanLeft(Exception):
    """Every plan spmd.AUTO's search made was lowered and needed more than memory_limit."""


class _ConvertLoop(BaseException):
    """A graph break at the test of a loop jit can trace as a while loop: trace again with
    it converted. (A BaseException: the user's `except Exception` does not stop it.)"""

    def __init__(self, key):
        super().__init__(key)
        self.key = key


def _without_checks(low, outs):
    """low's outputs without the breaks' values and the errors' flags it gives (after the
    results, before the written arguments); the first error whose flag is set raised."""
    errors = low.errors
    if not low.checks and not errors:
        return outs
    n = len(outs) - len(low.updates)
    for flag, (exc, msg) in zip(outs[n - len(errors):n], errors):
        if bool(np.asarray(flag)):
            raise exc(msg)
    return list(outs[:n - len(errors) - low.checks]) + list(outs[n:])


def numpy_arg_bytes(leaves) -> dict:
    """{leaf: bytes} of the arguments given as numpy arrays (Lowered.numpy_args)."""
    return {k: x.nbytes for k, x in enumerate(leaves) if isinstance(x, np.ndarray)}
