"""The user API, above every layer: `jit` (trace once per input signature, run the
stages of docs/design.md, cache the result: the spmd/jit package), `shard`, `explain`, and
`grad` / `value_and_grad` outside of tracing.
"""
from __future__ import annotations

import functools

from .eager.programs import write_back
from .errors import ShardingError, SpmdError
from .frontend import autodiff
from .frontend.trace import ShapeDtype, current_trace
from .ir.mesh import Sharding
from .jit import Jitted, Lowered
from .tracebacks import install as install_excepthook

# an uncaught error prints the user's frames, not the twenty of spmd's between them
# (tracebacks.py; SPMD_TRACEBACK=full prints all); a program's own hook is kept
install_excepthook()


def jit(fn=None, *, in_shardings=None, out_shardings=None, mesh=None, backend=None, static_argnums=(),
        donate_argnums=(), memory_limit=None, fallback=True, network=None):
    """Compile `fn` (a numpy function) for a mesh of devices: traced once per input
    signature, partitioned, compiled, cached; calling the result runs the program.

    `in_shardings` / `out_shardings`: how the arguments / results are split, a pytree
    prefix of them with a `Sharding` (mesh.sharding("data", None)), a bare spec tuple when
    the mesh is known, `None` to infer (an spmd.Array keeps its own), or `spmd.AUTO`
    (at the top or at any leaf): spmd chooses, by its cost model, keeping every sharding
    given and every spmd.shard inside as constraints (`lowered.shardings()` prints the
    choice as code to paste, `lowered.explain()` says why). `mesh`: the mesh when
    no sharding names one. `network`: an spmd.Network (links' latency and bandwidth)
    for the cost model; by default this machine's. `backend`: "llvm" (fused native kernels, the default) or
    "numpy" (the reference). `static_argnums`: positions of arguments that are
    configuration, not arrays (part of the cache key, passed as they are).

    `donate_argnums` (jax's meaning): the spmd.Array arguments at these positions give
    their buffers to the program, which may compute outputs (or temporaries) in them; the
    donated Arrays are invalid afterwards (using one raises). A numpy argument is copied
    for the program instead (its owner keeps it).

    `memory_limit`: bytes per device. The compiler recomputes values the program would
    hold (activations kept for the backward pass, gathered parameters) until its planned
    peak fits, or raises MemoryLimitError before anything runs, naming what is live at
    the peak and the user lines that made it.

    `fallback`: where tracing needs a value of the data (float(), `if` on data, .item(),
    np.nonzero's size), compile the part before, run it and trace the rest with the value
    (a graph break, jit/graph_breaks.py), with a FallbackWarning naming the line; where breaks
    would not pay, run the function eagerly on the sharded arrays. fallback=False raises
    the ConcreteValueError instead."""
    if fn is None:
        return lambda f: jit(f, in_shardings=in_shardings, out_shardings=out_shardings, mesh=mesh,
                             backend=backend, static_argnums=static_argnums, donate_argnums=donate_argnums,
                             memory_limit=memory_limit, fallback=fallback, network=network)
    # an spmd.Array argument the function writes takes the new value as eager writes do:
    # the write reaches the base of an eager view, and the array's views see it
    return Jitted(fn, in_shardings, out_shardings, mesh, backend, static_argnums, donate_argnums,
                  write_array=write_back, memory_limit=memory_limit, fallback=fallback, network=network)


def plan(fn, *args, mesh, in_shardings=None, out_shardings=None, network=None, memory_limit=None,
         static_argnums=()):
    """Plan `fn` for `mesh` on paper: the mesh need not exist here (spmd.Mesh((64, 8),
    ("data", "model")) is 512 devices), nothing starts and nothing runs. `args` are arrays
    or spmd.ShapeDtype(shape, dtype). `in_shardings` defaults to spmd.AUTO (spmd chooses);
    `network` (an spmd.Network) says how the devices are connected (default: this
    machine's, from `spmd doctor --calibrate`). Returns the Lowered program:
    `.cost()` the predicted step time, bytes per collective and peak memory per device,
    `.shardings()` the plan as code, `.report()`, `.memory()`, `.explain()`."""
    from .ir.mesh import AUTO
    return Jitted(fn, AUTO if in_shardings is None else in_shardings, out_shardings, mesh, None,
                  static_argnums, (), memory_limit=memory_limit, fallback=False, network=network).lower(*args)


# -- shard, explain, grad: the rest of the user API ----------------------------------------
def shard(x, sharding):
    """Pin x's sharding. Inside spmd.jit: an annotation propagation must keep. Outside:
    place the array on the devices (spmd.device_put)."""
    if current_trace() is None:
        from .runtime import device_put
        if not isinstance(sharding, Sharding):
            raise ShardingError("spmd.shard outside of jit needs a Sharding (mesh.sharding(...))")
        return device_put(x, sharding)
    from .frontend.annotate import shard_traced
    return shard_traced(x, sharding)


def explain(f, *args, verbose=False, file=None, **jit_kwargs) -> str:
    """Print and return the explanation for `f` (a function or an spmd.jit object): one
    line per collective (op, bytes, user line, why, the annotation it comes from) and
    one per annotation, and the peak memory per device; verbose=True adds where every
    value's sharding came from and the largest values live at the peak."""
    j = f if isinstance(f, Jitted) else jit(f, **jit_kwargs)
    return j.lower(*args).explain(file=file, verbose=verbose)


def value_and_grad(f, argnums=0, has_aux=False):
    """(f(*args), df/d args[argnums]) for a function f returning a float scalar. Inside
    tracing it emits the backward pass into the current graph (frontend/autodiff.py);
    outside, it runs under its own jit (traced once per input signature)."""
    traced = autodiff.value_and_grad(f, argnums, has_aux)
    eager = {}

    @functools.wraps(f)
    def wrapped(*args, **kwargs):
        if current_trace() is not None:
            return traced(*args, **kwargs)
        # (traced emits the backward pass into a trace: it cannot run eagerly)
        if kwargs:      # jit takes positional leaves; keyword arguments are baked in
            return jit(lambda *a: traced(*a, **kwargs), fallback=False)(*args)
        if "jit" not in eager:
            eager["jit"] = jit(traced, fallback=False)
        return eager["jit"](*args)

    return wrapped


def grad(f, argnums=0, has_aux=False):
    """df/d args[argnums] (and aux, with has_aux=True); see value_and_grad."""
    vg = value_and_grad(f, argnums, has_aux)

    @functools.wraps(f)
    def wrapped(*args, **kwargs):
        out, g = vg(*args, **kwargs)
        return (g, out[1]) if has_aux else g

    return wrapped


__all__ = ["jit", "Jitted", "Lowered", "ShapeDtype", "SpmdError", "shard", "explain", "grad", "value_and_grad"]
