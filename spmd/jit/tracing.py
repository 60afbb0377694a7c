"""jit's tracing stage: a function and its arguments -> a Graph over global shapes
(frontend/), with the arguments it wrote (`graph.updates`) and numpy's random state as
it left it (`graph.np_random_state`)."""
from __future__ import annotations

import numpy as np

from ..errors import TraceError
from ..frontend import core
from ..frontend import functionalize as fz
from ..frontend import index_tricks, math_module, numpy_buffers, random_guard
from ..frontend.trace import Trace, Tracer, leaf_aval, runaway, tracing
from ..ir import Graph
from ..tree import tree_flatten, tree_unflatten
from .arguments import check_aliasing, dynamic, mutable


def trace_function(fn, args, static_argnums=(), mesh=None, oracle=None):
    """Trace fn on abstract versions of args. Returns (graph, in_tree, out_tree); the
    graph's `updates` are the arguments fn wrote, (leaf, new Value). `oracle` gives the
    values tracing needs from the data (graph_breaks.Oracle), where it is given."""
    leaves, in_tree = tree_flatten(dynamic(args, static_argnums))
    g = Graph(getattr(fn, "__name__", "fn").replace("<", "").replace(">", ""))
    t = Trace(g, mesh)
    t.oracle = oracle
    if hasattr(fn, "__code__"):
        t.entry_codes, t.returned_scalars = (fn.__code__, _call_traced.__code__), []
    tracers = _argument_tracers(t, leaves)
    it = iter(tree_unflatten(in_tree, tracers))
    call_args = [a if i in static_argnums else next(it) for i, a in enumerate(args)]
    with numpy_buffers.intercepting(), math_module.intercepting(), index_tricks.intercepting(), tracing(t):
        out = _call_traced(fn, call_args)
        out, scalars = _returned_scalars(out, t.returned_scalars or [])
        out_leaves, out_tree = tree_flatten(out)
        scalars.update(_python_numbers(out_leaves, scalars))
        g.outputs = [_output_value(fn, leaf, t) for leaf in out_leaves]
    # arguments the function wrote (x -= x.mean(0), x[i] = v): their new values, by leaf
    g.updates = fz.written_arguments(tracers, g.inputs)
    # results that are a written argument itself (`a += b; return a`): numpy hands back
    # the argument object, and so does jit (with no copy of it); result position -> leaf
    written = {k for k, _ in g.updates}
    g.returned = {i: k for i, leaf in enumerate(out_leaves) for k, tr in enumerate(tracers)
                  if leaf is tr and k in written}
    g.np_random_state = random_guard.state_after(t)
    g.scalar_outputs = scalars
    check_aliasing(getattr(fn, "__name__", "fn"), leaves, [k for k, _ in g.updates])
    return g, in_tree, out_tree


def _returned_scalars(out, returned):
    """fn's result with each `float(x)` / `int(x)` it returned (frontend/returned_scalars.py)
    put back as the traced x, and {result leaf position: float | int}."""
    scalars = {}
    for pos, tr, conv in returned:
        if pos == ():
            return tr, {0: conv}
        k, = pos
        scalars[len(tree_flatten(tuple(out[:k]))[0])] = conv
        out = tuple(out[:k]) + (tr,) + tuple(out[k + 1:])
    return out, scalars


PYTHON_TYPES = {"bool": bool, "int64": int, "float64": float, "complex128": complex}


def _python_numbers(out_leaves, scalars):
    """Results that are Python numbers under numpy (a constant the function returns, weak
    tracers: a Python number argument, Python's operators on them, a loop's Python number
    carried by loop_conversion.py), or numpy scalars it made: {result leaf position: its
    type}."""
    out = {}
    for i, leaf in enumerate(out_leaves):
        if i in scalars:
            continue
        if isinstance(leaf, Tracer) and leaf.weak and leaf.ndim == 0 and leaf.value.dtype in PYTHON_TYPES:
            out[i] = PYTHON_TYPES[leaf.value.dtype]
        elif type(leaf) in PYTHON_TYPES.values() or isinstance(leaf, (np.bool_, np.number)):
            out[i] = type(leaf)             # (a numpy scalar the function made: numpy's scalar)
    return out


def _argument_tracers(t, leaves):
    tracers = []
    for k, leaf in enumerate(leaves):
        shape, dt, weak = leaf_aval(leaf)
        tr = Tracer(t.graph.add_input(shape, dt), t, weak)
        # numpy writes into an array argument in place: the caller sees it (see Jitted)
        tracers.append(fz.as_argument(tr, k, leaf) if mutable(leaf) else tr)
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
