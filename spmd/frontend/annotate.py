"""spmd.shard(x, sharding) inside traced code: a sharding_constraint op, an annotation
propagation must keep (sharding/propagate.py). The sharding is a Sharding, or a bare spec
tuple like ("data", None) on the mesh of the program (jit(mesh=...))."""
from __future__ import annotations

from ..errors import ShardingError, user_loc
from ..ir.mesh import Sharding
from ..ir.ops.names import SHARDING_CONSTRAINT
from . import core
from .trace import Tracer, current_trace


def shard_traced(x, sharding):
    """spmd.shard inside traced code: pin x's sharding with an annotation propagation must keep."""
    t = current_trace()
    x = core.asarray(x, t=t)
    if isinstance(sharding, Sharding):
        mesh, spec, partial = sharding.mesh, sharding.spec, sharding.partial
        if t.mesh is not None and t.mesh != mesh:
            raise ShardingError(f"spmd.shard at {user_loc()}: sharding is on {mesh!r} but this "
                                f"program already uses {t.mesh!r}; one jit function uses one mesh")
    else:
        if isinstance(sharding, str):
            sharding = (sharding,)
        if not isinstance(sharding, (tuple, list)):
            raise ShardingError(f"spmd.shard at {user_loc()}: expected a Sharding or a spec tuple, "
                                f"got {sharding!r}")
        if t.mesh is None:
            raise ShardingError(f"spmd.shard at {user_loc()}: a bare spec {sharding!r} needs "
                                f"spmd.jit(..., mesh=...); or pass mesh.sharding(...)")
        mesh, partial = t.mesh, ()
        spec = Sharding(mesh, tuple(sharding)).spec      # validates and normalises the entries
    if len(spec) > x.ndim:
        raise ShardingError(f"spmd.shard at {user_loc()}: sharding {Sharding(mesh, spec).text()} has "
                            f"{len(spec)} entries but the value has shape {list(x.shape)}")
    t.mesh = mesh
    t.graph.mesh = mesh
    return Tracer(t.emit(SHARDING_CONSTRAINT, x.value, spec=spec, partial=partial), t)
