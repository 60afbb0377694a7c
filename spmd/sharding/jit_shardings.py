"""How jit(in_shardings=, out_shardings=, mesh=) says where arrays live: hard constraints
for propagation, as spmd.shard(x, sharding) inside traced code is (frontend/annotate.py).
`resolve_shardings` is where jit finds the mesh and the per-leaf shardings, from what the
user gave jit (`Given`: plain values)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ..errors import ShardingError
from ..tree import broadcast_prefix, tree_flatten, tree_unflatten
from ..ir.mesh import AUTO, Sharding, is_auto


@dataclass(frozen=True)
class Given:
    """What the user gave spmd.jit about where arrays live: the function (its parameter
    names name the leaves in errors), in_shardings / out_shardings (pytree prefixes, or
    None), the mesh, and the static argument positions."""
    fn: Callable
    in_shardings: Any = None
    out_shardings: Any = None
    mesh: Any = None
    static_argnums: tuple = ()

    @property
    def fname(self) -> str:
        return getattr(self.fn, "__name__", "fn")


def _shape_of(leaf):
    """An argument leaf's shape: an array's, a ShapeDtype's, () for a Python scalar (jit
    checked every leaf is one of those before it got here)."""
    return tuple(getattr(leaf, "shape", ()))


def _is_sharding(x):
    return isinstance(x, Sharding)


def _placed(x):
    """The Sharding of an argument already placed on devices (an spmd.Array), or None."""
    s = getattr(x, "sharding", None)
    return s if isinstance(s, Sharding) else None


def _with_mesh(s, mesh, what):
    if s is None or is_auto(s):
        return s
    if isinstance(s, str):
        s = (s,)
    if not _is_sharding(s):
        if not isinstance(s, (tuple, list)):
            raise ShardingError(f"{what}: expected a Sharding, a spec tuple or None, got {s!r}")
        if mesh is None:
            raise ShardingError(f"{what}: a bare spec {s!r} needs spmd.jit(..., mesh=...)")
        s = Sharding(mesh, tuple(s))
    return s


class Shardings(list):
    """One Sharding (or None: infer) per leaf, and `names`: how explain and errors name
    each ("in_shardings for params['w1']"); `leaves`: what the user calls each leaf
    ("x", "params['w1']")."""

    def __init__(self, items, names, leaves=None):
        super().__init__(items)
        self.names = list(names)
        self.leaves = list(leaves) if leaves is not None else list(names)


def _leaf_names(fn, args, static_argnums) -> list:
    """A name per argument leaf, in tree_flatten's order: "x", "p['w1']", "args[2][0]"."""
    import inspect
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        params = []
    names = []
    for i, a in enumerate(args):
        if i in static_argnums:
            continue
        if i < len(params) and params[i].kind in (params[i].POSITIONAL_ONLY, params[i].POSITIONAL_OR_KEYWORD):
            base = params[i].name
        elif params and params[-1].kind == params[-1].VAR_POSITIONAL:
            base = f"{params[-1].name}[{i - len(params) + 1}]"
        else:
            base = f"args[{i}]"
        names += _paths(a, base)
    return names


def _paths(t, base):
    leaves, _ = tree_flatten(t)
    if len(leaves) == 1 and leaves[0] is t:
        return [base]
    if isinstance(t, dict):
        return [p for k in sorted(t) for p in _paths(t[k], f"{base}[{k!r}]")]
    if isinstance(t, (list, tuple)):
        return [p for i, x in enumerate(t) for p in _paths(x, f"{base}[{i}]")]
    return []


def _expand(prefix, tree, what):
    """broadcast_prefix with a clear error."""
    try:
        return broadcast_prefix(prefix, tree, is_leaf=lambda x: _is_sharding(x) or _is_spec(x))
    except ValueError as e:
        raise ShardingError(f"{what}: {e}") from None


def resolve_shardings(given, args, leaves, graph, out_tree):
    """-> (mesh or None, Shardings per input leaf, Shardings per output leaf); None in
    them means "infer". in_shardings / out_shardings are pytree prefixes of the
    arguments / results (one Sharding may stand for a whole dict of params); a bare
    spec tuple like ("data", None) is allowed when the mesh is known (jit(mesh=...), or
    another annotation names it). An spmd.Array argument without an in-sharding keeps
    its own sharding. out_tree None: the graph's results are not the function's (a graph
    break's), out_shardings do not apply."""
    fname = given.fname
    names = _leaf_names(given.fn, args, given.static_argnums)
    if len(names) != len(leaves):
        names = [f"in_shardings[{i}]" for i in range(len(leaves))]
    in_sh = _given_in_shardings(given, args, leaves, fname)
    out_sh = [None] * len(graph.outputs)
    if given.out_shardings is not None and out_tree is not None:
        skeleton = tree_unflatten(out_tree, [0] * len(graph.outputs))
        out_sh = _expand(given.out_shardings, skeleton, f"{fname}: out_shardings")
    mesh = _one_mesh(fname, [given.mesh] + [s.mesh for s in in_sh if _is_sharding(s)] + [graph.mesh] +
                     [_placed(x).mesh for x in leaves if _placed(x) is not None and _placed(x).mesh.size > 1] +
                     [s.mesh for s in out_sh if _is_sharding(s)])
    in_sh = [_with_mesh(s, mesh, f"{fname}: in_shardings for {n}") for s, n in zip(in_sh, names)]
    out_sh = [_with_mesh(s, mesh, f"{fname}: out_shardings[{i}]") for i, s in enumerate(out_sh)]
    # an spmd.Array passed without an in-sharding keeps its own (as JAX's committed arrays)
    for i, x in enumerate(leaves):
        if in_sh[i] is None and _placed(x) is not None and mesh is not None and _placed(x).mesh == mesh:
            in_sh[i] = x.sharding
    if mesh is None and any(is_auto(s) for s in list(in_sh) + list(out_sh)):
        raise ShardingError(f"{fname}: spmd.AUTO chooses shardings on a mesh, and {fname} has none: "
                            f"give spmd.jit(..., mesh=spmd.Mesh(...))")
    _check_ranks(fname, in_sh, [_shape_of(x) for x in leaves], [f"in_shardings for {n}" for n in names],
                 "argument")
    _check_ranks(fname, out_sh, [v.shape for v in graph.outputs], [f"out_shardings[{i}]" for i in range(len(out_sh))],
                 "result")
    return (mesh, Shardings(in_sh, [f"in_shardings for {n}" for n in names], names),
            Shardings(out_sh, [f"out_shardings[{i}]" for i in range(len(out_sh))]))


def argument_shardings(given, args, leaves):
    """(mesh or None, a Sharding or None per argument leaf): jit's in_shardings without a
    traced program, as jit's eager fallback places the arguments. An spmd.Array without
    an in-sharding keeps its own."""
    fname = given.fname
    shardings = _given_in_shardings(given, args, leaves, fname)
    mesh = _one_mesh(fname, [given.mesh] + [s.mesh for s in shardings if _is_sharding(s)] +
                     [_placed(x).mesh for x in leaves if _placed(x) is not None and _placed(x).mesh.size > 1])
    # (AUTO: the eager fallback has no program to choose for; arguments keep their place)
    out = [None if is_auto(s) else _with_mesh(s, mesh, f"{fname}: in_shardings") for s in shardings]
    return mesh, [s if s is not None or _placed(x) is None else x.sharding for s, x in zip(out, leaves)]


def result_shardings(given, out_tree, n, mesh):
    """A Sharding or None per result leaf from jit's out_shardings (jit's eager fallback
    places the results by them)."""
    if given.out_shardings is None:
        return [None] * n
    fname = given.fname
    expanded = _expand(given.out_shardings, tree_unflatten(out_tree, [0] * n), f"{fname}: out_shardings")
    return [None if is_auto(s) else _with_mesh(s, mesh, f"{fname}: out_shardings[{i}]")
            for i, s in enumerate(expanded)]


def _given_in_shardings(given, args, leaves, fname):
    """jit's in_shardings expanded to one entry (a Sharding, a bare spec or None) per leaf."""
    if given.in_shardings is None:
        return [None] * len(leaves)
    dyn = [a for i, a in enumerate(args) if i not in given.static_argnums]
    spec = given.in_shardings
    if is_auto(spec):
        return [AUTO] * len(leaves)
    if not isinstance(spec, (tuple, list)) or (len(dyn) == 1 and _is_spec(spec) and (
            len(spec) != 1 or spec[0] is None or isinstance(spec[0], str))):
        spec = (spec,)          # one argument's sharding given without the outer tuple
    if len(spec) != len(dyn):
        static = sorted(i for i in given.static_argnums if i < len(args))
        also = (f" (the arguments not in static_argnums={tuple(static)}: a static argument takes no entry, as "
                f"in JAX)") if static else ""
        raise ShardingError(f"{fname}: in_shardings has {len(spec)} entries for {len(dyn)} arguments{also}")
    return _expand(list(spec), dyn, f"{fname}: in_shardings")


def _one_mesh(fname, meshes):
    """The one mesh all of these (None: no mesh) name, or None."""
    mesh = None
    for m in meshes:
        if m is None:
            continue
        if mesh is None:
            mesh = m
        elif m != mesh:
            raise ShardingError(f"{fname}: shardings on two different meshes ({mesh!r} and {m!r}); "
                                f"one jit function uses one mesh")
    return mesh


def _check_ranks(fname, shardings, shapes, names, what):
    for s, shape, n in zip(shardings, shapes, names):
        if s is not None and not is_auto(s) and len(s.spec) > len(shape):
            raise ShardingError(f"{fname}: {n}: sharding {s.text()} has {len(s.spec)} "
                                f"entries but the {what} has shape {list(shape)}")


def _is_spec(x):
    """A bare spec tuple like ("data", None) or (("data", "model"), None) (allowed when
    the mesh is known): every entry None, an axis name or a tuple of axis names, and at
    least one axis named."""
    def entry(e):
        return e is None or isinstance(e, str) or (
            isinstance(e, tuple) and len(e) > 0 and all(isinstance(a, str) for a in e))
    return isinstance(x, tuple) and len(x) > 0 and all(entry(e) for e in x) and \
        any(e is not None for e in x)
