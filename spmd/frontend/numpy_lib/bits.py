"""np.unpackbits and np.packbits on Tracers: the bits of uint8 bytes as elements (big or
little end first) and back, built from shifts, masks, reshapes and a uint8 sum, so a
split dimension stays split (each byte's bits sit next to it)."""
from __future__ import annotations

import numpy as np

from ...errors import user_loc
from .. import core, reductions as red, shapes
from .. import elementwise as ew


def _bit_axis(x, axis, name):
    """(x, axis): numpy packs / unpacks a flattened array when axis is None."""
    if axis is None:
        return shapes.ravel(x), 0
    if x.ndim == 0:
        raise ValueError(f"np.{name} of a 0-d array takes axis=None (at {user_loc()})")
    return x, core.normalize_axis(axis, x.ndim, name)


def _order(bitorder, name):
    if bitorder not in ("big", "little"):
        raise ValueError(f"np.{name}: 'order' must be either 'little' or 'big', got {bitorder!r} (at {user_loc()})")
    return np.arange(7, -1, -1, dtype=np.uint8) if bitorder == "big" else np.arange(8, dtype=np.uint8)


def _along(v, axis, ndim):
    """A length-8 vector standing along the new dim axis + 1 of an ndim + 1 array."""
    return v.reshape((1,) * (axis + 1) + (8,) + (1,) * (ndim - axis - 1))


def unpackbits(a, axis=None, count=None, bitorder="big"):
    x = core.asarray(a)
    if x.dtype != np.uint8:
        raise TypeError(f"np.unpackbits: expected an input array of unsigned byte data type, got {x.dtype} "
                        f"(at {user_loc()})")
    x, axis = _bit_axis(x, axis, "unpackbits")
    shifts = _along(_order(bitorder, "unpackbits"), axis, x.ndim)
    bits = ew.bitwise_and(ew.right_shift(shapes.expand_dims(x, axis + 1), shifts), np.uint8(1))
    n = x.shape[axis] * 8
    out = shapes.reshape(bits, x.shape[:axis] + (n,) + x.shape[axis + 1:])
    if count is None:
        return out
    count = int(count)
    if count < -n:
        raise ValueError(f"np.unpackbits: -count must not exceed the {n} bits available (at {user_loc()})")
    keep = count if count >= 0 else n + count
    key = (slice(None),) * axis + (slice(0, keep),)
    out = out[key]
    if keep > n:          # numpy pads with zero bits
        pad = np.zeros(x.shape[:axis] + (keep - n,) + x.shape[axis + 1:], np.uint8)
        out = shapes.concatenate([out, core.asarray(pad, t=x._tr)], axis)
    return out


def packbits(a, axis=None, bitorder="big"):
    x = core.asarray(a)
    if x.dtype.kind not in "biu":
        raise TypeError(f"np.packbits: expected an input array of integer or boolean data type, got {x.dtype} "
                        f"(at {user_loc()})")
    x, axis = _bit_axis(x, axis, "packbits")
    b = core.astype(ew.not_equal(x, 0), "uint8")
    n = x.shape[axis]
    m = -(-n // 8)
    if m * 8 > n:         # the last byte's missing bits are zeros
        pad = np.zeros(x.shape[:axis] + (m * 8 - n,) + x.shape[axis + 1:], np.uint8)
        b = shapes.concatenate([b, core.asarray(pad, t=x._tr)], axis)
    b = shapes.reshape(b, x.shape[:axis] + (m, 8) + x.shape[axis + 1:])
    weights = _along(np.left_shift(np.uint8(1), _order(bitorder, "packbits")), axis, x.ndim)
    return red.sum(ew.multiply(b, weights), axis=axis + 1, dtype="uint8")


__all__ = ["unpackbits", "packbits"]
