"""spmd.Array: a global array split over the devices of a mesh, and device_put.

An Array is a global shape and dtype, a Sharding (never partial), and the handles of
the shards this process holds ({device: handle}, see runtime/backend.py): one per
device of `runtime.local_devices(mesh)` — every device on the local runtime, this
rank's on MPI. Each shard has the padded local shape `sharding.local_shape(shape)`;
device i's valid part is the box `sharding.shard_box(shape, i)` at its low corner, the
rest is padding (zeros from device_put, unspecified in jit results). Arrays are
immutable; devices holding the same shard (replicated axes) may share one buffer.

Reading an Array (numpy(), np.asarray, float(), printing) assembles the global value
through `runtime.all_shards` — a collective on MPI, so every process must do it — except
for a fully replicated Array, which each process reads from its own copy. numpy on
Arrays (operators, ufuncs, functions, methods, indexing, writes) runs eagerly as sharded
programs and returns Arrays: spmd/eager.py installs those protocols on this class.

`.shards` (JAX's addressable_shards): this process's shards as (device, index, data),
`data` a read-only view of the valid part. `.local`: the data of the first of them —
this rank's shard under MPI, device `min(mesh devices)`'s on the local runtime.
"""
from __future__ import annotations

import operator
import sys
from typing import NamedTuple

import numpy as np

from ..errors import ReshardWarning, ShardingError, SpmdError, is_library, user_loc, warn_at
from ..ir.mesh import Sharding


class Shard(NamedTuple):
    device: int
    index: tuple          # the global slices this shard holds
    data: np.ndarray      # its valid (unpadded) part, read-only


class _Donated:
    """The handles of an Array donated to a jitted function: any use raises."""

    def __init__(self, fn, leaf):
        self._why = (f"this spmd.Array was donated to {fn} (donate_argnums, argument leaf {leaf}): the "
                     f"program may have reused its buffers. Use the function's outputs instead, or do "
                     f"not donate it")

    def _fail(self, *a, **k):
        raise SpmdError(self._why)

    __getitem__ = __iter__ = __len__ = __contains__ = items = values = keys = get = _fail


def donated_handles(fn, leaf):
    return _Donated(fn, leaf)


class Array:
    __array_priority__ = 100      # ndarray (op) Array -> Array's reflected op
    __hash__ = None               # == is elementwise, as for ndarray

    def __init__(self, shape, dtype, sharding: Sharding, handles: dict, runtime):
        """Internal: Arrays come from device_put and from jit."""
        self._shape = tuple(int(s) for s in shape)
        self._dtype = np.dtype(dtype)
        self._sharding = sharding
        self._handles = handles
        self._runtime = runtime

    @classmethod
    def of_placement(cls, placement, handles, runtime):
        """Internal: a program's output, as its Placement (runtime/program.py: a tuple of
        ints, an np.dtype) describes it; made without __init__'s conversions, as a step
        makes one per output (a training step: one per parameter and optimizer slot)."""
        a = cls.__new__(cls)
        a._shape, a._dtype, a._sharding = placement
        a._handles = handles
        a._runtime = runtime
        return a

    # -- metadata -------------------------------------------------------------------------
    shape = property(lambda self: self._shape, lambda self, v: _no_shape_setting(v))
    dtype = property(lambda self: self._dtype)
    sharding = property(lambda self: self._sharding)
    ndim = property(lambda self: len(self._shape))
    size = property(lambda self: int(np.prod(self._shape, dtype=np.int64)))
    nbytes = property(lambda self: self.size * self._dtype.itemsize)
    itemsize = property(lambda self: self._dtype.itemsize)

    @property
    def mesh(self):
        return self._sharding.mesh

    @property
    def is_fully_replicated(self) -> bool:
        """Does every device hold the whole value? (Then reading it is local.)"""
        return all(e is None for e in self._sharding.spec)

    @property
    def local_shape(self):
        """The padded shape of each shard."""
        return self._sharding.local_shape(self._shape)

    # -- values ---------------------------------------------------------------------------
    def numpy(self, out=None) -> np.ndarray:
        """The global value, assembled from the shards: a new array, or `out` (a numpy
        array of this shape, written in place, cast to its dtype as numpy's `out=` does):
        each shard copied once into its place (a written numpy argument's new value goes
        straight into the caller's array, no global array made between)."""
        sh = self._sharding
        if out is not None and tuple(out.shape) != tuple(self._shape):
            raise ValueError(f"spmd.Array.numpy: out has shape {tuple(out.shape)}, the array {tuple(self._shape)}")
        if self.is_fully_replicated:
            # every device holds the whole value: read this process's copy, no collective
            # (so `if rank == 0: print(float(loss))` works under MPI)
            got = self._runtime.get({d: h for d, h in list(self._handles.items())[:1]})
            whole = next(iter(got.values()))[tuple(slice(0, n) for n in self._shape)]
            if out is not None:
                np.copyto(out, whole, casting="unsafe")
                return out
            return np.array(whole, dtype=self._dtype, copy=True)
        shards = self._runtime.all_shards(self._handles, sh.mesh)
        if out is None:
            out = np.empty(self._shape, self._dtype)
        seen = set()
        for d in sh.mesh.devices.reshape(-1).tolist():
            key = sh.shard_index(d)
            if key in seen:           # a replica of a shard already copied
                continue
            seen.add(key)
            box = sh.shard_box(self._shape, d)
            out[tuple(slice(a, b) for a, b in box)] = shards[d][tuple(slice(0, b - a) for a, b in box)]
        return out

    @property
    def shards(self) -> list:
        got = self._runtime.get(self._handles)
        out = []
        for d in sorted(got):
            box = self._sharding.shard_box(self._shape, d)
            data = got[d][tuple(slice(0, b - a) for a, b in box) + (Ellipsis,)]    # a view, also 0-d
            data.flags.writeable = False
            out.append(Shard(d, tuple(slice(a, b) for a, b in box), data))
        return out

    @property
    def local(self) -> np.ndarray:
        """This process's shard (its valid part, read-only); see the module docstring."""
        return self.shards[0].data

    def __array__(self, dtype=None, copy=None):
        if copy is False:
            raise ValueError("spmd.Array: the global value is assembled from shards, which copies")
        if not self.is_fully_replicated and is_library(sys._getframe(1).f_code.co_filename):
            # numpy's or a library's own conversion (np.vectorize, np.c_, scipy, a plot): a
            # gather the user did not write. np.asarray(x) in the user's code is one on purpose.
            warn_at(f"spmd: a library converts a split spmd.Array {self.dtype}{list(self._shape)} to a numpy "
                    f"array here, which gathers all of it ({self.nbytes} bytes) to this process; call "
                    f"np.asarray(x) yourself first where that is meant", ReshardWarning)
        v = self.numpy()
        return self.laid_out(v if dtype is None else v.astype(dtype, copy=False))

    def laid_out(self, v):
        """v (this Array's value) in the order of axes numpy would have it in memory."""
        layout = getattr(self, "numpy_layout", None)
        if layout is None or layout.shape != v.shape:
            return v
        # an eager result numpy lays out in another order (x.T + 1, a copy of a broadcast):
        # numpy's copy of it keeps that order (order="K"), which decides whether a later
        # reshape of the copy is a view
        order = sorted(range(v.ndim), key=lambda d: -abs(layout.strides[d]))
        out = np.empty([v.shape[d] for d in order], v.dtype).transpose(np.argsort(order))
        out[...] = v
        return out

    # -- Python protocols -----------------------------------------------------------------
    def __len__(self):
        if not self._shape:
            raise TypeError("len() of unsized object (a 0-d spmd.Array)")
        return self._shape[0]

    def __iter__(self):
        return iter(self.numpy())

    def __getitem__(self, idx):
        return self.numpy()[idx]

    def __bool__(self):
        return bool(self.numpy())

    def __float__(self):
        return float(self.numpy())

    def __int__(self):
        return int(self.numpy())

    def __complex__(self):
        return complex(self.numpy())

    def __index__(self):
        return operator.index(self.numpy())

    def __format__(self, spec):
        v = self.numpy()
        return format(v[()] if v.ndim == 0 else v, spec)

    def __repr__(self):
        r = np.array_repr(self.numpy())           # "array([...], dtype=...)"
        return f"Array({r[len('array('):-1]}, sharding={self._sharding.text()})"

    def __str__(self):
        return str(self.numpy())

    def __getattr__(self, name):
        # (spmd/eager.py replaces this: ndarray methods run sharded, or warn when they gather)
        raise AttributeError(f"'spmd.Array' object has no attribute {name!r}")

    def __reduce__(self):
        # pickling (copy.deepcopy, a task argument) ships the global value; unpickling
        # places it again, with the same sharding, on the runtime of the receiving process
        return (_from_value, (self.numpy(), self._sharding))


def _from_value(value, sharding):
    return device_put(value, sharding)


# -- placing values -------------------------------------------------------------------------
def device_put(x, sharding, runtime=None) -> Array:
    """An ndarray (or anything np.asarray takes) -> an Array split by `sharding`.

    An Array with another sharding is resharded *through the host* for now: its global
    value is assembled and split again (inside jit, reshards are planned collectives).
    An Array that already has `sharding` is returned as it is.
    """
    from .current_runtime import get_runtime
    if not isinstance(sharding, Sharding):
        raise ShardingError(f"spmd.device_put takes a Sharding (mesh.sharding(...)), got {sharding!r}")
    if sharding.partial:
        raise ShardingError(f"spmd.device_put: sharding {sharding.text()} is partial; an Array holds "
                            f"whole values")
    if isinstance(x, Array):
        sh = sharding.for_rank(x.ndim, "array")
        if sh == x.sharding and (runtime is None or runtime is x._runtime):
            return x
        x = x.numpy()
    x = np.asarray(x)
    sh = sharding.for_rank(x.ndim, f"array of shape {list(x.shape)}")
    return put_split(x, sh, runtime or get_runtime())


def put_split(x, sh, rt) -> Array:
    """The ndarray x split by sh (a whole Sharding of x's rank) onto rt's devices: what
    device_put does once it has checked its arguments."""
    return Array(x.shape, x.dtype, sh, {d: rt.put(d, b) for d, b in split_buffers(x, sh, rt).items()}, rt)


def split_buffers(x, sh, rt, sent=False) -> dict:
    """{device: its buffer} of the ndarray x split by sh over rt's devices of sh's mesh:
    fresh padded buffers (a shard's replicas share one), which the caller hands over to
    the runtime (put, or a run's arguments). sent: the buffers go with a run (a jitted
    call's numpy argument), and a device whose runtime sends the bytes away
    (Runtime.put_sends) is given a view of x, not a copy."""
    local, split = split_of(sh, x.shape, tuple(rt.local_devices(sh.mesh)))
    buffers = {}                   # (shard index, a view?) -> buffer, shared by that shard's replicas
    out = {}
    for d, key, box in split:
        view = sent and rt.put_sends(d)
        buf = buffers.get((key, view))
        if buf is None:
            buf = buffers[(key, view)] = padded(x, box, local, view)
        out[d] = buf
    return out


# (sharding, global shape, devices) -> how device_put splits such a value: working the
# boxes out costs ~35 us a device, and a training loop puts a batch of one shape each step
_SPLITS = {}


def split_of(sh, shape, devices):
    """(the padded local shape, [(device, its shard index, its box)]) of a value of
    `shape` split by `sh` over `devices`."""
    key = (sh, shape, devices)
    hit = _SPLITS.get(key)
    if hit is None:
        if len(_SPLITS) >= 1024:       # many shapes (a sweep): start over rather than grow
            _SPLITS.clear()
        hit = _SPLITS[key] = (sh.local_shape(shape),
                              tuple((d, sh.shard_index(d), sh.shard_box(shape, d)) for d in devices))
    return hit


def padded(x, box, local_shape, view=False):
    """A fresh, C-contiguous buffer of local_shape: x's `box` at the low corner, zeros after
    (view: x's box itself where it fills local_shape)."""
    piece = x[tuple(slice(a, b) for a, b in box)]
    if piece.shape == tuple(local_shape):
        return piece if view else np.array(piece, order="C", copy=True)
    buf = np.zeros(local_shape, x.dtype)
    buf[tuple(slice(0, b - a) for a, b in box)] = piece
    return buf


def _no_shape_setting(shape):
    """numpy's `a.shape = ...` changes the array object itself into a view of its memory;
    an Array's views derive from it by shape, so it keeps its own."""
    raise NotImplementedError(f"`a.shape = {shape}` on an spmd.Array (at {user_loc()}): an Array keeps its "
                              f"shape; use `a = a.reshape({shape})`, a view where numpy's would be")
