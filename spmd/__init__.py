"""spmd: write a numpy program once, shard a few arrays, run it on many devices."""
from .errors import SpmdError, ShapeError, TraceError, ParseError, ShardingError, CollectiveError, CheckpointError  # noqa: F401
from .errors import MemoryLimitError  # noqa: F401
from .errors import ConcreteValueError, FallbackWarning, ReshardWarning  # noqa: F401
from .api import jit, plan, ShapeDtype, Lowered, shard, explain, grad, value_and_grad  # noqa: F401
from .frontend.control import while_loop, fori_loop, cond, scan  # noqa: F401
from .frontend.remat import checkpoint, checkpoint_name, checkpoint_policies  # noqa: F401
from .tree import tree_flatten, tree_unflatten, tree_map  # noqa: F401
from .ir import AUTO, Mesh, Sharding  # noqa: F401
from .tools.visualize import visualize  # noqa: F401
from .runtime.checkpoint import save, load, latest as latest_checkpoint  # noqa: F401
from .runtime import Array, device_put, init, process_index, process_count, device_count  # noqa: F401
from .runtime import make_array_from_process_local_data, process_allgather  # noqa: F401

from . import random, numpy, debug  # noqa: F401,E402  (spmd.random keys; spmd.numpy creation in jit; printing)
from .ir.dtypes import bfloat16  # noqa: F401,E402  (ml_dtypes.bfloat16, the 2-byte float jax uses)

__version__ = "0.1.0"
from . import eager  # noqa: F401,E402  (numpy on spmd.Array runs sharded, eagerly)


def __getattr__(name):
    # the cost model's rates (spmd.Network, spmd.Link, spmd.Machine), loaded when first
    # asked for: `import spmd` loads no sharding module
    if name in ("Network", "Link", "Machine"):
        from .sharding import cost_model
        return getattr(cost_model, name)
    raise AttributeError(f"module 'spmd' has no attribute {name!r}")
