"""jit's run step: a Lowered program and its flat argument leaves -> flat result leaves.

No mesh (lowered.mesh is None): one device; numpy arrays in, numpy arrays out.

With a mesh, lowered.graph is the per-device program (inputs and outputs have the
padded local shapes of lowered.in_shardings / out_shardings applied to the global
shapes of the traced program). Each leaf is placed by its in-sharding:
  - an spmd.Array with exactly that sharding is used as it is (no copy);
  - an spmd.Array with another sharding (or mesh) is resharded (device_put: through
    the host for now);
  - a numpy array or Python scalar is split (device_put).
The compiled program runs on every device through the current runtime, and each
output becomes an spmd.Array with its out-sharding (partial axes are already reduced
by the partitioner).
"""
from __future__ import annotations

import numpy as np

from ..errors import SpmdError
from ..ir.mesh import Sharding
from . import blas
from .array import Array, device_put
from .consistency import check_program
from .context import get_runtime


def execute(lowered, leaves):
    """Flat argument leaves -> flat output leaves."""
    donated = getattr(lowered, "donated", ())
    if lowered.mesh is None:
        graph = lowered.stages["traced"]
        arrays = [np.asarray(x, dtype=v.dtype) for x, v in zip(leaves, graph.inputs)]
        for k in donated:     # a numpy argument stays its owner's: the program gets a copy
            arrays[k] = np.array(arrays[k], copy=True)
        exe = lowered.compile()
        blas.start_run(1)
        return exe(arrays)
    rt = get_runtime()
    check_program(rt, lowered, leaves, [isinstance(x, Array) for x in leaves])
    return _execute_sharded(lowered, leaves, rt)


def _private(args, donated, own):
    """Each device's buffer of a donated argument is written by that device's program: it
    must be its own, writeable, and shared with nothing else the run reads (replicas of a
    shard share one buffer; the same array may be passed twice; a numpy argument that
    device_put did not copy is its owner's). Such a buffer is copied first."""
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
            if not isinstance(h, np.ndarray):
                continue        # (Ray: a reference; the executable copies what it cannot write)
            if not own[k] or (d, k) in overlapping or not (h.flags.writeable and h.flags.c_contiguous):
                args[d][k] = np.array(h, copy=True)


def _byte_bounds(a):
    try:
        from numpy.lib.array_utils import byte_bounds
    except ImportError:             # numpy < 2
        byte_bounds = np.byte_bounds
    return byte_bounds(a)


def _sharding(mesh, s, ndim) -> Sharding:
    """A value's sharding as an Array holds it: None is replicated, partial is dropped
    (the partitioner reduces partial values before they leave the program)."""
    if s is None:
        return Sharding(mesh, (None,) * ndim)
    return s.replace(partial=()).for_rank(ndim)


def _layout(lowered):
    """Per input and output: its global Value, the Sharding an Array holds it by and the
    per-device shape. Checked once per Lowered (the per-call path only looks it up)."""
    lay = getattr(lowered, "_spmd_layout", None)
    if lay is not None:
        return lay
    mesh, glob, prog = lowered.mesh, lowered.stages["traced"], lowered.graph
    def placed(kind, values, shardings, local, verb):
        out = []
        for k, (v, s) in enumerate(zip(values, shardings)):
            sh = _sharding(mesh, s, v.ndim)
            want = tuple(local[k].shape)
            if sh.local_shape(v.shape) != want:
                raise SpmdError(f"internal error: {glob.name} {kind} {k} {v.dtype}{list(v.shape)} split by "
                                f"{sh.text()} has local shape {list(sh.local_shape(v.shape))}, the per-device "
                                f"program {verb} {list(want)}")
            out.append((v, sh))
        return out
    ins = placed("input", glob.inputs, lowered.in_shardings, prog.inputs, "takes")
    outs = placed("output", glob.outputs, lowered.out_shardings, prog.outputs, "makes")
    lay = lowered._spmd_layout = (ins, outs)
    return lay


def _execute_sharded(lowered, leaves, rt):
    mesh = lowered.mesh
    glob = lowered.stages["traced"]
    if len(leaves) != len(glob.inputs):
        raise SpmdError(f"{glob.name}: expected {len(glob.inputs)} argument leaves, got {len(leaves)}")
    ins, outs_layout = _layout(lowered)
    arrays = []
    for x, (v, sh) in zip(leaves, ins):
        if isinstance(x, Array) and x._sharding == sh and x._runtime is rt and x.dtype.name == v.dtype:
            arrays.append(x)                 # already placed as the program takes it
            continue
        if not isinstance(x, Array):
            x = np.asarray(x, dtype=v.dtype)
        elif x.dtype.name != v.dtype:
            x = x.numpy().astype(v.dtype)
        arrays.append(device_put(x, sh, runtime=rt))
    devices = rt.local_devices(mesh)
    args = {d: [a._handles[d] for a in arrays] for d in devices}
    donated = getattr(lowered, "donated", ())
    if donated:
        _private(args, donated, [a is x for a, x in zip(arrays, leaves)])
    outs = rt.run(lowered.compile(), mesh, args)
    return [Array(v.shape, v.dtype, sh, {d: outs[d][k] for d in devices}, rt)
            for k, (v, sh) in enumerate(outs_layout)]
