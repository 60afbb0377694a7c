"""LLVM IR text -> native functions, through llvmlite: O3 for the host CPU (so loops vectorise
with the AVX2/AVX-512 it has), MCJIT, and a compile cache.

The cache is keyed by the IR's hash, the CPU name and features and the LLVM version. It
lives in memory (per process) and on disk as object files (compiler/disk_cache.py): a
second process loads the object code and skips optimisation and code generation.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import threading

import llvmlite
import llvmlite.binding as llvm

from ...errors import SpmdError
from ...compiler.disk_cache import cache_dir, enabled as disk_enabled, host_lock, read, write_atomic

_lock = threading.Lock()
_tm = None
_memory = {}            # key -> (engine, {name: address})


def target_machine():
    global _tm
    if _tm is None:
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        target = llvm.Target.from_default_triple()
        _tm = target.create_target_machine(cpu=llvm.get_host_cpu_name(),
                                           features=llvm.get_host_cpu_features().flatten(),
                                           opt=3, jit=True)
    return _tm


def module_key(ir: str) -> str:
    h = hashlib.sha256()
    for part in (ir, llvm.get_process_triple(), llvm.get_host_cpu_name(),
                 llvm.get_host_cpu_features().flatten(), llvmlite.__version__):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:32]


def optimize_module(mod, big=True):
    """O3 with vectorisation; unrolling and interleaving (which multiply code size and
    compile time by ~5) only for modules of big kernels, where they pay."""
    tm = target_machine()
    pto = llvm.create_pipeline_tuning_options(speed_level=3 if big else 2)
    pto.loop_vectorization = True
    pto.slp_vectorization = True
    pto.loop_unrolling = big
    pto.loop_interleaving = big
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)


class InvalidModule(SpmdError):
    """LLVM rejects a module the code generator wrote (a bug of spmd's, not the user's):
    `function` names the function it rejects."""

    def __init__(self, function, message):
        super().__init__(f"internal error: LLVM rejects the code generated for {function or 'a module'}: "
                         f"{message.strip()}")
        self.function, self.message = function, message


def verified(ir: str):
    """The parsed module of `ir`, checked by LLVM's verifier (an instruction used where it
    is not defined, a malformed block, ...), which raises InvalidModule naming the function."""
    try:
        mod = llvm.parse_assembly(ir)
        mod.verify()
    except RuntimeError as e:
        raise InvalidModule(_rejected_function(ir), str(e)) from None
    return mod


def _rejected_function(ir: str):
    """The first function of `ir` that LLVM rejects on its own (each checked with the
    module's declarations and attributes), or None."""
    lines = ir.split("\n")
    shared = [ln for ln in lines if ln.startswith(("declare ", "attributes ", "@", "%"))]
    start = None
    for i, ln in enumerate(lines):
        if ln.startswith("define "):
            start = i
        elif ln == "}" and start is not None:
            name = lines[start].split("@", 1)[1].split("(", 1)[0]
            try:
                llvm.parse_assembly("\n".join(shared + lines[start:i + 1])).verify()
            except RuntimeError:
                return name
            start = None
    return None


def compile_ir(ir: str, names, stats=None, big=True):
    """{name: function address} for the functions `names` of the module `ir`."""
    key = module_key(ir + ("" if big else "\n; small"))
    with _lock:
        hit = _memory.get(key)
        if hit is not None:
            if stats is not None:
                stats["cache"] = "memory"
            return hit[1]
        tm = target_machine()
        path = os.path.join(cache_dir(), key + ".o")
        obj = None
        use_disk = disk_enabled()
        # processes of one host (MPI ranks) compiling the same module: one compiles, the
        # others wait for its object file instead of all spending the same CPU at once
        with (host_lock(path) if use_disk else contextlib.nullcontext()):
            if use_disk:
                obj = read(path)
                if obj is not None and stats is not None:
                    stats["cache"] = "disk"
            if obj is None:
                mod = verified(ir)
                optimize_module(mod, big)
                obj = tm.emit_object(mod)
                if stats is not None:
                    stats["cache"] = "miss"
                    stats.setdefault("optimized_ir", []).append(str(mod))
                write_atomic(path, obj)
        engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), tm)
        engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
        engine.finalize_object()
        addrs = {n: engine.get_function_address(n) for n in names}
        _memory[key] = (engine, addrs)
        return addrs
