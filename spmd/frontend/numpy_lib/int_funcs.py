"""numpy's integer ufuncs np.gcd, np.lcm and np.bitwise_count on Tracers: Euclid's
algorithm as one traced while loop (elementwise, so it partitions like its operands), and
a population count by the usual shift-and-mask steps."""
from __future__ import annotations

import numpy as np

from ...errors import user_loc
from ...ir import dtypes
from .. import core
from .. import elementwise as ew
from .. import reductions as red
from ..control import while_loop


def _int_operands(name, *xs):
    t = core.trace_of(*xs)
    dt = core.result_dtype(*xs)
    if dt == "bool":
        dt = "int8"         # numpy's loops for bools are int8's
    if np.dtype(dt).kind not in "iu":
        raise TypeError(f"ufunc '{name}' not supported for the input types (numpy raises the same TypeError "
                        f"for {dt}; at {user_loc()})")
    if dt not in dtypes.DTYPES:
        raise NotImplementedError(f"np.{name} of {dt} under spmd.jit (at {user_loc()}): spmd has no {dt} arrays")
    xs = [core.asarray(x, dt, t) for x in xs]
    shape = np.broadcast_shapes(*[x.shape for x in xs])
    return [core.broadcast_to(x, shape) for x in xs]


def gcd(x1, x2):
    """np.gcd: the greatest common divisor of |x1| and |x2| (0 for two zeros)."""
    a, b = _int_operands("gcd", x1, x2)
    a, b = ew.absolute(a), ew.absolute(b)
    zero, one = a.dtype.type(0), a.dtype.type(1)

    def more(c):
        return red.any(ew.not_equal(c[1], zero))

    def step(c):
        x, y = c
        done = ew.equal(y, zero)
        r = ew.mod(x, ew.where(done, one, y))
        return ew.where(done, x, y), ew.where(done, y, r)
    return while_loop(more, step, (a, b))[0]


def lcm(x1, x2):
    """np.lcm: |x1 // gcd(x1, x2) * x2|, and 0 when either is 0."""
    a, b = _int_operands("lcm", x1, x2)
    g = gcd(a, b)
    zero = a.dtype.type(0)
    safe = ew.where(ew.equal(g, zero), a.dtype.type(1), g)
    return ew.absolute(ew.multiply(ew.floor_divide(a, safe), b))


_M1, _M2, _M4, _H01 = (np.int64(v) for v in (0x5555555555555555, 0x3333333333333333, 0x0F0F0F0F0F0F0F0F,
                                             0x0101010101010101))


def bitwise_count(x):
    """np.bitwise_count: the number of one bits of |x| (uint8)."""
    if "uint8" not in dtypes.DTYPES:
        raise NotImplementedError(f"np.bitwise_count under spmd.jit (at {user_loc()}): its result is uint8, "
                                  f"which spmd does not have yet")
    x = core.asarray(x)
    if x.dtype.kind not in "biu":
        raise TypeError(f"ufunc 'bitwise_count' not supported for the input types (numpy raises the same "
                        f"TypeError for {x.dtype}; at {user_loc()})")
    # in int64, so |int32 min| is exact; |int64 min| keeps its one bit, as numpy counts it
    v = ew.absolute(core.astype(x, "int64"))
    v = ew.subtract(v, ew.bitwise_and(ew.right_shift(v, np.int64(1)), _M1))
    v = ew.add(ew.bitwise_and(v, _M2), ew.bitwise_and(ew.right_shift(v, np.int64(2)), _M2))
    v = ew.bitwise_and(ew.add(v, ew.right_shift(v, np.int64(4))), _M4)
    v = ew.right_shift(ew.multiply(v, _H01), np.int64(56))
    return core.astype(v, "uint8")


__all__ = ["gcd", "lcm", "bitwise_count"]
