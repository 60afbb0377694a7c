"""Mesh: an n-d grid of device ids (ranks) with named axes. Sharding: how an array is
split over a mesh. They share a module because each needs the other: a Sharding checks
itself against its mesh, and a mesh makes (and remembers) its shardings.

A Sharding's `spec` has one entry per array dimension: None (not split), "axis", or a tuple of axes
(split over several mesh axes, major to minor). Mesh axes not named are replicated.
`partial` names mesh axes over which the per-device values await a sum.

Uneven dimensions: a dim of size n split k ways has shards of ceil(n/k) (the local,
padded shape); shard i holds global [i*c, min((i+1)*c, n)), so the last shards may be
short or empty. The partitioner masks the padding.
"""
from __future__ import annotations

import math

import re

import numpy as np

from ..errors import ShardingError


class Mesh:
    def __init__(self, shape, axis_names, devices=None):
        if isinstance(shape, int):
            shape = (shape,)
        if isinstance(axis_names, str):
            axis_names = (axis_names,)
        self.shape = tuple(int(s) for s in shape)
        self.axis_names = tuple(axis_names)
        if len(self.shape) != len(self.axis_names):
            raise ShardingError(f"Mesh shape {self.shape} has {len(self.shape)} axes but "
                                f"{len(self.axis_names)} names {self.axis_names}")
        if any(s < 1 for s in self.shape):
            raise ShardingError(f"Mesh shape {self.shape} must be positive")
        if len(set(self.axis_names)) != len(self.axis_names) or not all(
                isinstance(a, str) and a.isidentifier() for a in self.axis_names):
            raise ShardingError(f"Mesh axis names {self.axis_names} must be distinct identifiers")
        n = int(np.prod(self.shape, dtype=np.int64))
        if devices is None:
            devices = np.arange(n).reshape(self.shape)
        devices = np.asarray(devices, dtype=np.int64)
        if devices.shape != self.shape or sorted(devices.reshape(-1).tolist()) != list(range(n)):
            raise ShardingError(f"Mesh devices must be an array of shape {self.shape} holding each of "
                                f"the ranks 0..{n - 1} once")
        self.devices = devices
        self._sizes = dict(zip(self.axis_names, self.shape))
        self._default_devices = bool((devices.reshape(-1) == np.arange(n)).all())
        self._coords = None
        self._checked = {}              # (spec, partial) -> checked Sharding fields (below)

    # -- sizes -------------------------------------------------------------------------------
    @property
    def size(self) -> int:
        # Python ints (np.prod costs ~40x more, and the runtime asks on every call)
        return math.prod(self.shape)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def axis_size(self, axis) -> int:
        n = self._sizes.get(axis)
        return self.shape[self.axis_index(axis)] if n is None else n

    def axes_size(self, axes) -> int:
        # called tens of thousands of times per compile: plain ints, no numpy
        n = 1
        for a in axes:
            n *= self.axis_size(a)
        return n

    def axis_index(self, axis) -> int:
        try:
            return self.axis_names.index(axis)
        except ValueError:
            raise ShardingError(f"unknown mesh axis {axis!r}; this mesh has axes {self.axis_names}") from None

    @property
    def sizes(self) -> dict:
        return dict(self._sizes)

    # -- where a device sits -----------------------------------------------------------------
    def coords(self, device) -> dict:
        """{axis: coordinate} of a device id."""
        if self._coords is None:
            inv = np.empty(self.size, dtype=np.int64)
            inv[self.devices.reshape(-1)] = np.arange(self.size)
            self._coords = inv
        flat = int(self._coords[device])
        return dict(zip(self.axis_names, np.unravel_index(flat, self.shape)))

    def group(self, device, axes) -> list:
        """The devices that share `device`'s coordinates on every axis but `axes`,
        ordered row-major over `axes` as given (major to minor)."""
        axes = tuple(axes)
        c = self.coords(device)
        idx = [c[a] if a not in axes else slice(None) for a in self.axis_names]
        sub = self.devices[tuple(idx)]
        # sub's dims follow mesh order of the axes in `axes`; put them in `axes` order
        mesh_order = [a for a in self.axis_names if a in axes]
        sub = np.transpose(sub, [mesh_order.index(a) for a in axes])
        return sub.reshape(-1).tolist()

    def index_in_group(self, device, axes) -> int:
        """The device's position in its group over `axes` (row-major, major to minor)."""
        c = self.coords(device)
        i = 0
        for a in axes:
            i = i * self.axis_size(a) + int(c[a])
        return i

    # -- shardings ---------------------------------------------------------------------------
    def sharding(self, *spec, partial=()):
        return Sharding(self, spec, partial)

    def replicated(self, ndim=0):
        return Sharding(self, (None,) * ndim)

    def text(self) -> str:
        s = "mesh<" + ", ".join(f"{a}={n}" for a, n in zip(self.axis_names, self.shape))
        if not self._default_devices:
            s += ", devices=[" + ",".join(map(str, self.devices.reshape(-1).tolist())) + "]"
        return s + ">"

    def _key(self):
        # computed once: every Sharding hashes its mesh, and a mesh may hold thousands of devices
        k = self.__dict__.get("_key_cache")
        if k is None:
            k = self.__dict__["_key_cache"] = (self.shape, self.axis_names, tuple(self.devices.reshape(-1).tolist()),)
            self.__dict__["_hash_cache"] = hash(k)
        return k

    def __reduce__(self):
        # rebuilt, not copied: the cached hash is of strings, which hash differently in
        # another process (PYTHONHASHSEED), and the caches may be large
        return (Mesh, (self.shape, self.axis_names, self.devices))

    def __eq__(self, other):
        return self is other or isinstance(other, Mesh) and self._key() == other._key()

    def __hash__(self):
        self._key()
        return self.__dict__["_hash_cache"]

    def __repr__(self):
        return f"Mesh({self.shape}, {self.axis_names})"

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


class _Auto:
    """spmd.AUTO: where it stands in jit's in_shardings / out_shardings (at the top, or at
    any leaf of the pytree), spmd chooses that sharding (sharding/auto/)."""
    _one = None

    def __new__(cls):
        if cls._one is None:
            cls._one = super().__new__(cls)
        return cls._one

    def __repr__(self):
        return "spmd.AUTO"

    def __reduce__(self):
        return (_Auto, ())


AUTO = _Auto()


def is_auto(x) -> bool:
    return x is AUTO
