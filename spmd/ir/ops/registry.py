"""The op registry: one OpDef per op, holding every rule the system needs of it.

Adding an op is one `register(OpDef(...))` call in the file of its family. A test walks
the registry so that no op can miss a rule.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

from ...errors import ShapeError


@dataclass(frozen=True)
class OpDef:
    name: str
    family: str
    # (*avals, **attrs) -> Aval (or a list of Avals); raises ShapeError with a reason
    infer: Callable
    # (*ndarrays, **attrs) -> ndarray: the numpy reference semantics
    ref: Callable
    # (graph, op, ct) -> tuple, one cotangent Value or None per operand; None if not differentiable
    vjp: Optional[Callable] = None
    # (avals_in, avals_out, attrs) -> FactorRule: how shardings flow through the op (Shardy)
    factors: Optional[Callable] = None
    # elementwise ops: (builder, *scalar_args) -> scalar, for fused native kernels
    scalar: Optional[Callable] = None
    # (avals_in, aval_out, attrs) -> number of floating-point operations
    flops: Optional[Callable] = None
    # the dtypes the OpInfo tests feed it
    dtypes: tuple = ("float32", "float64", "int32", "int64", "bool")
    # collectives get the communicator from the runtime
    needs_comm: bool = False
    # only re-indexes its first operand: `ref` returns a view of it where numpy can (a
    # backend may then read the operand in place, with strides, instead of a copy)
    view: bool = False

    @property
    def differentiable(self):
        return self.vjp is not None


REGISTRY: dict[str, OpDef] = {}


def register(opdef: OpDef) -> OpDef:
    if opdef.name in REGISTRY:
        raise ValueError(f"op {opdef.name} registered twice")
    REGISTRY[opdef.name] = opdef
    return opdef


def get_op(name: str) -> OpDef:
    try:
        return REGISTRY[name]
    except KeyError:
        raise ShapeError(f"unknown op {name!r}") from None


def check(cond, msg):
    """Shape rules state their requirements with check(); the message names the problem."""
    if not cond:
        raise ShapeError(msg)
