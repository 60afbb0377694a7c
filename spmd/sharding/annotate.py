"""Where jit finds the mesh and the per-leaf shardings the user asked for."""
from __future__ import annotations

from ..tree import broadcast_prefix


def resolve_shardings(jitted, args, leaves, graph, out_tree):
    """-> (mesh or None, [Sharding|None] per input leaf, [Sharding|None] per output leaf)."""
    from .spec import Sharding
    is_sh = lambda x: isinstance(x, Sharding)  # noqa: E731
    mesh = jitted.mesh
    in_sh = [None] * len(leaves)
    out_sh = [None] * len(graph.outputs)
    if jitted.in_shardings is not None:
        dyn = [a for i, a in enumerate(args) if i not in jitted.static_argnums]
        spec = jitted.in_shardings
        if not isinstance(spec, (tuple, list)) or len(dyn) == 1 and is_sh(spec):
            spec = (spec,)
        in_sh = broadcast_prefix(list(spec), dyn, is_leaf=is_sh)
    for s in in_sh:
        if s is not None:
            mesh = mesh or s.mesh
    return mesh, in_sh, out_sh
