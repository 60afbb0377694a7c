"""sharding_constraint: an identity that pins its result's sharding (spmd.shard inside
traced code). Its attrs are plain data — the spec and the partial axes — the mesh is
the graph's."""
from ..factors import einsum_rule, letters
from .elementwise import ALL, aval
from .names import SHARDING_CONSTRAINT
from .registry import OpDef, check, register


def _infer(x, spec, partial=()):
    check(len(spec) <= len(x.shape), f"sharding spec {list(spec)} has {len(spec)} entries but the "
                                     f"value has rank {len(x.shape)}")
    return aval(x.shape, x.dtype)


def _vjp(g, op, ct):
    # the cotangent is split like the value (as JAX does); a pending sum does not carry over
    return (g.emit(SHARDING_CONSTRAINT, ct, spec=op.attrs["spec"], partial=()),)


def _factors(ins, outs, attrs):
    a = letters(len(ins[0].shape))
    return einsum_rule(f"{a}->{a}", ins, outs)


register(OpDef("sharding_constraint", family="annotation", infer=_infer, ref=lambda x, spec, partial=(): x, vjp=_vjp,
               factors=_factors, flops=lambda ins, out, attrs: 0, dtypes=ALL, priority=0, linear=((0,),),
               lowering="annotation"))
