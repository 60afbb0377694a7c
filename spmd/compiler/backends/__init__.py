"""Code generation: a per-device Graph -> an executable `exe(inputs, comm) -> outputs`."""


def compile_graph(graph, backend="numpy"):
    if backend == "numpy":
        from .numpy import compile_numpy
        return compile_numpy(graph)
    raise ValueError(f"unknown compiler backend {backend!r} (takes 'numpy')")
