"""Mesh: an n-d grid of device ids (ranks) with named axes."""
from __future__ import annotations

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
        self._checked = {}              # (spec, partial) -> checked Sharding fields (ir/spec.py)

    # -- sizes -------------------------------------------------------------------------------
    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

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
        from .spec import Sharding
        return Sharding(self, spec, partial)

    def replicated(self, ndim=0):
        from .spec import Sharding
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
