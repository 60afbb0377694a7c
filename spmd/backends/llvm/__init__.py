"""The LLVM backend: fused loop kernels compiled to native code, everything else by numpy.

compile_llvm(graph) plans fusion (passes/fuse.py), generates one LLVM function per kernel
(codegen.py), compiles the module once (jit.py, cached in memory and on disk) and returns
an LLVMExecutable with the numpy backend's interface: `exe(inputs, comm=None) -> outputs`.
"""
from .executable import LLVMExecutable, compile_llvm  # noqa: F401
