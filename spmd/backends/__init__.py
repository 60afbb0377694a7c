"""Code generation: a per-device Graph -> an executable `exe(inputs, comm) -> outputs`."""

BACKENDS = ("numpy", "llvm")


def compile_graph(graph, backend="numpy", donated=(), written=None, build=True):
    """`donated`: positions of inputs whose buffers the executable may write into (the
    caller gives it private, writeable buffers there and does not read them again).
    `written`: {output position: input position} of outputs that are new values of
    inputs the caller keeps (Executable.written). `build=False`: planned as it would
    run, without compiling code, for its memory figures (such an executable does not run)."""
    if backend == "numpy":
        from .numpy_backend import compile_numpy
        return compile_numpy(graph)
    if backend == "llvm":
        from .llvm import compile_llvm
        return compile_llvm(graph, donated=donated, written=written, build=build)
    raise ValueError(f"unknown compiler backend {backend!r} (takes 'numpy' or 'llvm')")


def planned_memory(graph, backend="numpy", donated=()):
    """What one run of `graph` holds, step by step, as `backend` would plan it
    (backends/memory_profile.py), without compiling it."""
    if backend == "numpy":
        from .memory_profile import profile_of_ops
        return profile_of_ops(graph)
    if backend == "llvm":
        from .llvm.plan import plan_program
        from .llvm.memory import memory_profile as planned
        from .llvm.lowering_table import writes_into
        plan = plan_program(graph, donated)
        return planned(graph, plan.steps, plan.memory, writes_into)
    raise ValueError(f"unknown compiler backend {backend!r} (takes 'numpy' or 'llvm')")
