"""jit's first stage: a call's arguments -> its signature (the cache key) and its flat
argument leaves; which leaves are donated; arguments the function may write."""
from __future__ import annotations

import numpy as np

from ..errors import ConcreteValueError, SpmdError
from ..frontend import functionalize as fz
from ..frontend.trace import ShapeDtype, leaf_aval
from ..ir.dtypes import canon
from ..runtime.array import Array
from ..tree import tree_flatten

# the attributes an spmd.Array is made with (Array.__init__): one with more (eager mode's
# numpy_layout, numpy_scalar, view records) takes the general path
_PLAIN_ARRAY = 5


def dynamic(args, static_argnums) -> list:
    """The arguments that are arrays (not static configuration)."""
    if not static_argnums:
        return list(args)
    return [a for i, a in enumerate(args) if i not in static_argnums]


def signature(args, static_argnums):
    """(the cache key of a call, its flat argument leaves). The key holds the tree of the
    arguments, each leaf's shape, dtype and weak type, the static arguments, and each
    leaf's strides where numpy's views depend on them (a reshape is a view or a copy by
    the argument's strides). A call whose arguments are all plain arrays (C-ordered
    ndarrays, spmd.Arrays with nothing attached) has a shorter key, made without
    flattening (the per-call path of a training step)."""
    if not static_argnums:
        key = _plain_key(args)
        if key is not None:
            return key, list(args)
    leaves, tree = tree_flatten(dynamic(args, static_argnums))
    static = tuple(args[i] for i in static_argnums if i < len(args))
    avals, layouts = [], []
    for x in leaves:
        if type(x) is Array and len(x.__dict__) == _PLAIN_ARRAY:
            # (leaf_aval's and layout_key's answers for a plain Array, without their
            # attribute look-ups: a training step's parameters and optimizer slots)
            avals.append((x._shape, canon(x._dtype), False))
            layouts.append(None)
        else:
            avals.append(leaf_aval(x))
            layouts.append(fz.layout_key(x))
    return (tree, tuple(avals), static, tuple(layouts)), leaves


def _plain_key(args):
    """(shape, dtype) per argument when every argument is one plain array, else None. Such
    a call's general key would hold the same: a tree of leaves, no weak types, no strides."""
    out = []
    for x in args:
        t = type(x)
        if t is np.ndarray:
            if not x.flags.c_contiguous and x.ndim > 1:
                return None
        elif t is not Array or len(x.__dict__) != _PLAIN_ARRAY:
            return None
        out.append((x.shape, x.dtype))
    return ("plain", tuple(out))


def donated_leaves(args, static_argnums, donate_argnums) -> set:
    """The flat argument leaves of the donated arguments."""
    out, at = set(), 0
    for i, a in enumerate(args):
        if i in static_argnums:
            continue
        n = len(tree_flatten(a)[0])
        if i in donate_argnums:
            out.update(range(at, at + n))
        at += n
    return out


def mutable(leaf) -> bool:
    """An argument numpy could write into: an array (0-d too), not a Python or numpy scalar
    (an eager 0-d result that stands for numpy's scalar says so: numpy_scalar)."""
    return isinstance(leaf, (np.ndarray, ShapeDtype)) or \
        (hasattr(leaf, "sharding") and hasattr(leaf, "shape") and not isinstance(leaf, np.generic)
         and not getattr(leaf, "numpy_scalar", False))


def check_aliasing(fname, leaves, written):
    """numpy would show a write through one argument in another that shares its memory
    (f(a, a), f(a, a[1:])); traced arguments are separate values, so refuse instead."""
    for k in written:
        for j, other in enumerate(leaves):
            if j == k:
                continue
            a, b = leaves[k], other
            same = a is b or (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)
                              and np.may_share_memory(a, b))
            if same:
                raise SpmdError(f"spmd.jit: {fname} writes into argument leaf {k}, "
                                f"which shares memory with argument leaf {j}; numpy would show the write "
                                f"through both, spmd cannot. Pass a copy (x.copy()) or pass the array once.")


def is_scalar(x) -> bool:
    return isinstance(x, (bool, int, float, complex, np.generic))


def needed_value(e):
    """The ConcreteValueError that caused exception e (numpy may wrap it), or None."""
    seen = set()
    while e is not None and id(e) not in seen:
        if isinstance(e, ConcreteValueError):
            return e
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return None
