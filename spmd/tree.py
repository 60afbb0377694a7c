"""Pytrees: nested dict / list / tuple / named tuple / None with array leaves, as in JAX.
Dict keys are visited in sorted order so the flattening is deterministic. A named tuple
is rebuilt as its own class (numpy's QRResult stays a QRResult), unless its class says
it is a leaf (`tree_leaf = True`: spmd.ShapeDtype describes one array)."""
from __future__ import annotations


class TreeDef:
    __slots__ = ("kind", "meta", "children", "_k")

    def __init__(self, kind, meta=None, children=()):
        self.kind, self.meta, self.children = kind, meta, tuple(children)
        self._k = None

    def _key(self):
        # jit hashes the argument tree on every call: computed once per TreeDef
        if self._k is None:
            self._k = (self.kind, self.meta, tuple(c._key() for c in self.children))
        return self._k

    def __eq__(self, other):
        return isinstance(other, TreeDef) and self._key() == other._key()

    def __hash__(self):
        return hash(self._key())

    @property
    def num_leaves(self):
        if self.kind == "leaf":
            return 1
        return sum(c.num_leaves for c in self.children)

    def __repr__(self):
        if self.kind == "leaf":
            return "*"
        if self.kind == "none":
            return "None"
        inner = ", ".join(map(repr, self.children))
        if self.kind == "dict":
            return "{" + ", ".join(f"{k!r}: {c!r}" for k, c in zip(self.meta, self.children)) + "}"
        if self.kind == "namedtuple":
            return f"{self.meta.__name__}({inner})"
        return f"[{inner}]" if self.kind == "list" else f"({inner})"


# one TreeDef for every leaf and every None (a TreeDef is not changed once made): a call
# of jit flattens and hashes its arguments' tree, a training step's has a leaf per parameter
LEAF = TreeDef("leaf")
NONE = TreeDef("none")


def tree_flatten(tree, is_leaf=None):
    leaves = []
    return leaves, _flatten(tree, is_leaf, leaves)


# (module-level recursion, not a recursive closure: a closure that refers to itself is a
# reference cycle, which would keep every leaf alive until the cyclic garbage collector
# runs -- and eager mode re-derives the views still alive after each write)
def _flatten(t, is_leaf, leaves):
    if is_leaf is not None and is_leaf(t):
        leaves.append(t)
        return LEAF
    if t is None:
        return NONE
    if isinstance(t, dict):
        keys = tuple(sorted(t))
        return TreeDef("dict", keys, [_flatten(t[k], is_leaf, leaves) for k in keys])
    if isinstance(t, tuple) and not hasattr(t, "_fields"):
        return TreeDef("tuple", None, [_flatten(x, is_leaf, leaves) for x in t])
    if isinstance(t, tuple) and not getattr(type(t), "tree_leaf", False):
        return TreeDef("namedtuple", type(t), [_flatten(x, is_leaf, leaves) for x in t])
    if isinstance(t, list):
        return TreeDef("list", None, [_flatten(x, is_leaf, leaves) for x in t])
    leaves.append(t)
    return LEAF


def tree_unflatten(treedef: TreeDef, leaves):
    it = iter(leaves)
    out = _unflatten(treedef, it)
    rest = list(it)
    if rest:
        raise ValueError(f"tree_unflatten: {len(rest)} leaves left over")
    return out


def _unflatten(td, it):
    if td.kind == "leaf":
        return next(it)
    if td.kind == "none":
        return None
    kids = [_unflatten(c, it) for c in td.children]
    if td.kind == "dict":
        return dict(zip(td.meta, kids))
    if td.kind == "namedtuple":
        return td.meta(*kids)
    return kids if td.kind == "list" else tuple(kids)


def tree_map(f, tree, *rest, is_leaf=None):
    leaves, td = tree_flatten(tree, is_leaf)
    others = [tree_flatten(r, is_leaf)[0] for r in rest]
    return tree_unflatten(td, [f(*xs) for xs in zip(leaves, *others)])


def tree_leaves(tree, is_leaf=None):
    return tree_flatten(tree, is_leaf)[0]


def broadcast_prefix(prefix, tree, is_leaf=None):
    """Expand `prefix` (a tree whose leaves stand for whole subtrees of `tree`) to one entry
    per leaf of `tree`: how in_shardings=... applies one sharding to a dict of params."""
    out = []

    def go(p, t):
        if p is None or (is_leaf is not None and is_leaf(p)) or not isinstance(p, (dict, list, tuple)):
            out.extend([p] * len(tree_leaves(t, is_leaf)))
            return
        if isinstance(p, dict):
            if not isinstance(t, dict) or set(p) != set(t):
                raise ValueError(f"sharding tree {p!r} does not match the argument's structure")
            for k in sorted(p):
                go(p[k], t[k])
            return
        if not isinstance(t, (list, tuple)) or len(p) != len(t):
            raise ValueError(f"sharding tree {p!r} does not match the argument's structure")
        for a, b in zip(p, t):
            go(a, b)

    go(prefix, tree)
    return out
