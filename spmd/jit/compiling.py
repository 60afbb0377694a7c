"""jit's compiling stage: a Lowered -> the declared Program the runtime runs
(runtime/program.py): the executable, where each input and output lives, the buffers
the run may write, and, when several processes run it, its fingerprint."""
from __future__ import annotations

import hashlib
import re

from ..runtime.consistency import leaf_names
from ..runtime.program import Program, make_program

_LOC = re.compile(r' loc\(".*"\)$')


def fingerprint(lowered) -> str:
    """A hash of the program every rank runs: its text without source locations (ranks
    may call it from different lines), and the mesh's device order."""
    h = hashlib.blake2b(digest_size=12)
    h.update("\n".join(_LOC.sub("", ln) for ln in lowered.as_text("optimized").splitlines()).encode())
    if lowered.mesh is not None:
        h.update(repr(lowered.mesh.devices.reshape(-1).tolist()).encode())
    return h.hexdigest()


def compile_program(lowered, processes) -> Program:
    """The Program of `lowered` for a runtime of `processes` processes (with one, there
    is nothing to compare across processes: no fingerprint, no text kept)."""
    traced = lowered.stages["traced"]
    across = lowered.mesh is not None and processes > 1
    return make_program(traced.name, lowered.compile(), lowered.mesh, traced, lowered.graph,
                        lowered.in_shardings, lowered.out_shardings,
                        donated=frozenset(lowered.donated), reused=lowered.reused,
                        fingerprint=fingerprint(lowered) if across else "",
                        traced_text=lowered.as_text("traced") if across else "",
                        leaf_names=tuple(leaf_names(lowered.in_tree)))
