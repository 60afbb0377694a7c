"""The user API, above every layer: `jit` (trace once per input signature, run the
stages of docs/design.md, cache the result), `shard`, `explain`, and `grad` /
`value_and_grad` outside of tracing.

    traced -> propagated -> partitioned -> optimized -> executable

(autodiff happens during tracing; without a mesh there is nothing to propagate or
partition.) The stages are one pipeline (compiler/pipeline.py).
"""
from __future__ import annotations

import functools
import os
import numpy as np

from .frontend.trace import ShapeDtype, Trace, Tracer, current_trace, leaf_aval, tracing
from .frontend import numpy_api as npx
from .frontend import autodiff
from .errors import ShardingError, SpmdError, TraceError
from .ir.mesh import Sharding
from .ir import Graph, dtypes
from .tree import tree_flatten, tree_unflatten


STAGES = ("traced", "propagated", "partitioned", "optimized")


def trace_function(fn, args, static_argnums=(), mesh=None):
    """Trace fn on abstract versions of args. Returns (graph, in_tree, out_tree)."""
    dyn = [a for i, a in enumerate(args) if i not in static_argnums]
    leaves, in_tree = tree_flatten(dyn)
    g = Graph(getattr(fn, "__name__", "fn").replace("<", "").replace(">", ""))
    t = Trace(g, mesh)
    tracers = []
    from .frontend.functionalize import Buffer
    for k, leaf in enumerate(leaves):
        shape, dt, weak = leaf_aval(leaf)
        tr = Tracer(g.add_input(shape, dt), t, weak)
        if _mutable(leaf):
            # numpy writes into an array argument in place: the caller sees it (see Jitted)
            tr._buf = Buffer(tr.value, arg=k)
        tracers.append(tr)
    it = iter(tree_unflatten(in_tree, tracers))
    call_args = [a if i in static_argnums else next(it) for i, a in enumerate(args)]
    with tracing(t):
        try:
            out = fn(*call_args)
        except ValueError as e:
            # numpy storing a traced scalar into a plain ndarray turns our error into
            # "setting an array element with a sequence": surface ours
            if isinstance(e.__cause__, TraceError):
                raise e.__cause__ from None
            raise
        out_leaves, out_tree = tree_flatten(out)
        outs = []
        for leaf in out_leaves:
            try:
                outs.append(npx.asarray(leaf, t=t).value)
            except TypeError:
                why = getattr(type(leaf), "spmd_not_an_array", None)
                if why is not None:          # e.g. x[mask]: its error says why and what instead
                    why()
                raise TypeError(f"spmd.jit: {fn.__name__} returned a {type(leaf).__name__}, "
                                f"which is not an array") from None
    g.outputs = outs
    # arguments the function wrote (x -= x.mean(0), x[i] = v): their new values, by leaf
    g.updates = [(tr._buf.arg, tr._buf.value) for tr in tracers
                 if tr._buf is not None and tr._buf.value is not g.inputs[tr._buf.arg]]
    _check_aliasing(fn, leaves, [k for k, _ in g.updates])
    return g, in_tree, out_tree


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
    """An argument numpy could write into: an array (0-d too), not a Python or numpy scalar."""
    return isinstance(leaf, (np.ndarray, ShapeDtype)) or \
        (hasattr(leaf, "sharding") and hasattr(leaf, "shape") and not isinstance(leaf, np.generic))


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
        self.donated = frozenset()    # argument leaves whose buffers the program may reuse
        self.timings = {}             # seconds per stage, from the pipeline

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
        """Print the collectives and why, and the annotations; with verbose=True also
        where every value's sharding came from."""
        from .sharding.explain import explain_lowered
        return explain_lowered(self, file, verbose)

    def memory(self) -> dict:
        """Per-device memory of one run of the compiled program, in bytes: `temp_bytes`
        (the arena of temporaries, XLA's temp allocation), `scratch_bytes` (copies of dot
        operands BLAS cannot read in place), `peak_live_bytes` (the largest set of
        temporaries live at once), `argument_bytes`, `output_bytes`, `in_place` (values
        written into a dying input's buffer) and `donated` (argument positions whose
        buffers the program reuses). Ops run through numpy (collectives, indexing) may
        allocate more per call. What the backend does not plan (the numpy backend plans
        nothing) is None."""
        g = self.graph
        size = lambda vs: int(sum(v.size * np.dtype(v.dtype).itemsize for v in vs))  # noqa: E731
        rep = {"temp_bytes": None, "peak_live_bytes": None, "argument_bytes": size(g.inputs),
               "output_bytes": size(g.outputs), "in_place": None, "donated": []}
        exe = self.compile()
        if hasattr(exe, "memory_report"):
            rep.update(exe.memory_report(_FakeComm(self.mesh)))
        return rep

    def compile(self):
        if self._exe is None:
            from .backends import compile_graph
            self._exe = compile_graph(self.graph, self.backend, donated=sorted(self.donated))
        return self._exe

    def __call__(self, *flat_args):
        from .runtime.execute import execute
        try:
            return execute(self, list(flat_args))
        finally:
            if self.donated:        # (also when the run failed: its buffers may be half written)
                self.donate(flat_args)

    def donate(self, flat_args):
        """After a run: the donated spmd.Array arguments are invalid (their buffers may now
        hold the outputs), as jax deletes donated arrays."""
        from .runtime.array import Array, donated_handles
        for k in self.donated:
            x = flat_args[k]
            if isinstance(x, Array):
                x._handles = donated_handles(self.stages["traced"].name, k)


class _FakeComm:
    """The size of a mesh, where the executable asks a communicator for it."""

    def __init__(self, mesh):
        self.size = 1 if mesh is None else mesh.size


class Jitted:
    def __init__(self, fn, in_shardings=None, out_shardings=None, mesh=None, backend=None,
                 static_argnums=(), donate_argnums=()):
        self.fn = fn
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
        return (tree, tuple(leaf_aval(x) for x in leaves), static), leaves

    def lower(self, *args) -> Lowered:
        return self._lower(args, *self._key(args))

    def _lower(self, args, key, leaves) -> Lowered:
        low = self._cache.get(key)
        if low is None:
            graph, in_tree, out_tree = trace_function(self.fn, args, self.static_argnums, self.mesh)
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
            low.donated = self._donated_leaves(args) - set(low.updates)
            self._cache[key] = low
        return low

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
        low = self._lower(args, key, leaves)
        outs = low(*leaves)
        if low.updates:
            outs, new = outs[:len(outs) - len(low.updates)], outs[len(outs) - len(low.updates):]
            for k, v in zip(low.updates, new):
                _write_back(leaves[k], v)
        return tree_unflatten(low.out_tree, outs)


def _write_back(arg, new):
    """The function wrote into argument `arg`, as numpy would in place: an spmd.Array
    takes the new shards (no copy, no gather); a numpy array gets the values copied in."""
    if isinstance(arg, np.ndarray):
        if not arg.flags.writeable:
            raise ValueError("spmd.jit: the function writes into a read-only numpy array argument "
                             "(numpy raises 'assignment destination is read-only')")
        arg[...] = new.numpy() if hasattr(new, "numpy") else new
        return
    from .runtime.array import Array
    if isinstance(arg, Array) and isinstance(new, Array):
        # through eager's bookkeeping: the write reaches the base of an eager view, and views
        # read from arg before the write raise instead of showing stale values
        from .eager.dispatch import set_value
        set_value(arg, new)
        return
    raise SpmdError(f"spmd.jit: the function writes into an argument of type {type(arg).__name__}, "
                    f"which spmd cannot update in place; return the new value instead")


def jit(fn=None, *, in_shardings=None, out_shardings=None, mesh=None, backend=None, static_argnums=(),
        donate_argnums=()):
    """`donate_argnums` (jax's meaning): the spmd.Array arguments at these positions give
    their buffers to the program, which may compute outputs (or temporaries) in them; the
    donated Arrays are invalid afterwards (using one raises). A numpy argument is copied
    for the program instead (its owner keeps it)."""
    if fn is None:
        return lambda f: jit(f, in_shardings=in_shardings, out_shardings=out_shardings, mesh=mesh,
                             backend=backend, static_argnums=static_argnums, donate_argnums=donate_argnums)
    return Jitted(fn, in_shardings, out_shardings, mesh, backend, static_argnums, donate_argnums)


# -- shard, explain, grad: the rest of the user API ----------------------------------------
def shard(x, sharding):
    """Pin x's sharding. Inside spmd.jit: an annotation propagation must keep. Outside:
    place the array on the devices (spmd.device_put)."""
    if current_trace() is None:
        from .runtime import device_put
        if not isinstance(sharding, Sharding):
            raise ShardingError("spmd.shard outside of jit needs a Sharding (mesh.sharding(...))")
        return device_put(x, sharding)
    from .sharding.annotate import shard_traced
    return shard_traced(x, sharding)


def explain(f, *args, verbose=False, file=None, **jit_kwargs) -> str:
    """Print and return the explanation for `f` (a function or an spmd.jit object): one
    line per collective (op, bytes, user line, why, the annotation it comes from) and
    one per annotation; verbose=True adds where every value's sharding came from."""
    from .sharding.explain import explain_lowered
    j = f if isinstance(f, Jitted) else jit(f, **jit_kwargs)
    return explain_lowered(j.lower(*args), file, verbose)


def value_and_grad(f, argnums=0, has_aux=False):
    """(f(*args), df/d args[argnums]) for a function f returning a float scalar. Inside
    tracing it emits the backward pass into the current graph (frontend/autodiff.py);
    outside, it runs under its own jit (traced once per input signature)."""
    traced = autodiff.value_and_grad(f, argnums, has_aux)
    eager = {}

    @functools.wraps(f)
    def wrapped(*args, **kwargs):
        if current_trace() is not None:
            return traced(*args, **kwargs)
        if kwargs:      # jit takes positional leaves; keyword arguments are baked in
            return jit(lambda *a: traced(*a, **kwargs))(*args)
        if "jit" not in eager:
            eager["jit"] = jit(traced)
        return eager["jit"](*args)

    return wrapped


def grad(f, argnums=0, has_aux=False):
    """df/d args[argnums] (and aux, with has_aux=True); see value_and_grad."""
    vg = value_and_grad(f, argnums, has_aux)

    @functools.wraps(f)
    def wrapped(*args, **kwargs):
        out, g = vg(*args, **kwargs)
        return (g, out[1]) if has_aux else g

    return wrapped


__all__ = ["jit", "Jitted", "Lowered", "ShapeDtype", "SpmdError", "shard", "explain", "grad", "value_and_grad"]
