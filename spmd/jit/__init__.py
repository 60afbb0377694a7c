"""jit's stages as a package (see jitted.py for the path of a call): a function and its
arguments -> a traced Graph -> every stage's Graph (a `Lowered`) -> a declared Program
the runtime runs. Nothing outside this package reads or writes a Lowered's or a
Jitted's attributes: the runtime gets a Program (runtime/program.py), sharding/ gets
plain values (sharding/jit_shardings.py's Given), explain and report get the stages' graphs.

(`spmd.jit`, the user's function, is api.jit: the package is imported before it, so the
name spmd.jit stays the function.)
"""
from . import arguments, compiling, graph_breaks, placing, running, tracing  # noqa: F401
from .jitted import Jitted
from .lowering import Lowered
from .tracing import trace_function

__all__ = ["Jitted", "Lowered", "trace_function"]
