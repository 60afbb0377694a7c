"""The IR: an SSA graph of Values produced by Ops.

A Graph is built by appending ops (`graph.emit`), which checks shapes through the op
registry. After it is built a Graph is treated as immutable: every pass returns a new one.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import ShapeError, where
from . import dtypes
from .aval import Aval
from .ops.registry import get_op


class Value:
    __slots__ = ("shape", "dtype", "producer", "index", "sharding", "name")

    def __init__(self, shape, dtype, producer=None, index=0, sharding=None):
        self.shape = tuple(int(d) for d in shape)
        self.dtype = dtypes.canon(dtype)
        self.producer = producer      # the Op that made it; None for graph inputs
        self.index = index            # which of the producer's results
        self.sharding = sharding      # set by propagation
        self.name = None              # set by the printer / parser

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        return math.prod(self.shape)        # Python ints (np.prod costs ~40x more per call)

    @property
    def aval(self):
        return Aval(self.shape, self.dtype)

    def __repr__(self):
        return f"Value({dtypes.SHORT[self.dtype]}{list(self.shape)})"


class Op:
    __slots__ = ("name", "operands", "attrs", "results", "loc", "__weakref__")

    def __init__(self, name, operands, attrs, results, loc=None):
        self.name = name
        self.operands = tuple(operands)
        self.attrs = attrs
        self.results = tuple(results)
        self.loc = loc                # "file.py:12" of the user line that made it

    @property
    def result(self):
        (r,) = self.results
        return r

    @property
    def opdef(self):
        return get_op(self.name)

    def __repr__(self):
        return f"Op({self.name}, {list(self.operands)} -> {list(self.results)})"


def norm_attr(v):
    """Attributes are plain, hashable data: ints, floats, strs, bools, None, tuples,
    and numpy arrays for constants."""
    if isinstance(v, (list, tuple)):
        return tuple(norm_attr(x) for x in v)
    if isinstance(v, np.ndarray):
        return v
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        return float(v)
    if isinstance(v, np.dtype) or (isinstance(v, type) and issubclass(v, np.generic)):
        return dtypes.canon(v)
    return v


class Graph:
    def __init__(self, name="main"):
        self.name = name
        self.inputs: list[Value] = []
        self.ops: list[Op] = []
        self.outputs: list[Value] = []
        self.loc = None               # default location for ops emitted now
        self.mesh = None              # set when shardings are attached
        # what the stages record about the program (a copy made by clone() starts empty):
        # tracing: the arguments the function wrote, [(argument leaf, its new Value)], and
        # numpy's global random state as the function left it (it seeded it), or None
        self.updates: list = []
        self.np_random_state = None
        # tracing: results that are a written argument itself (`a += b; return a`), as
        # {result position: argument leaf}: numpy hands back the argument object, so does jit
        self.returned: dict = {}
        self.scalar_outputs: dict = {}  # result position -> float | int: a returned float(x) (jit/tracing.py)
        # input position -> [(dtype, user line)]: a Python int argument combined with an integer array
        # of a narrower dtype must fit it (numpy's OverflowError); jit checks each call's value
        self.int_arguments: dict = {}
        # [(bool Value, exception class, message)]: an error Python would raise at a line
        # (math.sqrt of a negative); jit runs the program, then raises the first that holds
        self.errors: list = []
        # propagation: {Value: why its sharding is fixed ("in_shardings for x", "spmd.shard
        # at f.py:3")} and {Value: [(dim, axes added, op, source Value, source dim)]}
        self.annotations: dict = {}
        self.why: dict = {}
        # partitioning: {per-device collective Op: the global Op or output Value needing it}
        self.needed_by: dict = {}

    def add_input(self, shape, dtype, sharding=None) -> Value:
        v = Value(shape, dtype, sharding=sharding)
        self.inputs.append(v)
        return v

    def emit(self, name, *operands, loc=None, **attrs):
        """Append op `name` and return its result Value (a tuple for multi-result ops)."""
        opdef = get_op(name)
        attrs = {k: norm_attr(v) for k, v in attrs.items()}
        loc = loc or self.loc
        for o in operands:
            if not isinstance(o, Value):
                raise TypeError(f"{name}: operand {o!r} is not an IR Value")
        try:
            out = opdef.infer(*[o.aval for o in operands], **attrs)
        except (ShapeError, TypeError, IndexError, KeyError) as e:
            # TypeError & co.: a missing or malformed attribute, reported like a shape error
            shapes = ", ".join(f"{dtypes.SHORT[o.dtype]}{list(o.shape)}" for o in operands)
            raise ShapeError(f"{name}{where(loc)}: {e} (operands: {shapes}; attrs: "
                             f"{_fmt_attrs(attrs)})") from None
        multi = isinstance(out, list)
        avals = out if multi else [out]
        op = Op(name, operands, attrs, [], loc)
        op.results = tuple(Value(a.shape, a.dtype, op, i) for i, a in enumerate(avals))
        self.ops.append(op)
        return op.results if multi else op.results[0]

    def values(self):
        yield from self.inputs
        for op in self.ops:
            yield from op.results

    def __repr__(self):
        return f"Graph({self.name}: {len(self.inputs)} inputs, {len(self.ops)} ops)"

    def __str__(self):
        from .text import print_graph
        return print_graph(self)


def any_op(graph: Graph, pred) -> bool:
    """Does pred(op) hold for an op of graph or of a sub-graph (a loop's body, a cond's
    branches) at any depth?"""
    for op in graph.ops:
        if pred(op):
            return True
        if any(any_op(op.attrs[k], pred) for k in op.opdef.subgraphs if op.attrs.get(k) is not None):
            return True
    return False


def _fmt_attrs(attrs):
    return ", ".join(f"{k}={'<array>' if isinstance(v, np.ndarray) else v}" for k, v in attrs.items())


def clone(graph: Graph, keep_shardings=True) -> tuple[Graph, dict]:
    """A structurally equal copy of `graph`, and the map old Value -> new Value."""
    g = Graph(graph.name)
    g.mesh = graph.mesh
    vmap = {}
    for v in graph.inputs:
        vmap[v] = g.add_input(v.shape, v.dtype, v.sharding if keep_shardings else None)
    for op in graph.ops:
        new = Op(op.name, [vmap[o] for o in op.operands], dict(op.attrs), [], op.loc)
        new.results = tuple(Value(r.shape, r.dtype, new, i, r.sharding if keep_shardings else None)
                            for i, r in enumerate(op.results))
        g.ops.append(new)
        for r, nr in zip(op.results, new.results):
            vmap[r] = nr
    g.outputs = [vmap[v] for v in graph.outputs]
    return g, vmap
