"""jit's running stage: a Lowered's calls. The first call builds its Program (compiling.py)
and checks it fits the machine (placing.py); every call then hands the Program and the
flat argument leaves to the runtime (runtime/execute.py), with the cross-process check
on the first run of the program (runtime/consistency.py: later runs are noted, and
compared at the next exchange), and invalidates the donated spmd.Array arguments."""
from __future__ import annotations

from ..runtime import consistency
from ..runtime.array import Array, donated_handles
from ..runtime.current_runtime import get_runtime
from ..runtime.execute import execute
from .compiling import compile_program
from .placing import check_fits_machine


class Runs:
    """How a Lowered runs in this process: its Program, and whether the processes have
    compared it (its first run under several processes)."""

    def __init__(self, program, processes):
        self.program = program
        self.processes = processes
        self.compared = False


def runs_of(lowered) -> Runs:
    if lowered.runs is None:
        check_fits_machine(lowered)
        processes = get_runtime().process_count() if lowered.mesh is not None else 1
        lowered.runs = Runs(compile_program(lowered, processes), processes)
    return lowered.runs


def run(lowered, leaves):
    """Flat argument leaves -> flat result leaves."""
    r = runs_of(lowered)
    p = r.program
    try:
        if p.mesh is None:
            return execute(p, leaves)
        rt = get_runtime()
        mode = consistency.check_mode() if r.processes > 1 else "off"
        if mode != "off":
            if not r.compared or mode == "every":
                consistency.check_program(rt, p, leaves, [isinstance(x, Array) for x in leaves],
                                          hash_inputs=not r.compared)
                r.compared = True
            else:
                consistency.note_run(p)
        return execute(p, leaves, rt)
    except Exception as e:
        if p.reused:
            e.add_note(f"spmd: {p.name} writes argument leaves {sorted(p.reused)} in place; the failed run "
                       f"may have left them partly written")
        raise
    finally:
        if p.donated:        # (also when the run failed: its buffers may be half written)
            donate(p, leaves)


def donate(program, leaves):
    """After a run: the donated spmd.Array arguments are invalid (their buffers may now
    hold the outputs), as jax deletes donated arrays."""
    for k in program.donated:
        x = leaves[k]
        if isinstance(x, Array):
            x._handles = donated_handles(program.name, k)
