"""Reverse-mode autodiff over the IR.

`grad(f)` traces f into the current graph, then walks the ops f emitted backwards and
emits each op's VJP (from the registry) into the same graph. Because the backward ops
are ordinary ops of that graph, grad of grad just works: the outer walk differentiates
the inner backward pass too. (Outside of tracing, spmd.grad runs it under a fresh jit.)
"""
from __future__ import annotations

import numpy as np

from ..errors import TraceError, user_loc, where
from ..ir import dtypes
from ..ir.ops.names import ADD, CONSTANT, CONVERT
from ..tree import tree_flatten, tree_unflatten
from . import core
from .trace import Tracer, current_trace


def vjp_graph(graph, start, inputs, output, ct):
    """Emit the cotangents of `inputs` given `ct` for `output`, walking graph.ops[start:]."""
    return vjp_multi(graph, start, inputs, [output], [ct])


def vjp_multi(graph, start, inputs, outputs, out_cts, ops=None):
    """Emit the cotangents of `inputs` given a cotangent (or None) per value of `outputs`,
    walking graph.ops[start:] (or `ops`, in program order: a checkpoint walks its
    recomputed body with stand-ins for the values it saved). Control-flow ops
    differentiate their bodies through this."""
    ops = graph.ops[start:] if ops is None else list(ops)
    active = set(inputs)
    for op in ops:
        if any(o in active for o in op.operands):
            active.update(r for r in op.results if dtypes.is_inexact(r.dtype))
    cts = {}
    for o, c in zip(outputs, out_cts):
        if c is not None and o in active:
            cts[o] = graph.emit(ADD, cts[o], c) if o in cts else c
    saved_loc = graph.loc
    for op in reversed(ops):
        if op.opdef.subgraphs:
            rc = [cts.pop(r, None) for r in op.results]
            if all(c is None for c in rc):
                continue
            if op.opdef.vjp is None:
                raise TraceError(f"{op.name} at {op.loc}: reverse-mode differentiation through it is not "
                                 f"supported (as in JAX: spmd.while_loop has a data-dependent trip count); "
                                 f"use spmd.scan or spmd.fori_loop with Python-int bounds")
            graph.loc = op.loc
            grads = op.opdef.vjp(graph, op, rc, vjp_multi)
        else:
            ct_r = cts.pop(op.results[0], None) if len(op.results) == 1 else None
            if ct_r is None:
                continue
            if op.opdef.vjp is None:
                # a float result with no derivative rule: say so, never a silent zero gradient
                raise TraceError(f"grad: {op.name}{where(op.loc)} has no derivative rule")
            graph.loc = op.loc
            grads = op.opdef.vjp(graph, op, ct_r)
        for o, c in zip(op.operands, grads):
            if c is None or o not in active:
                continue
            cts[o] = graph.emit(ADD, cts[o], c) if o in cts else c
    graph.loc = saved_loc
    return [cts.get(x) for x in inputs]


def value_and_grad(f, argnums=0, has_aux=False):
    """(f(*args), df/d args[argnums]) for a function f returning a float scalar, traced:
    it emits the backward pass into the current graph. (spmd.value_and_grad, in api.py,
    runs it under jit when called outside of tracing.)"""
    single = isinstance(argnums, int)
    nums = (argnums,) if single else tuple(argnums)

    def wrapped(*args, **kwargs):
        t = current_trace()
        if t is None:
            raise TraceError("autodiff.value_and_grad outside of tracing: use spmd.value_and_grad, "
                             "which runs it under jit")
        loc = user_loc()
        _check_argnums(nums, argnums, len(args), loc)
        args, fresh, trees = _fresh_arguments(t, list(args), nums, loc)
        start = len(t.graph.ops)
        out, aux = _scalar_output(t, f(*args, **kwargs), has_aux, loc)
        saved, t.fixed_loc = t.fixed_loc, loc
        try:
            one = t.graph.emit(CONSTANT, value=np.ones((), out.value.dtype), loc=loc)
            # one backward walk for all the arguments asked for
            cts = vjp_graph(t.graph, start, [x.value for x in fresh], out.value, one)
            leaves = [core.zeros_like(x) if c is None else Tracer(c, t) for x, c in zip(fresh, cts)]
            grads = [tree_unflatten(tree, leaves[i:i + k]) for tree, i, k in (trees[n] for n in nums)]
        finally:
            t.fixed_loc = saved
        grad = grads[0] if single else tuple(grads)
        return ((out, aux), grad) if has_aux else (out, grad)

    return wrapped


def _check_argnums(nums, argnums, nargs, loc):
    if len({n % max(nargs, 1) for n in nums}) != len(nums):
        raise TraceError(f"grad at {loc}: repeated argument in argnums {argnums}")
    for n in nums:
        if not -nargs <= n < nargs:
            raise TraceError(f"grad at {loc}: argnums {argnums} but the function got {nargs} "
                             f"positional arguments")


def _fresh_arguments(t, args, nums, loc):
    """args with the differentiated ones replaced by fresh values (so uses of the same
    arrays outside f are not differentiated): (args, the fresh leaves, per argument its
    (tree, first leaf, leaf count))."""
    fresh, trees = [], {}
    for n in nums:
        leaves, tree = tree_flatten(args[n])
        mine = []
        for leaf in leaves:
            x = core.asarray(leaf, t=t)
            if not dtypes.is_inexact(x.value.dtype):
                raise TraceError(f"grad at {loc}: argument {n} has a {x.value.dtype} leaf; "
                                 f"grad needs float (or complex) inputs")
            mine.append(Tracer(t.graph.emit(CONVERT, x.value, dtype=x.value.dtype, loc=loc), t))
        trees[n] = (tree, len(fresh), len(mine))
        fresh += mine
        args[n] = tree_unflatten(tree, mine)
    return args, fresh, trees


def _scalar_output(t, out, has_aux, loc):
    """(the function's float scalar value, its aux or None)."""
    aux = None
    if has_aux:
        if not (isinstance(out, tuple) and len(out) == 2):
            raise TraceError(f"grad at {loc}: with has_aux=True the function must return a pair "
                             f"(value, aux)")
        out, aux = out
    out = core.asarray(out, t=t)
    if out.shape != () or not dtypes.is_float(out.value.dtype):
        raise TraceError(f"grad at {loc}: the function must return a float scalar, got "
                         f"{out.value.dtype}{list(out.shape)}")
    return out, aux
