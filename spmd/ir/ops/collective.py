"""Collective ops: communication between the devices of a mesh-axis group.

They exist only in per-device programs (the partitioner inserts them; the global program
never holds one), so they have no sharding factor rule (`factors=None`) and are marked
`family="collective"`, `needs_comm=True`: the executable hands their `ref` the rank's
Communicator (spmd/transports/communicator.py), `ref(*operands, comm=comm, **attrs)`.

Every collective names the mesh `axes` it runs over (major to minor) and, so that the
per-device program's shapes can be inferred without a mesh, the `group_size` G (the
product of those axes' sizes; checked against the mesh when it runs). With i this
rank's index in its group:

    all_reduce(x)         {axes, reduction, group_size}           -> x.shape
    all_gather(x)         {axes, dimension, group_size}           -> shape[dimension] * G
    reduce_scatter(x)     {axes, dimension, reduction, group_size} -> shape[dimension] / G
    all_to_all(x)         {axes, split_dimension, concat_dimension, group_size}
                          -> shape[split] / G, shape[concat] * G
    collective_permute(x) {axes, pairs=((src, dst), ...), group_size} -> x.shape
                          (group indices; a rank that no pair names as dst gets zeros;
                          a src may send to several dsts, a dst hears from one src)
    axis_index()          {axes} -> int64 scalar i

    all_reduce_start(x)   {axes, reduction, group_size}           -> int64[] handle
    all_reduce_done(h, x) {axes, reduction, group_size}           -> x.shape

The last two are an all_reduce in two halves (XLA's async start/done pair), made by
passes/schedule_async.py after the combiner: the start hands x to the communicator and returns
at once with a handle (this rank's number for the call in flight); the done waits for it
and returns the reduced array. The done takes x too, so that x stays alive (its buffer
neither freed nor reused) while the reduction is in flight. Every rank starts them in
the same order (they run the same program), as MPI requires of nonblocking collectives.

`reduction` is sum | max | min | prod; on bool, sum and max are `or`, prod and min `and`
(numpy's add / multiply on bools).

VJPs are those of the per-device program (each rank's loss summed over ranks): the
transpose of all_gather is reduce_scatter(sum) and vice versa, all_reduce(sum) is its
own transpose, all_to_all's swaps split and concat, a permute's reverses its pairs.
"""
from __future__ import annotations

import numpy as np

from ...errors import SpmdError
from .elementwise import ALL, aval
from .names import (
    ADD, ALL_GATHER, ALL_REDUCE, ALL_REDUCE_DONE, ALL_REDUCE_START, ALL_TO_ALL, COLLECTIVE_PERMUTE,
    COMPARE, CONVERT, DIVIDE, MULTIPLY, REDUCE_SCATTER
)
from .registry import Collective, OpDef, check, register

REDUCTIONS = ("sum", "max", "min", "prod")


def norm_axes(axes) -> tuple:
    """A str (one axis) or a sequence of axis names -> tuple of names."""
    return (axes,) if isinstance(axes, str) else tuple(axes)


def _check_group(axes, group_size):
    axes = norm_axes(axes)
    check(all(isinstance(a, str) for a in axes) and len(set(axes)) == len(axes),
          f"axes {axes} must be distinct mesh axis names")
    check(isinstance(group_size, int) and group_size >= 1, f"group_size {group_size!r} must be a positive int")


def _check_dim(x, d, what):
    check(isinstance(d, int) and 0 <= d < len(x.shape), f"{what} {d!r} is not a dim of rank-{len(x.shape)} operand")


def _comm(name, comm, axes, group_size):
    """The communicator, after checking the op's group_size against its mesh."""
    if comm is None:
        raise SpmdError(f"{name} needs a communicator: run the per-device program on a runtime "
                        f"(spmd.jit with a mesh), not on its own")
    axes = norm_axes(axes)
    if group_size is not None and comm.mesh.axes_size(axes) != group_size:
        raise SpmdError(f"{name} over axes {axes} was built for groups of {group_size} devices, but on "
                        f"{comm.mesh.text()} the group has {comm.mesh.axes_size(axes)}")
    return comm, axes


# -- all_reduce ---------------------------------------------------------------------------
def _ar_infer(x, axes, reduction, group_size):
    _check_group(axes, group_size)
    check(reduction in REDUCTIONS, f"unknown reduction {reduction!r} (takes {', '.join(REDUCTIONS)})")
    return aval(x.shape, x.dtype)


def _ar_ref(x, comm=None, *, axes, reduction, group_size, out=None):
    comm, axes = _comm("all_reduce", comm, axes, group_size)
    if out is None:
        return comm.all_reduce(x, axes, op=reduction)
    return comm.all_reduce(x, axes, op=reduction, out=out)


def _ar_vjp(g, op, ct):
    a = op.attrs
    kind = a["reduction"]
    total = g.emit(ALL_REDUCE, ct, axes=a["axes"], reduction="sum", group_size=a["group_size"])
    if kind == "sum":
        return (total,)
    if kind in ("max", "min"):
        # to the elements equal to the result, split evenly among ties across the group
        x = op.operands[0]
        mask = g.emit(CONVERT, g.emit(COMPARE, x, op.result, direction="EQ"), dtype=x.dtype)
        count = g.emit(ALL_REDUCE, mask, axes=a["axes"], reduction="sum", group_size=a["group_size"])
        return (g.emit(MULTIPLY, g.emit(DIVIDE, total, count), mask),)
    raise SpmdError("all_reduce with reduction 'prod' has no derivative")


# -- all_reduce_start / all_reduce_done ---------------------------------------------------------
def _ars_infer(x, axes, reduction, group_size):
    _ar_infer(x, axes, reduction, group_size)
    return aval((), "int64")


def _ars_ref(x, comm=None, *, axes, reduction, group_size):
    comm, axes = _comm("all_reduce_start", comm, axes, group_size)
    return np.array(comm.all_reduce_start(x, axes, op=reduction), dtype=np.int64)


def _ard_infer(h, x, axes, reduction, group_size):
    check(h.shape == () and h.dtype == "int64", f"all_reduce_done takes the int64[] handle of its start, "
                                                 f"not {h.dtype}{list(h.shape)}")
    return _ar_infer(x, axes, reduction, group_size)


def _ard_ref(h, x, comm=None, *, axes, reduction, group_size):
    comm, axes = _comm("all_reduce_done", comm, axes, group_size)
    return comm.wait(int(h))


# -- all_gather / reduce_scatter -------------------------------------------------------------
def _ag_infer(x, axes, dimension, group_size):
    _check_group(axes, group_size)
    _check_dim(x, dimension, "dimension")
    shape = list(x.shape)
    shape[dimension] *= group_size
    return aval(shape, x.dtype)


def _ag_ref(x, comm=None, *, axes, dimension, group_size, out=None):
    comm, axes = _comm("all_gather", comm, axes, group_size)
    return comm.all_gather(x, axes, dim=dimension, out=out)


def _ag_vjp(g, op, ct):
    a = op.attrs
    return (g.emit(REDUCE_SCATTER, ct, axes=a["axes"], dimension=a["dimension"], reduction="sum",
                   group_size=a["group_size"]),)


def _rs_infer(x, axes, dimension, reduction, group_size):
    _check_group(axes, group_size)
    _check_dim(x, dimension, "dimension")
    check(reduction in REDUCTIONS, f"unknown reduction {reduction!r} (takes {', '.join(REDUCTIONS)})")
    check(x.shape[dimension] % group_size == 0,
          f"dimension {dimension} of size {x.shape[dimension]} does not split into {group_size} equal blocks")
    shape = list(x.shape)
    shape[dimension] //= group_size
    return aval(shape, x.dtype)


def _rs_ref(x, comm=None, *, axes, dimension, reduction, group_size, out=None):
    comm, axes = _comm("reduce_scatter", comm, axes, group_size)
    return comm.reduce_scatter(x, axes, dim=dimension, op=reduction, out=out)


def _rs_vjp(g, op, ct):
    a = op.attrs
    if a["reduction"] != "sum":
        raise SpmdError(f"reduce_scatter with reduction {a['reduction']!r} has no derivative")
    return (g.emit(ALL_GATHER, ct, axes=a["axes"], dimension=a["dimension"], group_size=a["group_size"]),)


# -- all_to_all ------------------------------------------------------------------------------
def _a2a_infer(x, axes, split_dimension, concat_dimension, group_size):
    _check_group(axes, group_size)
    _check_dim(x, split_dimension, "split_dimension")
    _check_dim(x, concat_dimension, "concat_dimension")
    check(x.shape[split_dimension] % group_size == 0,
          f"split_dimension {split_dimension} of size {x.shape[split_dimension]} does not split into "
          f"{group_size} equal blocks")
    shape = list(x.shape)
    shape[split_dimension] //= group_size
    shape[concat_dimension] *= group_size
    return aval(shape, x.dtype)


def _a2a_ref(x, comm=None, *, axes, split_dimension, concat_dimension, group_size, out=None):
    comm, axes = _comm("all_to_all", comm, axes, group_size)
    return comm.all_to_all(x, axes, split_dimension, concat_dimension, out=out)


def _a2a_vjp(g, op, ct):
    a = op.attrs
    return (g.emit(ALL_TO_ALL, ct, axes=a["axes"], split_dimension=a["concat_dimension"],
                   concat_dimension=a["split_dimension"], group_size=a["group_size"]),)


def _a2a_blocks_along(attrs):
    d = attrs["concat_dimension"]
    return None if d == 0 else (dict(attrs, concat_dimension=0), d, attrs["group_size"])


# a gather along a dim other than the first concatenates the received blocks into its
# result; a scatter's (or an all-to-all's) split along one copies the operand into blocks
def _ag_repacked(attrs):
    return 0, int(attrs["dimension"] != 0)


def _rs_repacked(attrs):
    return int(attrs["dimension"] != 0), 0


def _a2a_repacked(attrs):
    return int(attrs["split_dimension"] != 0), int(attrs["concat_dimension"] != 0)


# -- collective_permute ----------------------------------------------------------------------
def check_pairs(pairs, group_size):
    """(src, dst) group indices in range; no dst named twice."""
    pairs = tuple(tuple(p) for p in pairs)
    check(all(len(p) == 2 and all(isinstance(i, int) and 0 <= i < group_size for i in p) for p in pairs),
          f"pairs {pairs} must be (src, dst) group indices in [0, {group_size})")
    dsts = [d for _, d in pairs]
    check(len(set(dsts)) == len(dsts), f"pairs {pairs} name a destination twice")
    return pairs


def _cp_infer(x, axes, pairs, group_size):
    _check_group(axes, group_size)
    check_pairs(pairs, group_size)
    return aval(x.shape, x.dtype)


def _cp_ref(x, comm=None, *, axes, pairs, group_size):
    comm, axes = _comm("collective_permute", comm, axes, group_size)
    return comm.permute(x, axes, pairs)


def _cp_vjp(g, op, ct):
    """Reverse the pairs. A src that sent to several dsts receives their cotangents'
    sum: one reversed permute per layer of distinct destinations, added."""
    a = op.attrs
    layers = []
    for s, d in a["pairs"]:
        for layer in layers:
            if s not in {dst for _, dst in layer}:
                layer.append((d, s))
                break
        else:
            layers.append([(d, s)])
    if not layers:
        return (g.emit(MULTIPLY, ct, _zeros(g, ct)),)
    out = None
    for layer in layers:
        p = g.emit(COLLECTIVE_PERMUTE, ct, axes=a["axes"], pairs=tuple(sorted(layer)),
                   group_size=a["group_size"])
        out = p if out is None else g.emit(ADD, out, p)
    return (out,)


def _zeros(g, v):
    from .elementwise import const_like
    return const_like(g, v, 0)


# -- axis_index ------------------------------------------------------------------------------
def _ai_infer(axes):
    axes = norm_axes(axes)
    check(all(isinstance(a, str) for a in axes) and len(set(axes)) == len(axes),
          f"axes {axes} must be distinct mesh axis names")
    return aval((), "int64")


def _ai_ref(comm=None, *, axes):
    if comm is None:
        raise SpmdError("axis_index needs a communicator: run the per-device program on a runtime")
    return np.array(comm.group_index(norm_axes(axes)), dtype=np.int64)


def _ai_device_values(mesh, axes):
    axes = norm_axes(axes)
    return np.array([mesh.index_in_group(r, axes) for r in range(mesh.size)], dtype=np.int64)


def _no_flops(ins, out, attrs):
    return 0


# all_reduce and collective_permute work element by element: several with equal
# attributes may run as one (on the concatenation of their operands: passes/combine.py)
for _name, _infer, _ref, _vjp, _combinable, _reshards, _device_values in (
        ("all_reduce", _ar_infer, _ar_ref, _ar_vjp, True,
         "sum the partial results of a contraction/reduction over a split dim", None),
        ("all_gather", _ag_infer, _ag_ref, _ag_vjp, False, "the consumer needs a split dim whole", None),
        ("reduce_scatter", _rs_infer, _rs_ref, _rs_vjp, False, "sum partial results and keep them split", None),
        ("all_to_all", _a2a_infer, _a2a_ref, _a2a_vjp, False, "move a split from one dim to another", None),
        ("collective_permute", _cp_infer, _cp_ref, _cp_vjp, True,
         "exchange halos across shard borders (shifted slice/pad/concat)", None),
        ("axis_index", _ai_infer, _ai_ref, None, False, None, _ai_device_values)):
    _reduces = _name == "all_reduce"
    register(OpDef(_name, family="collective", infer=_infer, ref=_ref, vjp=_vjp, factors=None, flops=_no_flops,
                   dtypes=ALL, needs_comm=True,
                   # these write into a buffer they are given (the memory plan places it),
                   # all_reduce into its operand's too (in place)
                   takes_out=_name in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all"),
                   # (a backend may run a permute, or a value known from the rank, natively)
                   lowering={"collective_permute": "permute", "axis_index": "device_value",
                             "all_reduce": "group_reduce", "all_gather": "group_gather",
                             "reduce_scatter": "group_reduce_scatter", "all_to_all": "group_all_to_all"}[_name],
                   device_values=_device_values,
                   collective=Collective(combinable=_combinable, reshards=_reshards,
                                         async_pair=(ALL_REDUCE_START, ALL_REDUCE_DONE) if _reduces else None,
                                         out_may_be_operand=0 if _reduces else None,
                                         exchange=_name == "collective_permute",
                                         blocks_along=_a2a_blocks_along if _name == "all_to_all" else None,
                                         repacked={"all_gather": _ag_repacked, "reduce_scatter": _rs_repacked,
                                                   "all_to_all": _a2a_repacked}.get(_name))))

# the halves of an all_reduce (passes/schedule_async.py): they exist only in optimised programs,
# after differentiation, so they have no VJP
register(OpDef("all_reduce_start", family="collective", infer=_ars_infer, ref=_ars_ref, factors=None, flops=_no_flops,
               dtypes=ALL, needs_comm=True, lowering="group_reduce_start",
               collective=Collective(phase="start", async_of=ALL_REDUCE)))
register(OpDef("all_reduce_done", family="collective", infer=_ard_infer, ref=_ard_ref, factors=None, flops=_no_flops,
               dtypes=ALL, needs_comm=True, lowering="group_reduce_done",
               collective=Collective(phase="done", async_of=ALL_REDUCE)))
