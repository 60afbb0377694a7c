"""`lowered.shardings()`: a program's in and out shardings as pytrees, and as the code that
pins them (`in_shardings=(...), out_shardings=(...)` with `mesh.sharding(...)` leaves), so
that a plan spmd.AUTO chose can be pasted into the program and frozen."""
from __future__ import annotations

from ..ir.mesh import Sharding


def sharding_code(s, mesh_name="mesh") -> str:
    if s is None:
        return "None"
    if not isinstance(s, Sharding):
        return repr(s)
    spec = list(s.spec)
    while spec and spec[-1] is None:
        spec.pop()
    parts = []
    for e in spec:
        if e is None:
            parts.append("None")
        elif isinstance(e, str):
            parts.append(repr(e))
        else:
            parts.append("(" + ", ".join(repr(a) for a in e) + ("," if len(e) == 1 else "") + ")")
    return f"{mesh_name}.sharding({', '.join(parts)})"


def tree_code(t, mesh_name="mesh") -> str:
    if isinstance(t, dict):
        return "{" + ", ".join(f"{k!r}: {tree_code(t[k], mesh_name)}" for k in sorted(t)) + "}"
    if isinstance(t, tuple) and not hasattr(t, "_fields"):
        inner = ", ".join(tree_code(x, mesh_name) for x in t)
        return f"({inner}{',' if len(t) == 1 else ''})"
    if isinstance(t, list):
        return "[" + ", ".join(tree_code(x, mesh_name) for x in t) + "]"
    return sharding_code(t, mesh_name)


class PlanShardings:
    """`in_shardings` (a tuple: one pytree per argument) and `out_shardings` (the results'
    pytree); `code()` (and str) the keyword arguments that pin them in spmd.jit."""

    def __init__(self, in_shardings, out_shardings):
        self.in_shardings, self.out_shardings = tuple(in_shardings), out_shardings

    def code(self, mesh_name="mesh") -> str:
        return (f"in_shardings={tree_code(self.in_shardings, mesh_name)},\n"
                f"out_shardings={tree_code(self.out_shardings, mesh_name)}")

    def __str__(self):
        return self.code()

    __repr__ = __str__
