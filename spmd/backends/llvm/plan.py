"""Planning a program for the LLVM backend: what runs as which step, and in which memory.

`plan_program(graph, donated)` fuses the graph into kernels (fuse.py), generates each
kernel's LLVM function (codegen.py), plans the memory (memory.py) and returns a
ProgramPlan: the steps in order (KernelSteps and ops run on their own), the memory plan
and the LLVM modules of the kernels, not yet compiled. LLVMExecutable (executable.py)
compiles and runs it.
"""
from __future__ import annotations

import ctypes
import os
import time
from dataclasses import dataclass
from typing import NamedTuple

from ...errors import SpmdError
from ...ir import Graph
from .codegen import kernel_ir
from .emitters import Split
from .fuse import FusionPlan, Kernel, fuse, reindexes
from .lowering_table import fusible, overwrites, same_bytes, writes_into
from .memory import MemoryPlan, plan_memory
from . import native


class KernelCode(NamedTuple):
    text: str                # the LLVM function
    decls: set               # the declarations it needs (intrinsics, libm)
    cg: object               # its KernelCodegen: parameters, loop split, size class


class KernelStep:
    """A fused kernel as a step of the program: its function, once compiled, and how it
    splits over threads."""

    def __init__(self, kernel, cg):
        self.kernel = kernel
        self.name = cg.name
        self.params = list(cg.params)                   # Values, in parameter order
        self.par, self.extent = cg.par, cg.extent
        self.root = kernel.root
        # timeline name: the ops it fuses ("tanh+reduce"), data movement left out
        ops = [op.name for op in kernel.ops if not reindexes(op)] or [kernel.root.producer.name]
        self.label = "+".join(ops)
        self.fn = None
        self.addr_t = None                              # the trampoline (native schedules)
        self.work = cg.work

    def bind(self, addr, addr_t):
        n = len(self.params)
        proto = ctypes.CFUNCTYPE(None, *([ctypes.c_void_p] * n), ctypes.c_int64, ctypes.c_int64, ctypes.c_int64)
        self.fn = proto(addr)
        self.addr_t = addr_t

    def bind_unbuilt(self):
        """Stands in for the compiled functions where only the schedule is wanted (its
        memory: LLVMExecutable(build=False)): every kernel has a trampoline once built, so
        the schedule comes out as it would; nothing may call it."""
        self.fn, self.addr_t = None, UNBUILT


# the address of a kernel not compiled (bind_unbuilt): not null, so the schedule
# counts the kernel's trampoline, and never a real function's (the zero page)
UNBUILT = 8


@dataclass
class ProgramPlan:
    graph: Graph
    fusion: FusionPlan
    steps: list              # KernelStep | Op, in execution order
    memory: MemoryPlan
    modules: dict            # "big" | "small" -> (LLVM IR text, the function names to compile)
    donated: tuple           # input positions whose buffers the program may write into
    in_outputs: bool         # may temporaries be computed in outputs' buffers (memory.py)
    codegen_s: float         # seconds spent planning

    def __str__(self):
        return str(self.fusion)


def plan_program(graph: Graph, donated=(), in_outputs=True) -> ProgramPlan:
    """`in_outputs`: may the memory plan compute temporaries in outputs' buffers (not in a
    loop's or branch's body, memory.py)?"""
    t0 = time.perf_counter()
    donated = tuple(sorted(donated))
    fusion, code = fuse_and_generate(graph)
    memory = plan_memory(graph, fusion.steps, writes_into, donated,
                         in_place=os.environ.get("SPMD_IN_PLACE", "1") != "0", same_bytes=same_bytes,
                         overwrites=overwrites, in_outputs=in_outputs)
    code = with_in_place(fusion.kernels(), code, memory)
    it = iter(code)
    steps = [KernelStep(s, next(it).cg) if isinstance(s, Kernel) else s for s in fusion.steps]
    return ProgramPlan(graph, fusion, steps, memory, kernel_modules(code), donated, in_outputs,
                       time.perf_counter() - t0)


def fuse_and_generate(graph):
    """(FusionPlan, KernelCode per kernel). A kernel whose code generator wants a value
    materialised (Split) makes that value a root of its own, and fusion runs again until
    no kernel asks; kernels the new roots leave alone are generated once (memo)."""
    roots, memo = set(), {}
    for _ in range(len(graph.ops) + 1):
        fusion = fuse(graph, fusible, frozenset(roots))
        code, split = generate(fusion.kernels(), memo, graph.mesh)
        if not split:
            return fusion, code
        roots |= split
    raise SpmdError(f"internal error: fusion of {graph.name} did not converge")


def generate(kernels, memo, mesh=None):
    """(KernelCode of each kernel, the values kernels want materialised). `mesh`: the
    devices the program runs on (a kernel's masks may depend on a device's place)."""
    code, split = [], set()
    for i, k in enumerate(kernels):
        key = (tuple(map(id, k.ops)), id(k.root), tuple(map(id, k.outputs)), tuple(map(id, k.inputs)))
        hit = memo.get(key)
        if hit is None:
            try:
                hit = memo[key] = KernelCode(*kernel_ir(k, f"k{i}", native.cores(), mesh))
            except Split as e:
                hit = memo[key] = e
        if isinstance(hit, Split):
            split.add(hit.value)
            continue
        if hit.cg.name != f"k{i}":            # the same kernel at another place: renamed
            hit.cg.name = f"k{i}"
            hit = memo[key] = hit._replace(text=hit.cg.render())
        code.append(hit)
    return code, split


def with_in_place(kernels, code, memory):
    """Kernels that write an output in place read and write it through one pointer."""
    out = []
    for k, c in zip(kernels, code):
        pairs = {r: memory.in_place[r] for r in k.outputs if r in memory.in_place}
        out.append(c._replace(text=c.cg.render(pairs)) if pairs else c)
    return out


def kernel_modules(code) -> dict:
    """Two modules: big kernels get the full O3 (unrolled, interleaved), small ones a
    cheaper pipeline: most kernels of a real program are small, and compile 5x faster."""
    modules = {}
    for big in (True, False):
        part = [c for c in code if c.cg.big == big]
        if not part:
            continue
        decls = sorted(set().union(*[c.decls for c in part]))
        tramps = [native.trampoline(c.cg.name, len(c.cg.params)) for c in part]
        ir = "\n".join(decls + [c.text for c in part] + tramps
                       + ['attributes #0 = { nounwind "no-trapping-math"="true" }'])
        modules["big" if big else "small"] = (ir, [n for c in part for n in (c.cg.name, c.cg.name + "_t")])
    return modules
