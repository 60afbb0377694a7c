"""Stencils and their boundary conditions on split grids: a boundary-condition write
(`p[:, -1] = p[:, -2]`, `p[0, :] = 0`) moves nothing unless the two lines it touches lie
on two devices, and then only between those two; a sweep's halo is one message per
neighbour; every result equals numpy's, on even and uneven splits."""
import itertools

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import spmd
from spmd.ir.ops.names import REVERSE, ROLL
from spmd.sharding.halo import window_plan

MESHES = {"2x2": spmd.Mesh((2, 2), ("x", "y")), "4": spmd.Mesh((4,), ("x",)), "1x4": spmd.Mesh((1, 4), ("x", "y"))}


def _sharding(mesh):
    return mesh.sharding(*mesh.axis_names) if mesh.ndim == 2 else mesh.sharding("x", None)


def neumann(p):
    p[:, -1] = p[:, -2]
    p[0, :] = p[1, :]
    p[:, 0] = p[:, 1]
    p[-1, :] = 0
    return p


def constant_edges(p):
    p[0, :] = 5.0
    p[:, -1] = -1.0
    return p


def _chunks(n, k):
    c = -(-n // k)
    return [range(i * c, min((i + 1) * c, n)) for i in range(k)]


def _owner(n, k, j):
    return next(i for i, r in enumerate(_chunks(n, k)) if j in r)


@pytest.mark.parametrize("mesh", MESHES, ids=str)
@pytest.mark.parametrize("shape", [(16, 16), (15, 13), (3, 5), (9, 2), (8, 12)])
@pytest.mark.parametrize("fn", [neumann, constant_edges], ids=lambda f: f.__name__)
def test_boundary_conditions_move_only_across_the_edge_they_touch(mesh, shape, fn):
    mesh = MESHES[mesh]
    f = spmd.jit(fn, in_shardings=(_sharding(mesh),))
    x = np.random.default_rng(0).random(shape)
    np.testing.assert_array_equal(np.asarray(f(x.copy())), fn(x.copy()))
    coll = f.lower(x).report()["collectives"]
    assert all(c["op"] == "collective_permute" for c in coll), coll
    if fn is constant_edges:
        assert not coll                                  # constants are on every device
        return
    # p[:, -1] = p[:, -2] moves a column only if columns n-2 and n-1 lie on two devices
    need = 0
    for d, (a, b) in ((1, (-2, -1)), (0, (1, 0)), (1, (1, 0))):
        axis = mesh.axis_names[d] if d < mesh.ndim else None
        k = mesh.shape[d] if axis else 1
        n = shape[d]
        if k > 1 and _owner(n, k, a % n) != _owner(n, k, b % n):
            need += 1
    assert len(coll) == need, coll


def cavity_sweeps(p, b, nit):
    for _ in range(nit):
        pn = p.copy()
        p[1:-1, 1:-1] = 0.25 * (pn[1:-1, 2:] + pn[1:-1, :-2] + pn[2:, 1:-1] + pn[:-2, 1:-1]) - b[1:-1, 1:-1]
        neumann(p)
    return p


@pytest.mark.parametrize("n", [32, 30])
def test_a_sweep_with_its_boundary_conditions_is_one_message_per_neighbour(n):
    mesh = MESHES["2x2"]
    sh = _sharding(mesh)
    f = spmd.jit(cavity_sweeps, in_shardings=(sh, sh), static_argnums=(2,))
    rng = np.random.default_rng(n)
    p, b = rng.random((n, n)), rng.random((n, n))
    coll = f.lower(p, b, 50).report()["collectives"]
    per_sweep = [c for c in coll if c.get("inside")]
    # up, down, left, right: one message each, the whole edge (the columns with the
    # corners they carry), as a hand-written exchange of a ghost layer sends
    assert len(per_sweep) == 4 and all(c["op"] == "collective_permute" for c in per_sweep), per_sweep
    assert sorted(c["bytes"] for c in per_sweep) == [8 * (n // 2)] * 2 + [8 * (n // 2 + 2)] * 2
    np.testing.assert_array_equal(np.asarray(f(p.copy(), b, 50)), cavity_sweeps(p.copy(), b, 50))


# ---------------------------------------------------------------- the window primitive
def _apply_plan(src, k, c_out, m, offset, keep, plan):
    """What window_emit computes, in numpy: each device's chunk of the output."""
    n = len(src)
    c_src = -(-n // k)
    chunks = [np.concatenate([src[i * c_src:(i + 1) * c_src], np.full(c_src - len(src[i * c_src:(i + 1) * c_src]), -7.0)])
              for i in range(k)]
    out = np.full(k * c_out, np.nan)
    for i in range(k):
        parts = []
        for h, lo, hi in plan.pieces:
            j = i + h
            parts.append(chunks[j][lo:hi] if 0 <= j < k else np.full(hi - lo, -9.0))
        buf = np.concatenate(parts) if parts else np.zeros(0)
        buf = np.concatenate([np.full(plan.pad_low, -3.0), buf, np.full(plan.pad_high, -3.0)])
        # dynamic_slice clamps its start into the buffer (a device that needs nothing)
        start = min(max(i * plan.scale + plan.offset, 0), max(len(buf) - plan.width, 0))
        win = buf[start:start + plan.width]
        pos = np.arange(i * c_out, (i + 1) * c_out)
        ok = (pos >= keep[0]) & (pos < keep[1]) & (pos + offset >= 0) & (pos + offset < n)
        out[i * c_out:(i + 1) * c_out] = np.where(ok, win, 0.0)
    return out[:m]


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 6), st.integers(1, 40), st.integers(1, 40), st.integers(-45, 45), st.data())
def test_kept_windows_take_the_right_rows(k, n, m, offset, data):
    lo = data.draw(st.integers(0, m))
    hi = data.draw(st.integers(lo, m))
    c_src, c_out = -(-n // k), -(-m // k)
    plan = window_plan(k, c_src, n, c_out, m, 1, offset, max_hops=k, keep=(lo, hi))
    src = np.arange(n, dtype=np.float64) + 1
    want = np.array([src[j + offset] if lo <= j < hi and 0 <= j + offset < n else 0.0 for j in range(m)])
    if plan.empty:
        assert not np.any(want)
        return
    np.testing.assert_array_equal(_apply_plan(src, k, c_out, m, offset, (lo, hi), plan), want)


def test_a_kept_window_on_one_device_moves_nothing():
    # 16 columns on 2 devices; column 15 taken from column 14: both on device 1
    plan = window_plan(2, 8, 16, 8, 16, 1, -1, keep=(15, 16))
    assert [h for h, _, _ in plan.pieces] == [0]
    # 13 columns on 4 devices (chunks of 4): column 12 (device 3) from 11 (device 2)
    plan = window_plan(4, 4, 13, 4, 13, 1, -1, keep=(12, 13))
    assert [h for h, lo, hi in plan.pieces if hi > lo] == [-1]


@pytest.mark.parametrize("shape, mesh", itertools.product([(12, 10), (7, 9)], ["2x2", "4"]))
def test_a_constant_written_into_a_split_grid_needs_no_message(shape, mesh):
    def f(p):
        p[2:4, :] = 3.0
        p[:, -3:] = np.arange(3.0)
        return p
    mesh = MESHES[mesh]
    g = spmd.jit(f, in_shardings=(_sharding(mesh),))
    x = np.random.default_rng(1).random(shape)
    np.testing.assert_array_equal(np.asarray(g(x.copy())), f(x.copy()))
    assert not g.lower(x).report()["collectives"]


def test_the_halos_of_every_array_a_step_reads_travel_together():
    """u and v both need both neighbours' edges: one message each way carries both (what
    the program runs, `launched`), where the partitioner exchanged each array's."""
    def step(u, v):
        u[1:-1] = u[2:] - v[:-2] + u[:-2] * v[2:]
        return u

    mesh = MESHES["4"]
    sh = _sharding(mesh)
    f = spmd.jit(step, in_shardings=(sh, sh))
    rng = np.random.default_rng(3)
    u, v = rng.random((22, 5)), rng.random((22, 5))
    rep = f.lower(u, v).report()
    assert len(rep["collectives"]) == 4 and len(rep["launched"]) == 2, rep["launched"]
    assert rep["launched_bytes"] == rep["comm_bytes"]
    np.testing.assert_array_equal(np.asarray(f(u.copy(), v)), step(u.copy(), v))


def test_a_cavity_step_is_one_message_per_neighbour_per_sweep():
    import sys
    from paths import ROOT
    sys.path.insert(0, f"{ROOT}/benchmarks")
    from stencil_programs import cavity
    mesh = MESHES["2x2"]
    sh = _sharding(mesh)
    f = spmd.jit(cavity, in_shardings=(sh, sh, sh), static_argnums=(3,))
    rng = np.random.default_rng(4)
    u, v, p = (rng.random((32, 32)) for _ in range(3))
    launched = f.lower(u, v, p, 1).report()["launched"]
    inside = [c for c in launched if c.get("inside")]
    assert len(inside) == 4 and all(c["op"] == "collective_permute" for c in launched)
    assert len(launched) - len(inside) <= 8       # u and v's edges together, then p's
    got = f(u.copy(), v.copy(), p.copy(), 1)
    for g, w in zip(got, cavity(u.copy(), v.copy(), p.copy(), 1)):
        np.testing.assert_array_equal(np.asarray(g), w)


@pytest.mark.parametrize("k, n", [(2, 8), (4, 10), (3, 7), (3, 9), (4, 3)])
def test_a_reversed_split_dim_trades_chunks_with_the_mirror_device(k, n):
    """reverse along a split dim: one collective_permute of a chunk with the mirror
    device (and, when the dim does not divide evenly, a halo the padding's width); never
    a gather."""
    from partition_util import collective_ops, reference, run_partitioned
    from spmd.ir import Graph
    mesh = spmd.Mesh((k,), ("x",))
    sh = mesh.sharding("x", None)
    g = Graph("f")
    g.mesh = mesh
    x = g.add_input((n, 3), "float64", sh)
    y = g.emit(REVERSE, x, dimensions=(0,))
    y.sharding = sh
    g.outputs = [y]
    a = np.arange(n * 3.0).reshape(n, 3)
    (got,), pg = run_partitioned(g, [a])
    np.testing.assert_array_equal(got, reference(g, [a])[0])
    names = [op.name for op in collective_ops(pg)]
    assert names and set(names) == {"collective_permute"}, names
    c = -(-n // k)
    assert all(op.operands[0].shape[0] <= c for op in collective_ops(pg))


@pytest.mark.parametrize("n", [8, 7])
@pytest.mark.parametrize("flip", [lambda a: a[::-1] * 2.0, lambda a: np.flip(a, 0) + a,
                                  lambda a: np.flipud(a)[1:-1], lambda a: np.rot90(a, 2)],
                         ids=["step-1", "flip", "flipud-sliced", "rot90x2"])
def test_numpy_flips_of_a_split_dim_move_chunks_not_the_array(flip, n):
    """numpy's reversals (a[::-1], np.flip, flipud, rot90) trace to the reverse op, whose
    partition trades chunks with the mirror device: no all_gather, and the result is
    numpy's on even and uneven splits."""
    mesh = spmd.Mesh((4,), ("x",))
    f = spmd.jit(flip, in_shardings=(mesh.sharding("x", None),))
    a = np.arange(n * 5.0).reshape(n, 5)
    ops = {c["op"] for c in f.lower(a).report()["collectives"]}
    assert "all_gather" not in ops and "collective_permute" in ops, ops
    np.testing.assert_array_equal(np.asarray(f(a)), flip(a))


@pytest.mark.parametrize("k, n", [(2, 8), (4, 12), (3, 7), (3, 9), (4, 3), (2, 5)])
def test_a_rolled_split_dim_moves_rows_between_devices_shift_over_chunk_apart(k, n):
    """roll along a split dim: each device receives at most two pieces that add up to
    its chunk (one neighbour's edge when the shift is smaller than a chunk), whatever
    the shift; an uneven split rolls twice; never a gather."""
    from partition_util import collective_ops, reference, run_partitioned
    from spmd.ir import Graph
    mesh = spmd.Mesh((k,), ("x",))
    sh = mesh.sharding("x", None)
    c = -(-n // k)
    a = np.arange(n * 3.0).reshape(n, 3)
    for shift in range(1, n):
        g = Graph("f")
        g.mesh = mesh
        x = g.add_input((n, 3), "float64", sh)
        y = g.emit(ROLL, x, shift=shift, dimension=0)
        y.sharding = sh
        g.outputs = [y]
        (got,), pg = run_partitioned(g, [a])
        np.testing.assert_array_equal(got, reference(g, [a])[0])
        np.testing.assert_array_equal(got, np.roll(a, shift, 0))
        ops = collective_ops(pg)
        assert {op.name for op in ops} <= {"collective_permute"}, [op.name for op in ops]
        rows = sum(op.operands[0].shape[0] for op in ops)
        assert rows <= (c if k * c == n else 2 * c), (shift, rows)
        if k * c == n and shift < c:
            assert rows == shift, (shift, rows)


ROLLS = {
    "laplace": lambda a: np.roll(a, 1, 0) + np.roll(a, -1, 0) - 2 * a,
    "two-dims": lambda a: np.roll(np.roll(a, 2, 0), -1, 1) * a,
    "life-neighbours": lambda a: sum(np.roll(np.roll(a, i, 0), j, 1) for i in (-1, 0, 1) for j in (-1, 0, 1)),
    "tuple": lambda a: np.roll(a, (3, 1), (0, 1)),
}


@pytest.mark.parametrize("n", [8, 7])
@pytest.mark.parametrize("name", sorted(ROLLS))
def test_numpy_rolls_of_a_split_grid_exchange_edges_not_the_array(name, n):
    """np.roll on split dims (periodic stencils, the Game of Life's neighbour count)
    traces to the roll op: edges move between neighbours, no all_gather, and the result
    is numpy's, bit for bit, on even and uneven 2x2 splits; its gradient is the roll
    back."""
    roll = ROLLS[name]
    mesh = spmd.Mesh((2, 2), ("x", "y"))
    sh = mesh.sharding("x", "y")
    a = np.arange(n * 6.0).reshape(n, 6) ** 1.5
    f = spmd.jit(roll, in_shardings=(sh,), out_shardings=sh)
    ops = {c["op"] for c in f.lower(a).report()["collectives"]}
    assert ops == {"collective_permute"}, ops
    np.testing.assert_array_equal(np.asarray(f(a)), roll(a))
    w = np.random.default_rng(0).standard_normal(a.shape)
    grad = spmd.jit(spmd.grad(lambda a: (roll(a) * w).sum()), in_shardings=(sh,))
    # every program here is at most quadratic in a: central differences are exact
    loss = lambda a: (roll(a) * w).sum()      # noqa: E731
    basis = np.eye(a.size).reshape(a.size, *a.shape)
    want = np.array([(loss(a + e) - loss(a - e)) / 2 for e in basis]).reshape(a.shape)
    np.testing.assert_allclose(np.asarray(grad(a)), want, rtol=1e-9, atol=1e-6)
