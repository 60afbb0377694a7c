"""spmd.checkpoint: compute a function again in the backward pass instead of keeping what
it made (jax.checkpoint's meaning), and spmd.checkpoint_name to mark values a policy may
keep.

    y = spmd.checkpoint(block)(x, w)                  # keep x and w, recompute the rest
    y = spmd.checkpoint(block, policy="dots")(x, w)   # keep the matmul results too
    h = spmd.checkpoint_name(h, "attn")               # inside block: a value by name
    y = spmd.checkpoint(block, policy=spmd.checkpoint_policies.save_only_these_names("attn"))(x, w)

Inside spmd.jit the function is traced once into a sub-graph: the `checkpoint` op
(ir/ops/remat.py), whose body's last outputs are the values the policy saves. The
forward pass runs the body as written (the compiler inlines it); a gradient through it
emits the body again from its arguments and the saved values, and differentiates that,
so what the backward pass holds of the forward pass is the arguments and the saved values
alone. The gradients are those of the function itself, bit for bit: the same ops run on
the same values. Outside of tracing (plain numpy, eager spmd.Arrays) the function simply
runs.

A policy says which values made inside are saved: `policy(op, name) -> bool`, with `op`
the registry entry (OpDef: `.name`, `.family`) of the op that made the value and `name`
its checkpoint_name (or None). "nothing" (the default: only the arguments are kept),
"dots" (matrix products' results), or one of `checkpoint_policies`.
"""
from __future__ import annotations

import functools

from ..errors import TraceError, user_loc
from ..ir import Graph
from ..ir.ops.names import CHECKPOINT
from ..tree import tree_flatten, tree_unflatten
from . import core
from .control import SubTrace
from .trace import Tracer, current_trace, tracing


class checkpoint_policies:
    """Which values made inside a checkpointed function are saved for the backward pass
    (the rest is computed again there). jax.checkpoint_policies' names."""

    @staticmethod
    def nothing_saveable(op, name):
        return False

    @staticmethod
    def everything_saveable(op, name):
        return True

    @staticmethod
    def dots_saveable(op, name):
        return op.family == "dot"

    @staticmethod
    def save_only_these_names(*names):
        keep = frozenset(names)

        def policy(op, name):
            return name in keep
        policy.__name__ = f"save_only_these_names{tuple(sorted(keep))}"
        return policy


POLICIES = {None: checkpoint_policies.nothing_saveable, "nothing": checkpoint_policies.nothing_saveable,
            "dots": checkpoint_policies.dots_saveable, "everything": checkpoint_policies.everything_saveable}


def _policy(policy):
    if callable(policy):
        return policy
    if policy in POLICIES:
        return POLICIES[policy]
    raise TypeError(f"spmd.checkpoint: policy {policy!r} is not one of 'nothing', 'dots', 'everything' "
                    f"or a function (op, name) -> bool (see spmd.checkpoint_policies)")


class CheckpointTrace(SubTrace):
    """The trace of a checkpointed function's body: also the names given to its values."""

    def __init__(self, graph, parent):
        super().__init__(graph, parent)
        self.names = {}                 # Value -> its checkpoint_name


def checkpoint_name(x, name: str):
    """x, marked `name` for a checkpoint policy (save_only_these_names) of the innermost
    spmd.checkpoint being traced; x itself anywhere else."""
    t = current_trace()
    if isinstance(t, CheckpointTrace) and isinstance(x, Tracer):
        t.names[t.local(x.value)] = str(name)
    return x


def checkpoint(fn=None, *, policy=None):
    """fn, computed again in the backward pass from its arguments (and the values `policy`
    saves) instead of keeping what it makes. Arguments that are arrays (traced ones)
    are what is kept; others (Python numbers, configuration) are passed as they are."""
    if fn is None:
        return lambda f: checkpoint(f, policy=policy)
    saves = _policy(policy)

    @functools.wraps(fn)
    def wrapped(*args):
        t = current_trace()
        if t is None:
            return fn(*args)
        return _traced(fn, saves, t, args)

    return wrapped


def _traced(fn, saves, t, args):
    leaves, tree = tree_flatten(args)
    traced = [i for i, x in enumerate(leaves) if isinstance(x, Tracer)]
    g = Graph(f"checkpoint_{getattr(fn, '__name__', 'fn')}".replace("<", "").replace(">", ""))
    body = CheckpointTrace(g, t)
    inner = list(leaves)
    for i in traced:
        x = leaves[i]
        v = g.add_input(x.value.shape, x.value.dtype)
        body.defined.add(id(v))
        inner[i] = Tracer(v, body, x.weak)
    with tracing(body):
        out = fn(*tree_unflatten(tree, inner))
        out_leaves, out_tree = tree_flatten(out)
        outs = []
        for leaf in out_leaves:
            try:
                outs.append(body.local(core.asarray(leaf, t=body).value))
            except TypeError:
                raise TraceError(f"spmd.checkpoint at {user_loc()}: the function returned a "
                                 f"{type(leaf).__name__}, which is not an array") from None
    kept = set(outs) | set(g.inputs)
    saved = [r for op in g.ops for r in op.results
             if r not in kept and saves(op.opdef, body.names.get(r))]
    g.outputs = outs + saved
    captured = list(body.captured)          # outer values the function closed over: extra args
    res = t.emit(CHECKPOINT, *[leaves[i].value for i in traced], *captured, body=g, saved=len(saved))
    res = list(res) if isinstance(res, tuple) else [res]
    return tree_unflatten(out_tree, [Tracer(r, t) for r in res[:len(outs)]])


__all__ = ["checkpoint", "checkpoint_name", "checkpoint_policies"]
