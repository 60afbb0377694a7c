"""Graph -> Graph passes. Each is a plain function; `optimize` is the pipeline jit runs
on the per-device program. Fusion (fuse.py) and memory planning (memory.py) are planned
by the backend that uses them, on the optimised graph.

With SPMD_DUMP=dir, every pass's result is written as text (`<name>.opt.<i>.<pass>.txt`).
"""
import os

from .combine import combine_collectives  # noqa: F401
from .cse import cse  # noqa: F401
from .dce import dce  # noqa: F401
from .simplify import simplify  # noqa: F401

PIPELINE = (("simplify", simplify), ("cse", cse), ("dce", dce), ("combine", combine_collectives))


def optimize(graph):
    dump = os.environ.get("SPMD_DUMP")
    for i, (name, p) in enumerate(PIPELINE):
        graph = p(graph)
        if dump:
            from ...ir.text import print_graph
            os.makedirs(dump, exist_ok=True)
            with open(os.path.join(dump, f"{graph.name}.opt.{i}.{name}.txt"), "w") as f:
                f.write(print_graph(graph))
    return graph
