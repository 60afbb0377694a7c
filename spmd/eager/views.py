"""Which eager spmd.Arrays are views, and of what.

numpy returns a view from basic indexing, .T, transpose, reshape / ravel where the
strides allow, squeeze, expand_dims, ...: writes through the view reach its base, and
the view shows writes into the base. An eager result is a view when the one-op program
that made it says so (functionalize.is_view_of: the traced result shares its argument's
Buffer, exactly as traced code decides). It then records its *root* -- the array it is a
view of, never another view -- and the steps that derive it from the root. A step is
(builder, args, kwargs, leaf, at): leaf `leaf` (None: the result itself) of the builder
call the op made, with the viewed array at position `at` of its arguments and `args` the
others (np.einsum("ij->ji", x): x is at 1), so a program can run the chain again on the
root's current value (`derive`). The root keeps weak references to its views in
the order they were made; programs.py re-derives the live ones after every write.
"""
from __future__ import annotations

import itertools
import weakref

from ..tree import tree_flatten


_KEYS = itertools.count()


class View:
    __slots__ = ("root", "steps")

    def __init__(self, root, steps):
        self.root, self.steps = root, steps


def root_and_steps(a):
    """(the root a is a view of, the steps from it) -- (a, ()) for an array that is no view."""
    v = getattr(a, "_eager_view", None)
    return (v.root, v.steps) if v is not None else (a, ())


def is_view(a) -> bool:
    return getattr(a, "_eager_view", None) is not None


def record(result, source, step):
    """`result` is a view of `source` (an Array, maybe itself a view) through `step`."""
    root, steps = root_and_steps(source)
    result._eager_view = View(root, steps + (step,))
    refs = getattr(root, "_eager_views", None)
    if refs is None:
        refs = root._eager_views = {}
    # a dead view leaves the table at once (a loop over x[i] makes one a step)
    key = next(_KEYS)
    refs[key] = weakref.ref(result, lambda _, refs=refs, key=key: refs.pop(key, None))


def live_views(root) -> list:
    """The views of root still referenced, in the order they were made."""
    refs = getattr(root, "_eager_views", None) or {}
    return [v for v in (r() for r in list(refs.values())) if v is not None]


def derive(x, steps):
    """Inside a program: the view of the traced root x through steps."""
    for builder, args, kwargs, leaf, at in steps:
        r = builder(*args[:at], x, *args[at:], **kwargs)
        x = r if leaf is None else tree_flatten(r)[0][leaf]
    return x
