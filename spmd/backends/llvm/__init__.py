"""The LLVM backend: fused loop kernels compiled to native code, everything else by numpy.

compile_llvm(graph) plans the program (plan.py: fusion in fuse.py, one LLVM function per
kernel from codegen.py, the memory plan in memory.py), compiles the kernels once (jit.py,
cached in memory and on disk) and returns an LLVMExecutable (executable.py) with the numpy
backend's interface: `exe(inputs, comm=None) -> outputs`. How each kind of op is lowered is
one table, lowering_table.py.
"""
from .executable import LLVMExecutable, compile_llvm  # noqa: F401
