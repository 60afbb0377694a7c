"""The run step: a declared Program (program.py) and its flat argument leaves -> flat
result leaves.

No mesh (program.mesh is None): one device; numpy arrays in, numpy arrays out.

With a mesh, the executable is the per-device program (its inputs and outputs have the
padded local shapes of program.inputs / outputs' Shardings applied to their global
shapes). Each leaf is placed by its input's Sharding:
  - an spmd.Array with exactly that sharding is used as it is (no copy);
  - an spmd.Array with another sharding (or mesh) is resharded (device_put: through
    the host for now);
  - a numpy array or Python scalar is split (device_put).
The compiled program runs on every device through the runtime, and each output becomes
an spmd.Array with its Sharding (partial axes are already reduced by the partitioner).
"""
from __future__ import annotations

import numpy as np

from ..errors import SpmdError
from . import blas
from .array import Array, device_put, split_buffers
from .program import runner


def execute(program, leaves, rt=None):
    """Flat argument leaves -> flat output leaves; `rt`: the runtime (with a mesh)."""
    if program.mesh is None:
        return _execute_alone(program, leaves)
    return _execute_sharded(program, leaves, rt)


def _execute_alone(program, leaves):
    arrays = [x if type(x) is np.ndarray and x.dtype is p.dtype else np.asarray(x, dtype=p.dtype)
              for x, p in zip(leaves, program.inputs)]
    for k in program.donated:     # a numpy argument stays its owner's: the program gets a copy
        arrays[k] = np.array(arrays[k], copy=True)
    for k in program.reused:      # one the program writes in place is used as it is, if it can be
        if not (arrays[k] is leaves[k] and _writable_in_place(arrays[k])):
            arrays[k] = np.array(arrays[k], order="C", copy=True)
    blas.start_run(1)
    return runner(program.executable, None)(arrays, None)


def _writable_in_place(a) -> bool:
    return a.flags.c_contiguous and a.flags.writeable and a.flags.aligned


def _private(args, donated, own, rt):
    """Each device's buffer of a donated argument is written by that device's program: it
    must be its own, writeable, and shared with nothing else the run reads (replicas of a
    shard share one buffer; the same array may be passed twice; a numpy argument that
    device_put did not copy is its owner's). Such a buffer is copied first. A buffer whose
    bytes the runtime sends with the run (Runtime.put_sends) is the program's own there."""
    spans = []                  # (first byte, end, device, leaf) of every buffer the run reads
    for d, hs in args.items():
        for j, h in enumerate(hs):
            if isinstance(h, np.ndarray) and h.size:
                lo, hi = _byte_bounds(h)
                spans.append((lo, hi, d, j))
    spans.sort(key=lambda s: s[0])
    overlapping = set()
    for i, (lo, hi, d, j) in enumerate(spans):
        for lo2, _, e, m in spans[i + 1:]:
            if lo2 >= hi:
                break
            overlapping.update([(d, j), (e, m)])
    for k in sorted(donated):
        for d in args:
            h = args[d][k]
            if not isinstance(h, np.ndarray) or rt.put_sends(d):
                continue        # (Ray: a reference, or bytes it sends; the executable copies what it cannot write)
            if not own[k] or (d, k) in overlapping or not (h.flags.writeable and h.flags.c_contiguous):
                args[d][k] = np.array(h, copy=True)


def _byte_bounds(a):
    try:
        from numpy.lib.array_utils import byte_bounds
    except ImportError:             # numpy < 2
        byte_bounds = np.byte_bounds
    return byte_bounds(a)


def _placed(x, p, rt):
    """Leaf x as the program takes it (input Placement p): an spmd.Array placed so."""
    if type(x) is Array and x._runtime is rt and x._dtype is p.dtype:
        if x._sharding is p.sharding:
            return x                         # already placed as the program takes it (the common case)
        if x._sharding == p.sharding:
            # the same sharding made apart (device_put with the user's own): x holds the
            # program's equal object from now on, so its next call is seen placed by identity
            x._sharding = p.sharding
            return x
    if not isinstance(x, Array):
        x = np.asarray(x, dtype=p.dtype)
    elif x.dtype != p.dtype:
        x = x.numpy().astype(p.dtype)
    return device_put(x, p.sharding, runtime=rt)


def _execute_sharded(program, leaves, rt):
    if len(leaves) != len(program.inputs):
        raise SpmdError(f"{program.name}: expected {len(program.inputs)} argument leaves, got {len(leaves)}")
    devices = rt.local_devices(program.mesh)
    args = {d: [] for d in devices}
    own = []                    # per leaf: may the program write its buffers (donated)?
    for x, p in zip(leaves, program.inputs):
        if type(x) is np.ndarray and x.dtype is p.dtype and x.shape == p.shape:
            # a batch given each step: its buffers go to the run as they are (Runtime.run
            # takes numpy arrays), no Array nor handle made for a value that lives one call
            bufs = split_buffers(x, p.sharding, rt, sent=True)
            own.append(True)            # (copies, but where the runtime sends the bytes)
        else:
            a = _placed(x, p, rt)
            bufs = a._handles
            own.append(a is x)
        for d in devices:
            args[d].append(bufs[d])
    if program.donated or program.reused:
        _private(args, program.written, own, rt)
    outs = rt.run(program.executable, program.mesh, args)
    if len(devices) == 1:                    # (one device a process: MPI, a Ray actor's driver view)
        got = outs[devices[0]]
        d = devices[0]
        return [Array.of_placement(p, {d: got[k]}, rt) for k, p in enumerate(program.outputs)]
    return [Array.of_placement(p, {d: outs[d][k] for d in devices}, rt) for k, p in enumerate(program.outputs)]
