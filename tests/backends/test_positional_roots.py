"""A positional value (computed from the rank's place and constants alone: a vocabulary
shard's mask) that an op outside kernels reads is a kernel of its own (backends/llvm/fuse.py), so the program stays one native segment instead of
running compare, broadcast and select through numpy between two; the results are
numpy's."""
from __future__ import annotations

import numpy as np
import pytest

from spmd.backends.llvm import compile_llvm
from spmd.ir import Graph
from spmd.ir.ops.names import ADD, AXIS_INDEX, BROADCAST_IN_DIM, COMPARE, CONSTANT, DOT_GENERAL, SELECT
from spmd.sharding import Mesh
from spmd.transports.local.local_runtime import LocalRuntime

RT = LocalRuntime()


def masked_program(dtype):
    """mask = (axis_index(y) == 1) broadcast to (8, 4); s = where(mask, 2, -1);
    outputs s @ w (a BLAS step reading s) and s + 0 (a kernel reading s)."""
    g = Graph("masked")
    w = g.add_input((4, 3), dtype)
    here = g.emit(COMPARE, g.emit(AXIS_INDEX, axes=("y",)), g.emit(CONSTANT, value=np.array(1, np.int64)),
                  direction="EQ")
    mask = g.emit(BROADCAST_IN_DIM, here, shape=(8, 4), broadcast_dimensions=())

    def splat(v):
        return g.emit(BROADCAST_IN_DIM, g.emit(CONSTANT, value=np.array(v, dtype)), shape=(8, 4),
                      broadcast_dimensions=())
    s = g.emit(SELECT, mask, splat(2), splat(-1))
    prod = g.emit(DOT_GENERAL, s, w, lhs_batch=(), rhs_batch=(), lhs_contract=(1,), rhs_contract=(0,))
    g.outputs = [prod, g.emit(ADD, s, splat(0))]
    return g


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_mask_a_dot_reads_is_a_kernel_and_the_step_one_segment(dtype):
    exe = compile_llvm(masked_program(dtype))
    sched = exe.schedule(1, True, "process")
    assert sched.only_segment() is not None
    mesh = Mesh((1, 2), ("x", "y"))
    w = np.arange(12, dtype=dtype).reshape(4, 3)
    got = RT.run(exe, mesh, {d: [w] for d in range(2)})
    for d in range(2):
        s = np.full((8, 4), 2 if d == 1 else -1, dtype)
        np.testing.assert_array_equal(got[d][1], s)
        np.testing.assert_array_equal(got[d][0], s @ w)
