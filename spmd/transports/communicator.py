"""The Communicator: collectives over groups of ranks of a mesh.

One Communicator object per rank (device). Every collective names the mesh axes it runs
over; its group is the ranks that share this rank's coordinates on all other axes,
ordered row-major over the named axes as given (major to minor) — `Mesh.group`.
Inputs are numpy arrays (contiguous); results are new numpy arrays (or the `out` array
the caller gives: all_reduce, all_gather, reduce_scatter, all_to_all). All ranks of a group
must call the same collectives in the same order (every rank runs the same program).

Semantics, with G the group size and i this rank's index in its group:
- all_reduce(x, axes, op)            -> op-reduction of x over the group ("sum","max","min","prod")
- all_gather(x, axes, dim)           -> concatenation of the group's x along dim, in group order
- reduce_scatter(x, axes, dim, op)   -> block i (of G equal blocks along dim) of all_reduce(x)
- all_to_all(x, axes, split_dim, concat_dim)
                                     -> split x in G blocks along split_dim, send block j to rank j,
                                        concatenate the received blocks (in group order) along concat_dim
- permute(x, axes, pairs)            -> pairs are (src, dst) group indices; a rank receives the x of
                                        the src that names it, or zeros if none does
- broadcast(x, axes, root)           -> the x of the rank at group index `root`
- barrier(axes=None)                 -> returns when every rank of the group (all ranks if None) arrived
- all_reduce_start(x, axes, op)      -> an int handle: the all_reduce is in flight; x must stay
                                        unmodified until its wait returns
- wait(handle)                       -> the result of the collective the handle started

Started collectives complete in any order, with any collectives called in between; every
rank of a group starts them in the same order. The default here runs the collective at
start (synchronous: no overlap); local, mpi and ray overlap it with what runs until the wait.

A rank that fails, or a peer lost mid-collective, raises CollectiveError naming the rank
(and the collective and user line it waits in), never hangs. Liveness, not a stopwatch:
a peer that is alive but busy is waited for however long it takes; a dead one is noticed
within seconds (local: its thread raised or returned; mpi: its process is gone, mpiexec
says so, or its heartbeats stopped for SPMD_HEARTBEAT_TIMEOUT s, default 10; ray: the
driver sees its actor die). SPMD_COLLECTIVE_TIMEOUT=seconds adds a plain per-call
stopwatch on top (unset by default).

`comm.loc` is the user line (file:line) of the collective op being run, set by the
executables before each collective so that failures can name it.

The public methods check their arguments once for every transport (collective_args.py)
and call the transport's `_name` method (transports/local, mpi, ray), which runs the
collective on arguments known to be good.
"""
from __future__ import annotations

import os
from abc import ABC, abstractmethod

import numpy as np

from ..errors import CollectiveError
from .collective_args import (as_input, check_axes, check_dim, check_dtype, check_op, check_out, check_pairs,
                              check_root)


def collective_timeout() -> float:
    """The per-call stopwatch, SPMD_COLLECTIVE_TIMEOUT seconds; infinite when unset."""
    v = os.environ.get("SPMD_COLLECTIVE_TIMEOUT", "").strip()
    return float(v) if v else float("inf")


def heartbeat_timeout() -> float:
    """Seconds without a heartbeat after which a peer is taken for dead (default
    10): the MPI heartbeats and the Ray links judge liveness by it."""
    return float(os.environ.get("SPMD_HEARTBEAT_TIMEOUT", "10"))


def reduce_arrays(op, arrays, out=None):
    """Reduce a list of same-shape arrays with op, in list order (deterministic), into
    `out` (a new array if None). Every backend reduces through this, so all agree bit
    for bit."""
    f = {"sum": np.add, "max": np.maximum, "min": np.minimum, "prod": np.multiply}[op]
    out = np.empty_like(arrays[0]) if out is None else out
    if len(arrays) == 1:
        np.copyto(out, arrays[0])
        return out
    if out.dtype.itemsize == 2 and out.dtype.name in ("float16", "bfloat16") and op in ("sum", "prod"):
        # 2-byte floats travel as 2 bytes and are summed in float32, rounded once at the end
        acc = arrays[0].astype(np.float32)
        for a in arrays[1:]:
            f(acc, a.astype(np.float32), out=acc)
        out[...] = acc
        return out
    f(arrays[0], arrays[1], out=out)     # one pass for the first pair: a copy first would be another
    for a in arrays[2:]:
        f(out, a, out=out)
    return out


def into(out, r):
    """A collective's result r in the caller's `out` (copied there unless it is there
    already), or r itself when the caller gave none."""
    if out is None or out is r:
        return r
    np.copyto(out, r)
    return out


class Communicator(ABC):
    """The collectives every transport offers, their arguments checked once here
    (collective_args.py); a transport implements the `_name` methods, which receive x as
    a C-contiguous array, axes as a tuple of the mesh's axis names, and the other
    arguments checked (permute's pairs sorted)."""
    loc = None                      # the user line of the collective being run (for messages)
    # how many ranks of the run are threads of this process: they share its BLAS thread
    # setting, which must then stay as the runtime set it for the run (runtime/blas.py)
    ranks_in_process = 1
    # collectives as native instructions (backends/native_exchange.py): a NativeExchange where
    # the ranks share this process's memory (the local transport), else None
    native_exchange = None

    def __init__(self, mesh, rank):
        self.mesh = mesh
        self.rank = rank            # this rank's device id in the mesh

    def write(self, text):
        """What the program prints on this rank (spmd.debug.print), as it runs: to this
        process's stdout (the Ray communicator hands it to the driver instead)."""
        import sys
        sys.stdout.write(text)
        sys.stdout.flush()

    @property
    def size(self):
        return self.mesh.size

    def group(self, axes):
        return self.mesh.group(self.rank, tuple(axes))

    def group_index(self, axes):
        return self.mesh.index_in_group(self.rank, tuple(axes))

    # -- the checked collectives ----------------------------------------------------------
    def _checked(self, name, x, axes):
        """(x as a contiguous array, axes as a tuple, G, what: says the call, for messages).
        Axes as given -> (tuple, G) is memoised: the executables call with the same few."""
        cache = self.__dict__.setdefault("_axes_checked", {})
        try:
            hit = cache.get(axes)
        except TypeError:           # a list of axes (not a key): checked every time
            hit = None
        if hit is None:
            names = check_axes(lambda: f"{name} over {axes!r}" + (f" at {self.loc}" if self.loc else ""),
                               self.mesh, axes)
            hit = (names, self.mesh.axes_size(names))
            if isinstance(axes, (str, tuple)):
                cache[axes] = hit
        axes, G = hit
        what = lambda: f"{name} over {axes}" + (f" at {self.loc}" if self.loc else "")   # noqa: E731
        x = as_input(x)
        check_dtype(what, x)
        return x, axes, G, what

    def all_reduce(self, x, axes, op="sum", out=None):
        """`out`: an array of x's shape and dtype to write the result into (it may be x:
        then x is overwritten with the result), else a new one."""
        x, axes, _, what = self._checked("all_reduce", x, axes)
        check_op(what, op)
        check_out(what, out, x.shape, x.dtype)
        return self._all_reduce(x, axes, op, out)

    # all_gather, reduce_scatter and all_to_all take `out` as all_reduce does: an array of
    # the result's shape and dtype (never x's memory) to write the result into, so the
    # executable can place it in its memory plan; `into` is the fallback
    def all_gather(self, x, axes, dim=0, out=None):
        x, axes, G, what = self._checked("all_gather", x, axes)
        check_dim(what, x, dim)
        if out is not None:
            check_out(what, out, x.shape[:dim] + (x.shape[dim] * G,) + x.shape[dim + 1:], x.dtype)
        return self._all_gather(x, axes, int(dim), out)

    def reduce_scatter(self, x, axes, dim=0, op="sum", out=None):
        x, axes, G, what = self._checked("reduce_scatter", x, axes)
        check_op(what, op)
        check_dim(what, x, dim, G)
        if out is not None:
            check_out(what, out, x.shape[:dim] + (x.shape[dim] // G,) + x.shape[dim + 1:], x.dtype)
        return self._reduce_scatter(x, axes, int(dim), op, out)

    def all_to_all(self, x, axes, split_dim, concat_dim, out=None):
        x, axes, G, what = self._checked("all_to_all", x, axes)
        check_dim(what, x, split_dim, G)
        check_dim(what, x, concat_dim)
        if out is not None:
            shape = list(x.shape)
            shape[split_dim] //= G
            shape[concat_dim] *= G
            check_out(what, out, shape, x.dtype)
        return self._all_to_all(x, axes, int(split_dim), int(concat_dim), out)

    def permute(self, x, axes, pairs):
        x, axes, G, what = self._checked("permute", x, axes)
        return self._permute(x, axes, check_pairs(what, pairs, G))

    def broadcast(self, x, axes, root=0):
        x, axes, G, what = self._checked("broadcast", x, axes)
        return self._broadcast(x, axes, check_root(what, root, G))

    def barrier(self, axes=None):
        """Every rank of the group over axes, or of the whole run (None)."""
        if axes is not None:
            axes = check_axes(lambda: f"barrier over {axes!r}", self.mesh, axes)
        self._barrier(axes)

    def all_reduce_start(self, x, axes, op="sum") -> int:
        """An int handle: the all_reduce is in flight; x must stay unmodified until its
        wait returns."""
        x, axes, _, what = self._checked("all_reduce", x, axes)
        check_op(what, op)
        return self._all_reduce_start(x, axes, op)

    # -- what a transport implements (arguments checked) ----------------------------------
    @abstractmethod
    def _all_reduce(self, x, axes, op, out): ...

    @abstractmethod
    def _all_gather(self, x, axes, dim, out): ...

    @abstractmethod
    def _reduce_scatter(self, x, axes, dim, op, out): ...

    @abstractmethod
    def _all_to_all(self, x, axes, split_dim, concat_dim, out): ...

    @abstractmethod
    def _permute(self, x, axes, pairs): ...

    @abstractmethod
    def _broadcast(self, x, axes, root): ...

    @abstractmethod
    def _barrier(self, axes):
        """axes None: every rank of the run."""

    def _all_reduce_start(self, x, axes, op) -> int:
        """(Here synchronous: the all_reduce runs at start, no overlap.)"""
        return self.put_handle(self._all_reduce(x, axes, op, None))

    def wait(self, handle):
        """The result of the collective the handle started."""
        return self.take_handle(handle)

    # -- started collectives (all_reduce_start / wait) ------------------------------------
    def _handles(self):
        h = self.__dict__.get("_inflight")
        if h is None:
            h = self.__dict__["_inflight"] = {"next": 0}
        return h

    def put_handle(self, item) -> int:
        """A new handle for `item` (what `wait` needs to finish the call)."""
        h = self._handles()
        n = h["next"]
        h["next"] = n + 1
        h[n] = item
        return n

    def take_handle(self, n):
        try:
            return self._handles().pop(n)
        except KeyError:
            raise CollectiveError(f"rank {self.rank}: wait on handle {n}, which no start of this "
                                  f"communicator returned (or was waited on already)") from None

    def progress(self):
        """Move the started collectives on, without blocking: the executables call it
        between steps. (Here: nothing to do; the MPI communicator tests its rounds.)"""

    def in_flight(self) -> int:
        """How many started collectives are not waited on yet."""
        return len(self._handles()) - 1


# -- blocks every transport's collectives share ---------------------------------------------
def block_of(a, dim, i, G):
    c = a.shape[dim] // G
    idx = [slice(None)] * a.ndim
    idx[dim] = slice(i * c, (i + 1) * c)
    return a[tuple(idx)]


def describe(tag):
    name, shape, dt, attrs = tag
    return f"{name}({np.dtype(dt).name}{list(shape)}, {attrs})"
