"""spmd.jit: trace once per input signature, run the stages of DESIGN.md, cache the result.

    traced -> (autodiff happens during tracing) -> optimized -> executable

Later stages (propagated, partitioned) slot in between as the sharding work lands.
"""
from __future__ import annotations

import functools
import os
from typing import NamedTuple

import numpy as np

from .compiler.passes import dce
from .compiler.trace import Trace, Tracer, current_trace, tracing
from .compiler import numpy_api as npx
from .errors import SpmdError
from .ir import Graph, dtypes
from .tree import tree_flatten, tree_unflatten


class ShapeDtype(NamedTuple):
    """A placeholder argument for `lower`: a shape and dtype, nothing allocated."""
    shape: tuple
    dtype: object = "float32"


STAGES = ("traced", "propagated", "partitioned", "optimized")


def _leaf_aval(x):
    """(shape, dtype, weak) of an argument leaf."""
    if isinstance(x, ShapeDtype):
        return tuple(x.shape), dtypes.canon(x.dtype), False
    if isinstance(x, np.generic):       # np.float64 is a float subclass, but not weak (NEP 50)
        return (), dtypes.canon(x.dtype), False
    if isinstance(x, bool):
        return (), "bool", True
    if isinstance(x, int):
        return (), "int64", True
    if isinstance(x, float):
        return (), "float64", True
    if hasattr(x, "shape") and hasattr(x, "dtype"):
        return tuple(x.shape), dtypes.canon(x.dtype), False
    raise TypeError(f"spmd.jit: argument leaf {x!r} of type {type(x).__name__} is not an array; "
                    f"pass it through static_argnums if it is configuration")


def trace_function(fn, args, static_argnums=(), mesh=None):
    """Trace fn on abstract versions of args. Returns (graph, in_tree, out_tree)."""
    dyn = [a for i, a in enumerate(args) if i not in static_argnums]
    leaves, in_tree = tree_flatten(dyn)
    g = Graph(getattr(fn, "__name__", "fn").replace("<", "").replace(">", ""))
    t = Trace(g, mesh)
    tracers = []
    for leaf in leaves:
        shape, dt, weak = _leaf_aval(leaf)
        tracers.append(Tracer(g.add_input(shape, dt), t, weak))
    it = iter(tree_unflatten(in_tree, tracers))
    call_args = [a if i in static_argnums else next(it) for i, a in enumerate(args)]
    with tracing(t):
        out = fn(*call_args)
        out_leaves, out_tree = tree_flatten(out)
        outs = []
        for leaf in out_leaves:
            try:
                outs.append(npx.asarray(leaf, t=t).value)
            except TypeError:
                raise TypeError(f"spmd.jit: {fn.__name__} returned a {type(leaf).__name__}, "
                                f"which is not an array") from None
    g.outputs = outs
    return g, in_tree, out_tree


class Lowered:
    """A traced and compiled program for one input signature: every stage's Graph,
    the mesh, the per-leaf input/output shardings, and (lazily) the executable."""

    def __init__(self, stages: dict, in_tree, out_tree, backend, mesh=None):
        self.stages = stages
        self.in_tree, self.out_tree = in_tree, out_tree
        self.backend = backend
        self.mesh = mesh
        self._exe = None

    def as_text(self, stage="optimized"):
        from .ir.text import print_graph
        if stage not in self.stages:
            raise ValueError(f"unknown stage {stage!r}; stages: {', '.join(self.stages)}")
        return print_graph(self.stages[stage])

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
        """Per-device collectives (op, axes, group_size, in/out shapes, dtype, bytes),
        comm_bytes, flops and out_shardings of the partitioned program."""
        from .sharding.report import report
        return report(self)

    def explain(self, file=None) -> str:
        """Print the collectives and why, and where every value's sharding came from."""
        from .sharding.explain import explain_lowered
        return explain_lowered(self, file)

    def compile(self):
        if self._exe is None:
            from .compiler.backends import compile_graph
            self._exe = compile_graph(self.graph, self.backend)
        return self._exe

    def __call__(self, *flat_args):
        from .runtime.execute import execute
        return execute(self, list(flat_args))


def lower_graph(graph, mesh, in_shardings, out_shardings):
    """The stages after tracing: propagate and partition (with a mesh), then optimise."""
    from .compiler.passes import optimize
    stages = {"traced": graph}
    src = dce(graph)
    if mesh is not None:
        from .sharding.propagate import propagate
        from .sharding.partition import partition
        stages["propagated"] = propagate(src, mesh, in_shardings, out_shardings)
        stages["partitioned"] = src = partition(stages["propagated"])
    stages["optimized"] = optimize(src)
    return stages


class Jitted:
    def __init__(self, fn, in_shardings=None, out_shardings=None, mesh=None, backend=None,
                 static_argnums=()):
        self.fn = fn
        self.in_shardings, self.out_shardings, self.mesh = in_shardings, out_shardings, mesh
        # the LLVM backend (fused native kernels) by default; "numpy" is the reference
        self.backend = backend or os.environ.get("SPMD_COMPILER", "llvm")
        self.static_argnums = (static_argnums,) if isinstance(static_argnums, int) else tuple(static_argnums)
        self._cache = {}
        functools.update_wrapper(self, fn)

    def _key(self, args):
        dyn = [a for i, a in enumerate(args) if i not in self.static_argnums]
        leaves, tree = tree_flatten(dyn)
        static = tuple(args[i] for i in self.static_argnums if i < len(args))
        return (tree, tuple(_leaf_aval(x) for x in leaves), static), leaves

    def lower(self, *args) -> Lowered:
        key, leaves = self._key(args)
        low = self._cache.get(key)
        if low is None:
            graph, in_tree, out_tree = trace_function(self.fn, args, self.static_argnums, self.mesh)
            from .sharding.annotate import resolve_shardings
            mesh, in_sh, out_sh = resolve_shardings(self, args, leaves, graph, out_tree)
            graph.mesh = mesh
            stages = lower_graph(graph, mesh, in_sh, out_sh)
            _dump(self.fn, stages)
            low = Lowered(stages, in_tree, out_tree, self.backend, mesh)
            self._cache[key] = low
        return low

    def __call__(self, *args):
        if current_trace() is not None:
            # a jitted function called while tracing another: inline it into that trace
            return self.fn(*args)
        key, leaves = self._key(args)
        low = self.lower(*args)
        return tree_unflatten(low.out_tree, low(*leaves))


def jit(fn=None, *, in_shardings=None, out_shardings=None, mesh=None, backend=None, static_argnums=()):
    if fn is None:
        return lambda f: jit(f, in_shardings=in_shardings, out_shardings=out_shardings, mesh=mesh,
                             backend=backend, static_argnums=static_argnums)
    return Jitted(fn, in_shardings, out_shardings, mesh, backend, static_argnums)


def _dump(fn, stages):
    """SPMD_DUMP=dir writes each stage's program as text."""
    d = os.environ.get("SPMD_DUMP")
    if not d:
        return
    from .ir.text import print_graph
    os.makedirs(d, exist_ok=True)
    name = getattr(fn, "__name__", "fn")
    for i, (stage, g) in enumerate(stages.items()):
        with open(os.path.join(d, f"{name}.{i}.{stage}.txt"), "w") as f:
            f.write(print_graph(g))


__all__ = ["jit", "Jitted", "Lowered", "ShapeDtype", "SpmdError"]
