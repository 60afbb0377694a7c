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
from .compiler.trace import Trace, Tracer, tracing
from .compiler import numpy_api as npx
from .errors import SpmdError
from .ir import Graph, dtypes
from .tree import tree_flatten, tree_unflatten


class ShapeDtype(NamedTuple):
    """A placeholder argument for `lower`: a shape and dtype, nothing allocated."""
    shape: tuple
    dtype: object = "float32"


STAGES = ("traced", "optimized")


def _leaf_aval(x):
    """(shape, dtype, weak) of an argument leaf."""
    if isinstance(x, ShapeDtype):
        return tuple(x.shape), dtypes.canon(x.dtype), False
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
    """A traced and compiled program for one input signature."""

    def __init__(self, stages: dict, in_tree, out_tree, backend):
        self.stages = stages
        self.in_tree, self.out_tree = in_tree, out_tree
        self.backend = backend
        self._exe = None

    def as_text(self, stage="optimized"):
        from .ir.text import print_graph
        if stage not in self.stages:
            raise ValueError(f"unknown stage {stage!r}; stages: {', '.join(self.stages)}")
        return print_graph(self.stages[stage])

    @property
    def graph(self):
        return self.stages[STAGES[-1]]

    def compile(self):
        if self._exe is None:
            from .compiler.backends.numpy import compile_numpy
            self._exe = compile_numpy(self.graph)
        return self._exe

    def __call__(self, *flat_args):
        return self.compile()(list(flat_args))


class Jitted:
    def __init__(self, fn, in_shardings=None, out_shardings=None, mesh=None, backend=None,
                 static_argnums=()):
        self.fn = fn
        self.in_shardings, self.out_shardings, self.mesh = in_shardings, out_shardings, mesh
        self.backend = backend or os.environ.get("SPMD_BACKEND_COMPILER", "numpy")
        self.static_argnums = (static_argnums,) if isinstance(static_argnums, int) else tuple(static_argnums)
        self._cache = {}
        functools.update_wrapper(self, fn)

    def _key(self, args):
        dyn = [a for i, a in enumerate(args) if i not in self.static_argnums]
        leaves, tree = tree_flatten(dyn)
        static = tuple(args[i] for i in self.static_argnums if i < len(args))
        return (tree, tuple(_leaf_aval(x) for x in leaves), static), leaves

    def lower(self, *args) -> Lowered:
        key, _ = self._key(args)
        low = self._cache.get(key)
        if low is None:
            graph, in_tree, out_tree = trace_function(self.fn, args, self.static_argnums, self.mesh)
            stages = {"traced": graph, "optimized": dce(graph)}
            _dump(self.fn, stages)
            low = Lowered(stages, in_tree, out_tree, self.backend)
            self._cache[key] = low
        return low

    def __call__(self, *args):
        key, leaves = self._key(args)
        low = self.lower(*args)
        arrays = [np.asarray(x, dtype=dt) for x, (_, dt, _) in zip(leaves, key[1])]
        outs = low(*arrays)
        return tree_unflatten(low.out_tree, outs)


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
