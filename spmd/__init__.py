"""spmd: write a numpy program once, shard a few arrays, run it on many devices.

SPMD_IMPORT_LAZY=1 (set for the worker processes of a private Ray's rank actors, which
run compiled programs and no user script): `import spmd` loads none of the API, which
loads whole at the first use of any of its names. A rank actor then starts without
importing the front end and eager mode (~0.5 s of CPU a rank while spmd.init waits);
what a program it runs needs loads when its pickle does.
"""
import os as _os

__version__ = "0.1.0"


def _load_api():
    from .errors import SpmdError, ShapeError, TraceError, ParseError, ShardingError, CollectiveError, CheckpointError  # noqa: F401,E501
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

    from . import random, numpy, debug  # noqa: F401  (spmd.random keys; spmd.numpy creation in jit; printing)
    from .ir.dtypes import bfloat16  # noqa: F401  (ml_dtypes.bfloat16, the 2-byte float jax uses)
    from . import eager  # noqa: F401  (numpy on spmd.Array runs sharded, eagerly)
    globals().update({k: v for k, v in locals().items()})


_LAZY = _os.environ.get("SPMD_IMPORT_LAZY") == "1"
if not _LAZY:
    _load_api()


def __getattr__(name):
    # the cost model's rates (spmd.Network, spmd.Link, spmd.Machine), loaded when first
    # asked for: `import spmd` loads no sharding module
    if name in ("Network", "Link", "Machine"):
        from .sharding import cost_model
        return getattr(cost_model, name)
    if _LAZY and not name.startswith("__") and "jit" not in globals():
        _load_api()
        if name in globals():
            return globals()[name]
    raise AttributeError(f"module 'spmd' has no attribute {name!r}")
