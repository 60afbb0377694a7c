"""Graph -> Graph passes. Each is a plain function; `optimize` is the pipeline jit runs
on the per-device program."""
from .dce import dce  # noqa: F401


def optimize(graph):
    return dce(graph)
