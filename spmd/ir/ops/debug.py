"""debug_print: spmd.debug.print inside traced code.

    debug_print(*values) {fmt, names} -> int64[] (a token nothing reads)

At run time the values are formatted with `fmt` (str.format; `names[i]` is "" for a
positional value, else its keyword) and printed, once per run of the program: by the
device with the lowest id of the mesh (rank 0), after the partitioner made every value
whole there (numpy's value, as a program on one device would print it). The op is run
for its effect (`effect=True`): passes keep it where it is, and program order orders the
prints. It gives shardings nothing to follow (no operand dim has a factor), so printing
a value never changes how the program is split.
"""
from __future__ import annotations

import sys

import numpy as np

from ..aval import Aval
from ..factors import einsum_rule
from .elementwise import ALL, CPLX
from .registry import OpDef, check, register


def render(fmt, names, values) -> str:
    """fmt.format with the values as numpy gives them (a 0-d array as its scalar, so
    format specs like {:.3f} apply)."""
    args = [np.asarray(v)[()] if np.ndim(v) == 0 else np.asarray(v) for v in values]
    pos = [a for n, a in zip(names, args) if not n]
    kw = {n: a for n, a in zip(names, args) if n}
    return fmt.format(*pos, **kw)


def _infer(*xs, fmt, names):
    check(isinstance(fmt, str), f"fmt must be a str, got {type(fmt).__name__}")
    check(isinstance(names, tuple) and len(names) == len(xs),
          f"names {names!r} must name each of the {len(xs)} values ('' for a positional one)")
    return Aval((), "int64")


def _prints_here(comm) -> bool:
    return comm.rank == int(np.min(comm.mesh.devices))


def _ref(*xs, comm=None, fmt, names):
    if comm is None:
        sys.stdout.write(render(fmt, names, xs) + "\n")
        sys.stdout.flush()
    elif _prints_here(comm):
        comm.write(render(fmt, names, xs) + "\n")
    return np.zeros((), np.int64)


def _factors(ins, outs, attrs):
    return einsum_rule(",".join("_" * len(a.shape) for a in ins) + "->", ins, outs)


register(OpDef("debug_print", family="debug", infer=_infer, ref=_ref, factors=_factors, flops=lambda ins, out, attrs: 0,
               dtypes=ALL + CPLX, needs_comm=True, effect=True, lowering="host"))
