"""The argument checks of every collective, made once for all transports by the
Communicator base (communicator.py) before a transport sees the call: a call that is
wrong on its face (an axis the mesh does not have, a reduction that does not exist, a
dim the array does not have or that does not split into the group's blocks, a permute
pair or broadcast root outside the group, an `out` of the wrong shape or dtype, an array
of Python objects) raises the same CollectiveError on every transport, on every rank,
before any rank waits for another. Each message starts with what was called: the
collective, its axes and the user's line when the executable set it. `what` is a function
that says it, called only to raise (the checks run on every call, and most calls pass)."""
from __future__ import annotations

import numpy as np

from ..errors import CollectiveError

REDUCE_OPS = ("sum", "max", "min", "prod")


def axes_of(axes):
    return (axes,) if isinstance(axes, str) else tuple(axes)


def as_input(x):
    # no copy for the usual contiguous ndarray: the done-rendezvous keeps it alive and
    # unmodified until every rank has read it (np.ascontiguousarray would make 0-d 1-d)
    x = np.asarray(x)
    return x if x.flags.c_contiguous else np.ascontiguousarray(x)


def check_axes(what, mesh, axes):
    """axes as a tuple of distinct axis names of mesh."""
    names = axes_of(axes)
    unknown = [a for a in names if a not in mesh.axis_names]
    if unknown or len(set(names)) != len(names):
        raise CollectiveError(f"{what()}: axes {names} must be distinct axes of the mesh, which has "
                              f"{tuple(mesh.axis_names)}")
    return names


def check_dtype(what, x):
    if x.dtype.kind in "biufc":
        return
    if x.dtype.hasobject or x.dtype.kind in "SU" or x.dtype.fields is not None:
        raise CollectiveError(f"{what()}: an array of dtype {x.dtype} cannot travel; collectives take "
                              f"arrays of numbers or bools")


def check_op(what, op):
    if op not in REDUCE_OPS:
        raise CollectiveError(f"{what()}: unknown reduction {op!r} (takes {', '.join(REDUCE_OPS)})")


def check_dim(what, x, dim, G=None):
    if not (isinstance(dim, (int, np.integer)) and not isinstance(dim, bool) and 0 <= dim < x.ndim):
        raise CollectiveError(f"{what()}: dim {dim!r} is not a dim of a rank-{x.ndim} array {list(x.shape)}")
    if G is not None and x.shape[dim] % G:
        raise CollectiveError(f"{what()}: dim {dim} of {list(x.shape)} does not split into {G} equal blocks")


def check_pairs(what, pairs, G):
    """pairs as sorted (src, dst) group indices, each dst named at most once."""
    try:
        pairs = tuple(sorted((int(s), int(d)) for s, d in pairs))
    except (TypeError, ValueError):
        raise CollectiveError(f"{what()}: pairs {pairs!r} must be (src, dst) pairs of group indices") from None
    dsts = [d for _, d in pairs]
    if any(not (0 <= k < G) for p in pairs for k in p) or len(set(dsts)) != len(dsts):
        raise CollectiveError(f"{what()}: pairs {pairs} must be (src, dst) group indices in [0, {G}) naming "
                              f"each dst at most once")
    return pairs


def check_root(what, root, G):
    if not (isinstance(root, (int, np.integer)) and not isinstance(root, bool) and 0 <= root < G):
        raise CollectiveError(f"{what()}: root {root!r} is not a group index in [0, {G})")
    return int(root)


def check_out(what, out, shape, dtype):
    """`out`, when given, must be an array of the result's shape and dtype: the result is
    written into it, and a broadcast or cast there would be a wrong answer, silently."""
    if out is None:
        return
    if not isinstance(out, np.ndarray) or out.shape != tuple(shape) or out.dtype != dtype:
        got = f"{out.dtype}{list(out.shape)}" if isinstance(out, np.ndarray) else type(out).__name__
        raise CollectiveError(f"{what()}: out is {got}, the result is {np.dtype(dtype)}{list(shape)}")
