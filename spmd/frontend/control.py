"""Structured control flow for traced code, with JAX's signatures:

    spmd.while_loop(cond_fun, body_fun, init)
    spmd.fori_loop(lower, upper, body_fun(i, carry), init)
    spmd.cond(pred, true_fun, false_fun, *operands)
    spmd.scan(f(carry, x) -> (carry, y), init, xs, length=None, reverse=False)

Inside spmd.jit each traces its functions once into sub-graphs (ir/ops/control.py: the
`while`, `cond` and `scan` ops); a value of the enclosing program that a body uses is
captured as an extra operand. Outside of tracing (eager mode, plain numpy) they simply
run in Python, so the same code works both ways.

fori_loop with Python-int bounds is a `scan` of upper - lower steps (as JAX's is with
static bounds); with traced bounds it is a `while`.
"""
from __future__ import annotations

import numpy as np

from ..errors import TraceError, user_loc
from ..ir import Graph
from ..ir.ops.names import COND, SCAN, WHILE
from ..tree import tree_flatten, tree_unflatten
from . import core
from . import elementwise as ew
from .trace import Trace, Tracer, current_trace, tracing


class SubTrace(Trace):
    """The trace of a loop body or branch: ops go to its own graph; operands from an
    enclosing trace become inputs of that graph (captured), in order of first use."""

    def __init__(self, graph: Graph, parent: Trace):
        super().__init__(graph, parent.mesh)
        self.parent = parent
        self.fixed_loc = parent.fixed_loc
        self.defined = {id(v) for v in graph.inputs}
        self.captured = {}             # outer Value -> this graph's input Value

    def local(self, v):
        if id(v) in self.defined:
            return v
        inner = self.captured.get(v)
        if inner is None:
            inner = self.captured[v] = self.graph.add_input(v.shape, v.dtype)
            self.defined.add(id(inner))
        return inner

    def emit(self, name, *operands, **attrs):
        cur = current_trace()
        if cur is not self and cur is not None and cur.inside(self):
            return cur.emit(name, *operands, **attrs)
        loc = self.fixed_loc or user_loc()
        out = self.graph.emit(name, *[self.local(o) for o in operands], loc=loc, **attrs)
        for r in (out if isinstance(out, tuple) else (out,)):
            self.defined.add(id(r))
        if self.parent.mesh is None and self.mesh is not None:
            self.parent.mesh = self.mesh          # an spmd.shard inside a body names the mesh
        return out


def _trace_body(fn, in_avals, parent, name, args_of):
    """Trace fn into a new graph with inputs of `in_avals` (a list of (shape, dtype));
    args_of(tracers) builds fn's arguments. Returns (graph, SubTrace, out leaves, out tree)."""
    g = Graph(name)
    for shape, dt in in_avals:
        g.add_input(shape, dt)
    t = SubTrace(g, parent)
    tracers = [Tracer(v, t) for v in g.inputs]
    with tracing(t):
        out = fn(*args_of(tracers))
        leaves, tree = tree_flatten(out)
        vals = []
        for leaf in leaves:
            try:
                vals.append(t.local(core.asarray(leaf, t=t).value))
            except TypeError:
                raise TraceError(f"{name} at {user_loc()}: the function returned a "
                                 f"{type(leaf).__name__}, which is not an array") from None
    g.outputs = vals
    return g, t, vals, tree


def _close(subs, n_fixed):
    """Give every sub-graph the same inputs: its first n_fixed, then one per outer value any
    of them captured. Returns the outer values (the extra operands of the op)."""
    outer = []
    for _, t in subs:
        for v in t.captured:
            if v not in outer:
                outer.append(v)
    for g, t in subs:
        fixed = g.inputs[:n_fixed]
        from ..ir.graph import Value
        g.inputs = fixed + [t.captured.get(v) or Value(v.shape, v.dtype) for v in outer]
    return outer


def _leaves(tree_value, t, what):
    leaves, tree = tree_flatten(tree_value)
    out = []
    for leaf in leaves:
        try:
            out.append(core.asarray(leaf, t=t))
        except TypeError:
            raise TraceError(f"{what} at {user_loc()}: {type(leaf).__name__} {leaf!r} is not an array") from None
    return out, tree


def _check_tree(got, want, what):
    if got != want:
        raise TraceError(f"{what} at {user_loc()}: the function returned the structure {got}, but the "
                         f"loop carry is {want}; the carry must keep its structure, shapes and dtypes")


def while_loop(cond_fun, body_fun, init):
    t = current_trace()
    if t is None:
        val = init
        while bool(cond_fun(val)):
            val = body_fun(val)
        return val
    carry, tree = _leaves(init, t, "spmd.while_loop")
    avals = [(c.shape, c.value.dtype) for c in carry]
    unflat = (lambda ts: (tree_unflatten(tree, ts),))
    cg, ct, cvals, _ = _trace_body(cond_fun, avals, t, "while_cond", unflat)
    if len(cvals) != 1 or cvals[0].shape != ():
        raise TraceError(f"spmd.while_loop at {user_loc()}: cond_fun must return a scalar, got "
                         f"{[list(v.shape) for v in cvals]}")
    if cvals[0].dtype != "bool":
        with tracing(ct):
            cg.outputs = [ct.local(ew.not_equal(Tracer(cvals[0], ct), 0).value)]
    bg, bt, bvals, btree = _trace_body(body_fun, avals, t, "while_body", unflat)
    _check_tree(btree, tree, "spmd.while_loop body")
    _match(bvals, carry, "spmd.while_loop body")
    outer = _close([(cg, ct), (bg, bt)], len(carry))
    outs = t.emit(WHILE, *[c.value for c in carry], *outer, cond=cg, body=bg, num_carry=len(carry))
    outs = outs if isinstance(outs, tuple) else (outs,)
    return tree_unflatten(tree, [Tracer(o, t) for o in outs])


def _match(vals, carry, what):
    for i, (v, c) in enumerate(zip(vals, carry)):
        if v.shape != c.shape or v.dtype != c.value.dtype:
            raise TraceError(f"{what} at {user_loc()}: carry leaf {i} is {c.value.dtype}{list(c.shape)} "
                             f"on entry but {v.dtype}{list(v.shape)} after the body; a loop carry keeps "
                             f"its shape and dtype (cast with .astype)")


def fori_loop(lower, upper, body_fun, init):
    t = current_trace()
    static = all(isinstance(b, (int, np.integer)) and not isinstance(b, bool) for b in (lower, upper))
    if t is None:
        if not static:
            lower, upper = int(lower), int(upper)
        val = init
        for i in range(lower, upper):
            val = body_fun(i, val)
        return val
    if static:
        lower, upper = int(lower), int(upper)

        def step(carry, _):
            i, val = carry
            return (i + 1, body_fun(i, val)), None
        (_, val), _ = scan(step, (core.asarray(lower, "int64", t), init), None, length=max(upper - lower, 0))
        return val

    def cond_fun(c):
        return c[0] < c[1]

    def body(c):
        i, hi, val = c
        return (i + 1, hi, body_fun(i, val))
    _, _, val = while_loop(cond_fun, body, (core.asarray(lower, "int64", t), core.asarray(upper, "int64", t), init))
    return val


def cond(pred, true_fun, false_fun, *operands):
    t = current_trace()
    if t is None:
        return true_fun(*operands) if bool(pred) else false_fun(*operands)
    p = core.asarray(pred, t=t)
    if p.shape != ():
        raise TraceError(f"spmd.cond at {user_loc()}: the predicate must be a scalar, got shape {list(p.shape)}")
    if p.value.dtype != "bool":
        p = ew.not_equal(p, 0)
    args, tree = _leaves(operands, t, "spmd.cond")
    avals = [(a.shape, a.value.dtype) for a in args]
    unflat = (lambda ts: tree_unflatten(tree, ts))
    tg, tt, tvals, ttree = _trace_body(true_fun, avals, t, "cond_true", unflat)
    fg, ft, fvals, ftree = _trace_body(false_fun, avals, t, "cond_false", unflat)
    if ttree != ftree or [(v.shape, v.dtype) for v in tvals] != [(v.shape, v.dtype) for v in fvals]:
        raise TraceError(f"spmd.cond at {user_loc()}: true_fun and false_fun must return the same structure, "
                         f"shapes and dtypes; got {ttree} {[f'{v.dtype}{list(v.shape)}' for v in tvals]} and "
                         f"{ftree} {[f'{v.dtype}{list(v.shape)}' for v in fvals]}")
    outer = _close([(tg, tt), (fg, ft)], len(args))
    outs = t.emit(COND, p.value, *[a.value for a in args], *outer, true=tg, false=fg)
    outs = outs if isinstance(outs, tuple) else (outs,)
    return tree_unflatten(ttree, [Tracer(o, t) for o in outs])


def scan(f, init, xs=None, length=None, reverse=False):
    x_leaves, x_tree = tree_flatten(xs)
    n = _scan_length(x_leaves, length)
    t = current_trace()
    if t is None:
        return _scan_in_python(f, init, x_leaves, x_tree, n, reverse)
    carry, c_tree = _leaves(init, t, "spmd.scan")
    xv = [core.asarray(x, t=t) for x in x_leaves]
    avals = [(c.shape, c.value.dtype) for c in carry] + [(x.shape[1:], x.value.dtype) for x in xv]
    nc = len(carry)

    def body(c, x):
        out = f(c, x)
        if not (isinstance(out, tuple) and len(out) == 2):
            raise TraceError(f"spmd.scan at {user_loc()}: f must return a pair (carry, y)")
        return out
    bg, bt, bvals, btree = _trace_body(body, avals, t, "scan_body",
                                       lambda ts: (tree_unflatten(c_tree, ts[:nc]),
                                                   tree_unflatten(x_tree, ts[nc:nc + len(xv)])))
    # btree is the tree of (carry, y): split its leaves
    _check_tree(btree.children[0], c_tree, "spmd.scan f's carry")
    _match(bvals[:nc], carry, "spmd.scan f")
    outer = _close([(bg, bt)], nc + len(xv))
    outs = t.emit(SCAN, *[c.value for c in carry], *[x.value for x in xv], *outer, body=bg, num_carry=nc,
                  num_xs=len(xv), length=n, reverse=bool(reverse))
    ts = [Tracer(o, t) for o in (list(outs) if isinstance(outs, tuple) else [outs])]
    return tree_unflatten(c_tree, ts[:nc]), tree_unflatten(btree.children[1], ts[nc:])


def _scan_length(x_leaves, length):
    lengths = {int(np.shape(x)[0]) for x in x_leaves}
    if length is not None:
        lengths.add(int(length))
    if len(lengths) != 1:
        raise TraceError(f"spmd.scan at {user_loc()}: " + ("give length= when xs is None" if not lengths else
                         f"xs leaves and length disagree on the number of steps: {sorted(lengths)}"))
    return lengths.pop()


def _scan_in_python(f, init, x_leaves, x_tree, n, reverse):
    """spmd.scan outside of tracing: a Python loop, the ys stacked as numpy arrays."""
    carry, ys = init, []
    for i in (range(n - 1, -1, -1) if reverse else range(n)):
        carry, y = f(carry, tree_unflatten(x_tree, [x[i] for x in x_leaves]))
        ys.append(y)
    if reverse:
        ys = ys[::-1]
    if not ys:
        return carry, None
    y_leaves, y_tree = tree_flatten(ys[0])
    stacked = [np.stack([tree_flatten(y)[0][k] for y in ys]) for k in range(len(y_leaves))]
    return carry, tree_unflatten(y_tree, stacked)


__all__ = ["while_loop", "fori_loop", "cond", "scan"]
