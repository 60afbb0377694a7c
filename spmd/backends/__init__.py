"""Code generation: a per-device Graph -> an executable `exe(inputs, comm) -> outputs`."""

BACKENDS = ("numpy", "llvm")


def compile_graph(graph, backend="numpy", donated=(), written=None):
    """`donated`: positions of inputs whose buffers the executable may write into (the
    caller gives it private, writeable buffers there and does not read them again).
    `written`: {output position: input position} of outputs that are new values of
    inputs the caller keeps (Executable.written)."""
    if backend == "numpy":
        from .numpy import compile_numpy
        return compile_numpy(graph)
    if backend == "llvm":
        from .llvm import compile_llvm
        return compile_llvm(graph, donated=donated, written=written)
    raise ValueError(f"unknown compiler backend {backend!r} (takes 'numpy' or 'llvm')")
