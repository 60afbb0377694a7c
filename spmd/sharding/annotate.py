"""How a user says where arrays live: spmd.shard(x, sharding) inside traced code, and
jit(in_shardings=, out_shardings=, mesh=). Both are hard constraints for propagation.
`resolve_shardings` is where jit finds the mesh and the per-leaf shardings."""
from __future__ import annotations

from ..errors import ShardingError
from ..tree import broadcast_prefix, tree_unflatten
from .mesh import Mesh
from .spec import Sharding


def _is_sharding(x):
    return isinstance(x, Sharding)


def shard(x, sharding):
    """Pin x's sharding. Inside spmd.jit: an annotation propagation must keep. Outside:
    place the array on the devices (spmd.device_put)."""
    from ..compiler.trace import Tracer, current_trace, user_loc
    t = current_trace()
    if t is None:
        from ..runtime import device_put
        if not _is_sharding(sharding):
            raise ShardingError("spmd.shard outside of jit needs a Sharding (mesh.sharding(...))")
        return device_put(x, sharding)
    from ..compiler import numpy_api as npx
    x = npx.asarray(x, t=t)
    if _is_sharding(sharding):
        mesh, spec, partial = sharding.mesh, sharding.spec, sharding.partial
        if t.mesh is not None and t.mesh != mesh:
            raise ShardingError(f"spmd.shard at {user_loc()}: sharding is on {mesh!r} but this "
                                f"program already uses {t.mesh!r}; one jit function uses one mesh")
    else:
        if t.mesh is None:
            raise ShardingError(f"spmd.shard at {user_loc()}: a bare spec {sharding!r} needs "
                                f"spmd.jit(..., mesh=...); or pass mesh.sharding(...)")
        mesh, spec, partial = t.mesh, tuple(sharding), ()
        Sharding(mesh, spec)          # validates axis names
    if len(spec) > x.ndim:
        raise ShardingError(f"spmd.shard at {user_loc()}: sharding {Sharding(mesh, spec).text()} has "
                            f"{len(spec)} entries but the value has shape {list(x.shape)}")
    t.mesh = mesh
    t.graph.mesh = mesh
    return Tracer(t.emit("sharding_constraint", x.value, spec=spec, partial=partial), t)


def _with_mesh(s, mesh, what):
    if s is None:
        return None
    if not _is_sharding(s):
        if mesh is None:
            raise ShardingError(f"{what}: a bare spec {s!r} needs spmd.jit(..., mesh=...)")
        s = Sharding(mesh, tuple(s))
    return s


def resolve_shardings(jitted, args, leaves, graph, out_tree):
    """-> (mesh or None, [Sharding|None] per input leaf, [Sharding|None] per output leaf)."""
    from ..runtime.array import Array
    mesh = jitted.mesh
    dyn = [a for i, a in enumerate(args) if i not in jitted.static_argnums]
    in_sh = [None] * len(leaves)
    if jitted.in_shardings is not None:
        spec = jitted.in_shardings
        if not isinstance(spec, (tuple, list)) or (len(dyn) == 1 and _is_spec(spec)):
            spec = (spec,)          # one argument's sharding given without the outer tuple
        if len(spec) != len(dyn):
            raise ShardingError(f"in_shardings has {len(spec)} entries for {len(dyn)} arguments")
        in_sh = broadcast_prefix(list(spec), dyn, is_leaf=lambda x: _is_sharding(x) or _is_spec(x))
    meshes = [s.mesh for s in in_sh if _is_sharding(s)]
    if graph.mesh is not None:
        meshes.append(graph.mesh)
    meshes += [x.sharding.mesh for x in leaves if isinstance(x, Array) and x.sharding.mesh.size > 1]
    for m in meshes:
        if mesh is None:
            mesh = m
        elif m != mesh:
            raise ShardingError(f"{getattr(jitted.fn, '__name__', 'fn')}: shardings on two different "
                                f"meshes ({mesh!r} and {m!r}); one jit function uses one mesh")
    in_sh = [_with_mesh(s, mesh, "in_shardings") for s in in_sh]
    # an spmd.Array passed without an in-sharding keeps its own (as JAX's committed arrays)
    for i, x in enumerate(leaves):
        if in_sh[i] is None and isinstance(x, Array) and mesh is not None and x.sharding.mesh == mesh:
            in_sh[i] = x.sharding
    out_sh = [None] * len(graph.outputs)
    if jitted.out_shardings is not None:
        skeleton = tree_unflatten(out_tree, [0] * len(graph.outputs))
        spec = jitted.out_shardings
        out_sh = broadcast_prefix(spec, skeleton, is_leaf=lambda x: _is_sharding(x) or _is_spec(x))
        out_sh = [_with_mesh(s, mesh, "out_shardings") for s in out_sh]
        for s in out_sh:
            if s is not None:
                mesh = mesh or s.mesh
    if mesh is None and isinstance(jitted.mesh, Mesh):
        mesh = jitted.mesh
    return mesh, in_sh, out_sh


def _is_spec(x):
    """A bare spec tuple like ("data", None) (allowed with jit(mesh=...))."""
    return isinstance(x, tuple) and all(e is None or isinstance(e, str) for e in x) and len(x) > 0 \
        and any(isinstance(e, str) for e in x)
