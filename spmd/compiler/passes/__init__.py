"""Graph -> Graph passes. Each is a plain function; compiler/pipeline.py runs them as
named stages (OPTIMIZE there is the list jit runs on the per-device program). Fusion
(fuse.py) and memory planning (memory.py) are planned by the backend that uses them.
"""
from .barriers import drop_barriers  # noqa: F401
from .blocks_late import blocks_late  # noqa: F401
from . import budget  # noqa: F401
from .combine import combine_collectives  # noqa: F401
from .cse import cse  # noqa: F401
from .dce import dce  # noqa: F401
from .exchanges_late import exchanges_late  # noqa: F401
from .hoist import hoist_invariants  # noqa: F401
from .inline import inline_calls  # noqa: F401
from .frees_first import frees_first  # noqa: F401
from .late_reads import recompute_late_reads  # noqa: F401
from .regather import regather  # noqa: F401
from .remat import rematerialize  # noqa: F401
from .roll import roll_loops  # noqa: F401
from .schedule_async import schedule_async  # noqa: F401
from .simplify import simplify  # noqa: F401


def optimize(graph):
    """The optimisation passes alone (for tests and tools): simplify, cse, dce."""
    for p in (simplify, cse, dce):
        graph = p(graph)
    return graph
