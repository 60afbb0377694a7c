"""Sharding: how an array is split over a mesh.

`spec` has one entry per array dimension: None (not split), "axis", or a tuple of axes
(split over several mesh axes, major to minor). Mesh axes not named are replicated.
`partial` names mesh axes over which the per-device values await a sum.

Uneven dimensions: a dim of size n split k ways has shards of ceil(n/k) (the local,
padded shape); shard i holds global [i*c, min((i+1)*c, n)), so the last shards may be
short or empty. The partitioner masks the padding.
"""
from __future__ import annotations

import re

from ..errors import ShardingError
from .mesh import Mesh


def _norm_entry(e):
    if e is None or e == ():
        return None
    if isinstance(e, str):
        return e
    if isinstance(e, (tuple, list)) and all(isinstance(a, str) for a in e):
        return e[0] if len(e) == 1 else tuple(e)
    raise ShardingError(f"sharding spec entry {e!r} must be None, an axis name or a tuple of axis names")


class Sharding:
    __slots__ = ("mesh", "spec", "partial", "_hash")

    def __init__(self, mesh: Mesh, spec=(), partial=()):
        if not isinstance(mesh, Mesh):
            raise ShardingError(f"Sharding needs a Mesh, got {type(mesh).__name__}")
        # propagation and partitioning make tens of thousands of these per compile, mostly
        # the same few: a mesh remembers the ones it has checked
        try:
            key = (tuple(spec), partial)
            known = mesh._checked.get(key)
        except TypeError:                        # an unhashable entry (a list): check it below
            key = known = None
        if known is not None:
            self.mesh, self.spec, self.partial, self._hash = mesh, known[0], known[1], known[2]
            return
        spec = tuple(_norm_entry(e) for e in spec)
        partial = (partial,) if isinstance(partial, str) else tuple(partial)
        used = [a for e in spec for a in _axes_of(e)] + list(partial)
        for a in used:
            if a not in mesh.axis_names:
                raise ShardingError(f"sharding {_text(spec, partial)} names unknown mesh axis {a!r}; "
                                    f"the mesh has axes {mesh.axis_names}")
        dup = sorted({a for a in used if used.count(a) > 1})
        if dup:
            raise ShardingError(f"sharding {_text(spec, partial)} uses mesh axis {dup[0]!r} more than once")
        self.mesh = mesh
        self.spec = spec
        self.partial = tuple(a for a in mesh.axis_names if a in partial)   # mesh order
        self._hash = hash((mesh, spec, self.partial))
        if key is not None:
            mesh._checked[key] = (self.spec, self.partial, self._hash)

    # -- queries -----------------------------------------------------------------------------
    def for_rank(self, ndim, what="value") -> "Sharding":
        """This sharding with its spec padded with None to `ndim` entries (or an error)."""
        if len(self.spec) > ndim:
            raise ShardingError(f"sharding {self.text()} has {len(self.spec)} entries but the {what} has "
                                f"rank {ndim}")
        if len(self.spec) == ndim:
            return self
        return Sharding(self.mesh, self.spec + (None,) * (ndim - len(self.spec)), self.partial)

    def dim_axes(self, d) -> tuple:
        return _axes_of(self.spec[d]) if d < len(self.spec) else ()

    def dim_shards(self, d) -> int:
        return self.mesh.axes_size(self.dim_axes(d))

    @property
    def used_axes(self) -> tuple:
        return tuple(a for e in self.spec for a in _axes_of(e))

    @property
    def replicated_axes(self) -> tuple:
        used = set(self.used_axes) | set(self.partial)
        return tuple(a for a in self.mesh.axis_names if a not in used)

    @property
    def is_replicated(self) -> bool:
        return not self.used_axes and not self.partial

    def local_shape(self, global_shape) -> tuple:
        """The padded per-device shape."""
        return tuple(-(-n // self.dim_shards(d)) for d, n in enumerate(global_shape))

    def shard_index(self, device) -> tuple:
        """Which shard (per dim) a device holds."""
        return tuple(self.mesh.index_in_group(device, self.dim_axes(d)) for d in range(len(self.spec)))

    def shard_box(self, global_shape, device) -> tuple:
        """The global index ranges (start, stop) per dim that a device holds (unpadded)."""
        box = []
        for d, n in enumerate(global_shape):
            k = self.dim_shards(d)
            c = -(-n // k)
            i = self.mesh.index_in_group(device, self.dim_axes(d))
            box.append((min(i * c, n), min((i + 1) * c, n)))
        return tuple(box)

    def shard_slices(self, global_shape, device) -> tuple:
        return tuple(slice(a, b) for a, b in self.shard_box(global_shape, device))

    def replace(self, spec=None, partial=None) -> "Sharding":
        return Sharding(self.mesh, self.spec if spec is None else spec,
                        self.partial if partial is None else partial)

    # -- text --------------------------------------------------------------------------------
    def text(self) -> str:
        return _text(self.spec, self.partial)

    @staticmethod
    def from_text(s: str, mesh: Mesh) -> "Sharding":
        m = re.fullmatch(r"\s*\{(.*?)\}\s*(?:partial\(([\w\s,]*)\))?\s*", s)
        if not m:
            raise ShardingError(f"cannot parse sharding {s!r}")
        body, partial = m.group(1).strip(), m.group(2)
        spec = []
        for tok in re.findall(r"\([^)]*\)|[^,\s()]+", body):
            if tok == "_":
                spec.append(None)
            elif tok.startswith("("):
                spec.append(tuple(a.strip() for a in tok[1:-1].split(",") if a.strip()))
            else:
                spec.append(tok)
        parts = tuple(a.strip() for a in partial.split(",") if a.strip()) if partial else ()
        return Sharding(mesh, spec, parts)

    def __eq__(self, other):
        return (isinstance(other, Sharding) and self.mesh == other.mesh and self.spec == other.spec
                and self.partial == other.partial)

    def __hash__(self):
        return self._hash

    def __reduce__(self):
        # rebuilt in the receiving process, whose string hashes differ from this one's
        return (Sharding, (self.mesh, self.spec, self.partial))

    def __repr__(self):
        return f"Sharding({self.text()})"


def _axes_of(e) -> tuple:
    if e is None:
        return ()
    return (e,) if isinstance(e, str) else tuple(e)


def _text(spec, partial) -> str:
    ents = []
    for e in spec:
        if e is None:
            ents.append("_")
        elif isinstance(e, str):
            ents.append(e)
        else:
            ents.append("(" + ",".join(e) + ")")
    s = "{" + ", ".join(ents) + "}"
    if partial:
        s += " partial(" + ",".join(partial) + ")"
    return s
