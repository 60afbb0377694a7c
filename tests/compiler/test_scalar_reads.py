"""Element reads of one array (a per-point Python loop's u[i, j]) are batched into one
gather before propagation (passes/scalar_reads.py): the partitioned program holds a
couple of collectives, not two per read, and the values are numpy's."""
import numpy as np
import pytest

import spmd
from write_programs import per_point

MESH = spmd.Mesh((2, 2), ("x", "y"))


@pytest.mark.parametrize("n", [5, 9])
def test_element_reads_of_a_split_array_gather_once(n):
    u = np.random.default_rng(n).random((n, n))
    f = spmd.jit(per_point(n), in_shardings=(MESH.sharding("x", "y"),))
    low = f.lower(u)
    collectives = [op for op in low.stages["partitioned"].ops if op.opdef.family == "collective"]
    reads = 4 * (n - 2) ** 2
    assert len(collectives) <= 4 < reads, [op.name for op in collectives]
    np.testing.assert_array_equal(np.asarray(f(u.copy())), per_point(n)(u.copy()))


def test_few_or_scattered_reads_are_left_alone():
    from spmd.compiler.passes.scalar_reads import BOX_LIMIT, _plan
    from spmd.ir import Value
    big = Value((100000, 1000), "float64")
    corners = [(0, 0), (99999, 999), (0, 999), (99999, 0)]
    assert _plan(big, corners) is not None                 # a 2x2 box
    diagonal = [(i * 1000, i) for i in range(BOX_LIMIT // 16 + 1)]
    assert _plan(big, diagonal) is None                     # its box would be huge


def test_reads_inside_a_loop_body_and_of_a_written_value():
    def step(u):
        s = 0.0
        for k in range(6):
            s = s + u[k, 1] * u[k + 1, 2]
        u[0, 0] = s
        return u[0, 0] + u[3, 3] + u[2, 2] + u[1, 1] + u[4, 0], u
    u = np.random.default_rng(0).random((8, 4))
    f = spmd.jit(step, in_shardings=(MESH.sharding("x", "y"),))
    got = f(u.copy())
    want = step(u.copy())
    np.testing.assert_allclose(np.asarray(got[0]), want[0], rtol=1e-15)
    np.testing.assert_array_equal(np.asarray(got[1]), want[1])
