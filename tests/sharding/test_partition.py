"""The partitioner on hand-annotated programs: the communication each pattern needs and
no more (halo exchange for stencils, masked local lookups for sharded indexing, local
pieces of iota/constant, reshapes through compound factors), exactness on uneven shards,
outputs never partial, the shape of the per-device program, and clear errors."""
import time

import numpy as np
import pytest

from partition_util import collective_ops, reference, run_partitioned
from spmd.errors import ShardingError
from spmd.ir import Graph
from spmd.ir.ops.names import (
    ADD, ALL_REDUCE, BROADCAST_IN_DIM, CONCATENATE, CONSTANT, DOT_GENERAL, DYNAMIC_SLICE,
    DYNAMIC_UPDATE_SLICE, GATHER, IOTA, MULTIPLY, NEGATE, PAD, REDUCE, RESHAPE, SCATTER, SLICE,
    SUBTRACT, TANH
)
from spmd.sharding import Mesh
from spmd.sharding.partition import partition

M4 = Mesh((4,), ("x",))
M22 = Mesh((2, 2), ("a", "b"))


def graph(mesh, *inputs):
    g = Graph("f")
    g.mesh = mesh
    return g, [g.add_input(shape, dt, sh) for shape, dt, sh in inputs]


def names(pg):
    return [op.name for op in collective_ops(pg)]


def run_and_compare(g, args, exact=True):
    got, pg = run_partitioned(g, args)
    for w, r in zip(reference(g, args), got):
        if exact:
            np.testing.assert_array_equal(r, w)
        else:
            np.testing.assert_allclose(r, w, rtol=1e-5, atol=1e-6)
    return pg


def _diff(g, x, d, sh):
    n = x.shape[d]
    one = (1,) * x.ndim
    a = g.emit(SLICE, x, start=tuple(1 if k == d else 0 for k in range(x.ndim)), limit=x.shape, stride=one)
    b = g.emit(SLICE, x, start=(0,) * x.ndim,
               limit=tuple(n - 1 if k == d else s for k, s in enumerate(x.shape)), stride=one)
    a.sharding = b.sharding = sh
    y = g.emit(SUBTRACT, a, b)
    y.sharding = sh
    return y


@pytest.mark.parametrize("n", [16, 13, 5])
def test_stencil_is_one_halo_exchange(n):
    """x[1:] - x[:-1] on a sharded axis: each device receives one row from its right
    neighbour (a collective_permute of one row); nothing is gathered."""
    sh = M4.sharding("x", None)
    g, (x,) = graph(M4, ((n, 3), "int64", sh))
    g.outputs = [_diff(g, x, 0, sh)]
    pg = run_and_compare(g, [np.arange(n * 3).reshape(n, 3) ** 2])
    cps = collective_ops(pg)
    assert set(names(pg)) == {"collective_permute"}
    if n % 4 == 0:
        assert len(cps) == 1 and cps[0].operands[0].shape == (1, 3)
        assert sorted(cps[0].attrs["pairs"]) == [(1, 0), (2, 1), (3, 2)]
    else:   # shards of x[1:] are smaller than x's: the borders drift, a few halos
        assert all(c.operands[0].shape[0] <= -(-n // 4) for c in cps)    # at most a shard each


def test_pad_and_strided_slice_on_sharded_dim_use_halos():
    sh = M4.sharding("x")
    g, (x,) = graph(M4, ((14,), "int64", sh))
    v = g.emit(CONSTANT, value=np.array(-1, np.int64))
    p = g.emit(PAD, x, v, low=(2,), high=(1,), interior=(1,))
    p.sharding = sh
    s = g.emit(SLICE, p, start=(1,), limit=(28,), stride=(3,))
    s.sharding = sh
    g.outputs = [p, s]
    pg = run_and_compare(g, [np.arange(14) * 7])
    assert set(names(pg)) <= {"collective_permute"}


def test_concatenate_on_sharded_dim():
    sh = M4.sharding("x")
    g, (x, y) = graph(M4, ((8,), "int64", sh), ((8,), "int64", sh))
    c = g.emit(CONCATENATE, x, y, dimension=0)
    c.sharding = sh
    g.outputs = [c]
    pg = run_and_compare(g, [np.arange(8), 100 + np.arange(8)])
    assert set(names(pg)) <= {"collective_permute"}


def test_sharded_lookup_is_masked_not_gathered():
    """An embedding lookup in a vocabulary-sharded table (Megatron): each device looks up
    the rows it holds, zeros elsewhere; one all_reduce of the *result* settles it. The
    table is never gathered."""
    sh = M4.sharding("x", None)
    g, (table, idx) = graph(M4, ((10, 6), "float32", sh), ((5,), "int64", M4.sharding(None)))
    e = g.emit(GATHER, table, idx, axis=0)
    e.sharding = M4.sharding(None, None)
    g.outputs = [e]
    rng = np.random.default_rng(0)
    pg = run_and_compare(g, [rng.standard_normal((10, 6)).astype(np.float32), np.array([0, 9, 3, 3, 7])])
    (ar,) = collective_ops(pg)
    assert ar.name == "all_reduce" and ar.operands[0].shape == (5, 6)


def test_dynamic_slice_of_sharded_dim_moves_only_the_window():
    sh = M4.sharding("x")
    g, (x, s) = graph(M4, ((40,), "int64", sh), ((), "int32", M4.sharding()))
    w = g.emit(DYNAMIC_SLICE, x, s, slice_sizes=(3,))
    w.sharding = M4.sharding(None)
    g.outputs = [w]
    for start in (-4, 0, 8, 9, 10, 38, 50):
        pg = run_and_compare(g, [np.arange(40) * 3, np.array(start, np.int32)])
        (ar,) = collective_ops(pg)
        assert ar.name == "all_reduce" and ar.operands[0].shape == (3,)


def test_updates_of_sharded_dims_need_no_communication():
    sh = M22.sharding("a", "b")
    g, (x, u, i, j) = graph(M22, ((7, 9), "int64", sh), ((3, 4), "int64", M22.sharding(None, None)),
                             ((), "int64", M22.sharding()), ((), "int64", M22.sharding()))
    y = g.emit(DYNAMIC_UPDATE_SLICE, x, u, i, j)
    y.sharding = sh
    idx = g.emit(CONSTANT, value=np.array([0, 6, 3, 6]))
    upd = g.emit(BROADCAST_IN_DIM, g.emit(CONSTANT, value=np.array(5, np.int64)), shape=(7, 4),
                 broadcast_dimensions=())
    upd.sharding = M22.sharding("a", None)
    z = g.emit(SCATTER, y, idx, upd, axis=1)
    z.sharding = sh
    g.outputs = [z]
    for a, b in [(0, 0), (2, 3), (5, 7), (-1, 100)]:
        pg = run_and_compare(g, [np.arange(63).reshape(7, 9), -np.arange(12).reshape(3, 4), np.array(a), np.array(b)])
        assert names(pg) == []


def test_iota_and_constants_are_local_pieces():
    sh = M22.sharding(("a", "b"), None)
    g, _ = graph(M22)
    io = g.emit(IOTA, shape=(10, 3), dtype="int64", dimension=0)
    io.sharding = sh
    c = g.emit(CONSTANT, value=np.arange(30).reshape(10, 3) * 5)
    c.sharding = sh
    s = g.emit(ADD, io, c)
    s.sharding = sh
    g.outputs = [s]
    pg = run_and_compare(g, [])
    assert names(pg) == []
    assert any(op.name == "axis_index" for op in pg.ops)


@pytest.mark.parametrize("kind", ["sum", "max", "min", "prod"])
@pytest.mark.parametrize("n", [8, 7, 5, 1])
def test_reductions_over_uneven_shards_ignore_the_padding(kind, n):
    sh = M4.sharding(None, "x")
    g, (x,) = graph(M4, ((3, n), "int64", sh))
    r = g.emit(REDUCE, x, kind=kind, axes=(1,))
    r.sharding = M4.sharding(None)
    g.outputs = [r]
    rng = np.random.default_rng(n)
    pg = run_and_compare(g, [rng.integers(-4, 5, size=(3, n))])
    (ar,) = collective_ops(pg)
    assert ar.name == "all_reduce" and ar.attrs["reduction"] == kind


def test_contraction_over_uneven_shards_is_exact_and_partial():
    sh = M4.sharding(None, "x")
    g, (a, b) = graph(M4, ((3, 7), "float64", sh), ((7, 2), "float64", M4.sharding("x", None)))
    d = g.emit(DOT_GENERAL, a, b, lhs_batch=(), rhs_batch=(), lhs_contract=(1,), rhs_contract=(0,))
    d.sharding = M4.sharding(None, None, partial="x")
    e = g.emit(MULTIPLY, d, d)           # not linear: the pending sum is settled first
    e.sharding = M4.sharding(None, None)
    g.outputs = [d, e]
    rng = np.random.default_rng(1)
    pg = run_and_compare(g, [rng.standard_normal((3, 7)), rng.standard_normal((7, 2))], exact=False)
    assert names(pg) == ["all_reduce"]      # one, shared by both outputs


def test_reshape_through_compound_factors_needs_no_communication():
    """(8, 6) split on dim 0 -> (48,) -> (4, 2, 6): the split rides the major factor."""
    g, (x,) = graph(M4, ((8, 6), "int64", M4.sharding("x", None)))
    r = g.emit(RESHAPE, x, shape=(48,))
    r.sharding = M4.sharding("x")
    s = g.emit(RESHAPE, r, shape=(4, 2, 6))
    s.sharding = M4.sharding("x", None, None)
    g.outputs = [s]
    pg = run_and_compare(g, [np.arange(48).reshape(8, 6)])
    assert names(pg) == []


def test_split_moves_between_dims_with_one_all_to_all():
    g, (x,) = graph(M22, ((8, 12), "int64", M22.sharding("a", None)))
    y = g.emit(NEGATE, x)
    y.sharding = M22.sharding(None, "a")
    g.outputs = [y]
    pg = run_and_compare(g, [np.arange(96).reshape(8, 12)])
    (a2a,) = collective_ops(pg)
    assert a2a.name == "all_to_all" and a2a.operands[0].shape == (4, 12) and a2a.results[0].shape == (8, 6)


def test_outputs_are_never_partial():
    g, (x, w) = graph(M22, ((4, 6), "float32", M22.sharding(None, "b")), ((6, 2), "float32", M22.sharding("b", None)))
    d = g.emit(DOT_GENERAL, x, w, lhs_batch=(), rhs_batch=(), lhs_contract=(1,), rhs_contract=(0,))
    d.sharding = M22.sharding("a", None, partial="b")
    g.outputs = [d]
    pg = partition(g)
    assert pg.outputs[0].shape == (2, 2)
    assert [(op.name, op.attrs["axes"]) for op in collective_ops(pg)] == [("all_reduce", ("b",))]
    rng = np.random.default_rng(0)
    run_and_compare(g, [rng.standard_normal((4, 6)).astype(np.float32),
                        rng.standard_normal((6, 2)).astype(np.float32)], exact=False)


def test_per_device_program_shape():
    g, (x, y) = graph(M22, ((9, 5), "float32", M22.sharding("a", "b")), ((5,), "int32", M22.sharding(None)))
    z = g.emit(NEGATE, x)
    z.sharding = M22.sharding(None, "a")
    g.outputs = [z, y]
    pg = partition(g)
    assert pg.mesh == M22
    assert [v.shape for v in pg.inputs] == [(5, 3), (5,)]
    assert [v.dtype for v in pg.inputs] == ["float32", "int32"]
    assert [v.shape for v in pg.outputs] == [(9, 3), (5,)]
    assert "all_" in str(pg) and "mesh<a=2, b=2>" in str(pg)


def test_collectives_name_the_user_line():
    g, (x,) = graph(M4, ((8,), "float32", M4.sharding("x")))
    r = g.emit(REDUCE, x, kind="sum", axes=(0,), loc="train.py:12")
    r.sharding = M4.sharding()
    g.outputs = [r]
    (ar,) = collective_ops(partition(g))
    assert ar.loc == "train.py:12"


def test_errors():
    g = Graph("f")
    x = g.add_input((4,), "float32")
    g.outputs = [g.emit(NEGATE, x)]
    with pytest.raises(ShardingError, match="no mesh"):
        partition(g)
    g, (x,) = graph(M4, ((4,), "float32", M4.sharding("x")))
    y = g.emit(ALL_REDUCE, x, axes=("x",), reduction="sum", group_size=4, loc="user.py:3")
    g.outputs = [y]
    with pytest.raises(ShardingError, match=r"all_reduce at user\.py:3"):
        partition(g)


def _mlp_graph(mesh, batch_axis, model_axis):
    g, (x, w1, w2) = graph(mesh, ((4096, 1024), "float32", mesh.sharding(batch_axis, None)),
                           ((1024, 4096), "float32", mesh.sharding(None, model_axis)),
                           ((4096, 1024), "float32", mesh.sharding(model_axis, None)))
    h = g.emit(DOT_GENERAL, x, w1, lhs_batch=(), rhs_batch=(), lhs_contract=(1,), rhs_contract=(0,))
    h.sharding = mesh.sharding(batch_axis, model_axis)
    r = g.emit(TANH, h)
    r.sharding = h.sharding
    o = g.emit(DOT_GENERAL, r, w2, lhs_batch=(), rhs_batch=(), lhs_contract=(1,), rhs_contract=(0,))
    o.sharding = mesh.sharding(batch_axis, None, partial=model_axis)
    g.outputs = [o]
    return g


def test_partitioning_time_does_not_grow_with_devices():
    small, big = Mesh((2, 4), ("data", "model")), Mesh((64, 64), ("data", "model"))
    times, plans = [], []
    for mesh in (small, big, small, big):
        t = time.perf_counter()
        pg = partition(_mlp_graph(mesh, "data", "model"))
        times.append(time.perf_counter() - t)
        plans.append([(op.name, op.attrs["axes"]) for op in collective_ops(pg)])
    assert plans[0] == plans[1] == [("all_reduce", ("model",))]
    assert min(times[1], times[3]) < 5 * min(times[0], times[2]) + 0.01, times
