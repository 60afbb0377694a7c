"""What the runtime is handed to run: a compiled program, declared.

jit (spmd/jit) builds one `Program` per compiled signature, once; the runtime only reads
it (execute.py runs it, consistency.py compares it across processes). Everything a call
needs is computed here, before the first call: where each input and output lives (its
global shape, dtype and Sharding, checked against the per-device program's shapes), the
arguments whose buffers the program may write, and the program's fingerprint.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, NamedTuple

import numpy as np

from ..errors import SpmdError
from ..ir.mesh import Mesh, Sharding


class Placement(NamedTuple):
    """Where one input or output of a program lives: its global shape and dtype, and
    the Sharding an spmd.Array holds it by (None without a mesh)."""
    shape: tuple
    dtype: np.dtype
    sharding: Sharding | None


@dataclass(frozen=True)
class Program:
    """A compiled program for one input signature.

    `executable(inputs, comm=None) -> outputs` runs the per-device program on one device
    (a backend's Executable also has `runner(comm)`: a function doing the same for the
    calls of one run, backends/executor.py).
    `donated`: argument leaves whose buffers it may reuse (spmd.jit's donate_argnums);
    `reused`: argument leaves it writes in place (numpy's writes into an argument), used
    as they are when they can be. `fingerprint`: a hash of the per-device program's text
    without source locations and of the mesh's device order ("" when one process runs
    every device: nothing to compare); `traced_text`: the traced program, to say where
    two processes' programs differ; `leaf_names`: how errors name each argument leaf."""
    name: str
    executable: Callable
    mesh: Mesh | None
    inputs: tuple
    outputs: tuple
    donated: frozenset = frozenset()
    reused: frozenset = frozenset()
    fingerprint: str = ""
    traced_text: str = ""
    leaf_names: tuple = ()

    @property
    def written(self) -> frozenset:
        """Argument leaves whose buffers the run may write: donated or reused."""
        return self.donated | self.reused


def runner(executable, comm) -> Callable:
    """What runs one rank's calls of `executable` in a run: a backend's Executable gives
    its runner(comm) (what its calls share, looked up once: backends/executor.py); a
    plain function executable(inputs, comm) (eager's own programs, the tests') runs as it is."""
    make = getattr(executable, "runner", None)
    return executable if make is None else make(comm)


def talks(executable) -> bool:
    """Does `executable` exchange with other ranks? A backend's Executable declares it; a
    plain function is taken to."""
    return getattr(executable, "talks", True)


def sharding_held(mesh, s, ndim) -> Sharding:
    """A value's sharding as an Array holds it: None is replicated, partial is dropped
    (the partitioner reduces partial values before they leave the program)."""
    if s is None:
        return Sharding(mesh, (None,) * ndim)
    return s.replace(partial=()).for_rank(ndim)


def placements(name, kind, mesh, values, shardings, local, verb) -> tuple:
    """A Placement per global Value, checked against the per-device program's `local`
    Values (an internal error if a split does not give the shape the program has)."""
    out = []
    for k, v in enumerate(values):
        if mesh is None:
            out.append(Placement(tuple(int(n) for n in v.shape), np.dtype(v.dtype), None))
            continue
        sh = sharding_held(mesh, shardings[k], v.ndim)
        want = tuple(local[k].shape)
        if sh.local_shape(v.shape) != want:
            raise SpmdError(f"internal error: {name} {kind} {k} {v.dtype}{list(v.shape)} split by "
                            f"{sh.text()} has local shape {list(sh.local_shape(v.shape))}, the per-device "
                            f"program {verb} {list(want)}")
        out.append(Placement(tuple(int(n) for n in v.shape), np.dtype(v.dtype), sh))
    return tuple(out)


def make_program(name, executable, mesh, traced, per_device, in_shardings, out_shardings, **rest) -> Program:
    """A Program from the traced (global) graph, the per-device graph and the per-leaf
    shardings of its inputs and outputs (None: replicated); `rest`: Program's other fields."""
    ins = placements(name, "input", mesh, traced.inputs, in_shardings, per_device.inputs, "takes")
    outs = placements(name, "output", mesh, traced.outputs, out_shardings, per_device.outputs, "makes")
    # an output laid out as an input holds that input's Sharding object: a result fed to
    # the next call (a training loop) is then seen placed as the program takes it by
    # identity (execute.py), not by comparing meshes and specs
    held = {p.sharding: p.sharding for p in ins if p.sharding is not None}
    outs = tuple(p._replace(sharding=held.get(p.sharding, p.sharding)) for p in outs)
    return Program(name, executable, mesh, ins, outs, **rest)
