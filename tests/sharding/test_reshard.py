"""The reshard planner: which collectives it picks for each kind of change, that it
never gathers where all_to_all / reduce_scatter / a local slice would do (and warns,
naming the op and line, when it must), that plans do not depend on the device count,
and that every plan is exact, on even and uneven shapes, run on the local runtime."""
import itertools
import warnings

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from partition_util import assemble, collective_ops, place, run_per_device
from spmd.ir import Graph
from spmd.ir.ops.names import NEGATE
from spmd.sharding import Mesh, Sharding
from spmd.sharding.partition import partition
from spmd.sharding.cost import reshard_cost as plan_cost
from spmd.sharding.reshard import Emitter, ReshardWarning, plan, reshard

M22 = Mesh((2, 2), ("a", "b"))


def kinds(src, dst, shape=(8, 8), dtype="float32"):
    return [(s.kind, s.axes) for s in plan(src, dst, shape, dtype)]


@pytest.mark.parametrize("src,dst,want", [
    # partial -> replicated: all_reduce
    ((None, None, "a"), (None, None, ()), [("all_reduce", ("a",))]),
    # partial -> sharded: reduce_scatter
    ((None, None, "a"), ("a", None, ()), [("reduce_scatter", ("a",))]),
    ((None, None, ("a", "b")), (None, ("a", "b"), ()), [("reduce_scatter", ("a", "b"))]),
    # sharded -> replicated: all_gather
    (("a", None, ()), (None, None, ()), [("all_gather", ("a",))]),
    ((("a", "b"), None, ()), (None, None, ()), [("all_gather", ("a", "b"))]),
    # a split moving between dims: all_to_all
    (("a", None, ()), (None, "a", ()), [("all_to_all", ("a",))]),
    (("a", "b", ()), ("b", "a", ()), None),
    # replicated -> sharded: a local slice, no collective
    ((None, None, ()), ("a", "b", ()), [("slice", ("a",)), ("slice", ("b",))]),
    ((None, None, ()), (("b", "a"), None, ()), [("slice", ("b", "a"))]),
    # same axes of a dim in another order: whole shards trade places
    ((("a", "b"), None, ()), (("b", "a"), None, ()), [("permute", ("a", "b"))]),
    # partial over one axis, sharded over another
    (("b", None, "a"), ("b", "a", ()), [("reduce_scatter", ("a",))]),
])
def test_single_step_plans(src, dst, want):
    s = M22.sharding(src[0], src[1], partial=src[2])
    d = M22.sharding(dst[0], dst[1], partial=dst[2])
    got = kinds(s, d)
    if want is None:    # two moves of one axis each: two all_to_alls, no gather
        assert [k for k, _ in got] == ["all_to_all", "all_to_all"] or \
            all(k in ("all_to_all", "permute") for k, _ in got), got
    else:
        assert sorted(got, key=lambda x: x[1]) == sorted(want, key=lambda x: x[1]) or got == want, got


def test_plan_orders_steps_to_move_fewest_bytes():
    # reduce the pending sum after gathering? no: reduce first (the smaller array), then gather
    s = M22.sharding("b", None, partial="a")
    got = kinds(s, M22.sharding(None, None), shape=(64, 64))
    assert got == [("all_reduce", ("a",)), ("all_gather", ("b",))]


def _all_shardings(mesh, ndim, partial=True):
    opts = [None] + list(mesh.axis_names) + [tuple(p) for p in itertools.permutations(mesh.axis_names, 2)]
    out = []
    for spec in itertools.product(opts, repeat=ndim):
        used = [a for e in spec if e for a in ((e,) if isinstance(e, str) else e)]
        if len(used) != len(set(used)):
            continue
        free = [a for a in mesh.axis_names if a not in used]
        for k in range(len(free) + 1 if partial else 1):
            for p in itertools.combinations(free, k):
                out.append(Sharding(mesh, spec, p))
    return out


def test_never_gathers_where_a_cheaper_collective_would_do():
    """Over every pair of 2-d shardings on a 2x2 mesh (even shape): a plan never holds
    more per device than either end needs unless the change is not one that all_to_all,
    reduce_scatter, permute or a local slice can make, and it costs no more than the
    naive plan (all_reduce, gather everything, slice)."""
    shape = (16, 16)
    shs = _all_shardings(M22, 2)
    for s, d in itertools.product(shs, shs):
        steps = plan(s, d, shape, "float32")
        naive = plan_cost(s, Sharding(M22, (None, None), s.partial), shape, "float32") + \
            plan_cost(Sharding(M22, (None, None), s.partial), M22.sharding(None, None), shape, "float32") + \
            plan_cost(M22.sharding(None, None), d, shape, "float32")
        assert sum(st_.cost for st_ in steps) <= naive + 1e-6, (s, d)
        # a pure dim-to-dim move of one axis group is one all_to_all
        if not s.partial and not d.partial and sorted(s.used_axes) == sorted(d.used_axes):
            assert not any(st_.kind == "all_gather" for st_ in steps) or \
                any(len(s.dim_axes(k)) > 1 or len(d.dim_axes(k)) > 1 for k in range(2)), (s, d, steps)


@pytest.mark.parametrize("small,big", [((2, 2), (64, 64)), ((2, 4), (32, 64))])
def test_plans_do_not_depend_on_the_device_count(small, big):
    small, big = Mesh(small, ("x", "y")), Mesh(big, ("x", "y"))
    for spec_s, spec_d in [(("x", "y"), ("y", "x")), ((None, None), ("x", "y")), (("x", None), (None, "x")),
                           ((("x", "y"), None), (None, None)), (("x", None), ("y", None))]:
        a = [(s.kind, s.axes) for s in plan(small.sharding(*spec_s), small.sharding(*spec_d), (4096, 4096), "float32")]
        b = [(s.kind, s.axes) for s in plan(big.sharding(*spec_s), big.sharding(*spec_d), (4096, 4096), "float32")]
        assert a == b


@pytest.mark.filterwarnings("ignore::spmd.sharding.reshard.ReshardWarning")
@settings(max_examples=120, deadline=None)
@given(st.integers(0, 2 ** 31 - 1))
def test_every_plan_is_exact(seed):
    """Random source and target shardings (tuple specs, partial, uneven sizes) on
    meshes of 2, 4, 2x2, 2x4 and 2x2x2 devices: the planned collectives, run on the local
    runtime, deliver exactly the shards the target says."""
    rng = np.random.default_rng(seed)
    mesh = [Mesh((2,), ("x",)), Mesh((4,), ("x",)), M22, Mesh((2, 4), ("a", "b")),
            Mesh((2, 2, 2), ("a", "b", "c"))][seed % 5]
    shape = tuple(int(rng.choice([1, 3, 4, 5, 8, 9])) for _ in range(int(rng.integers(1, 4))))
    shs = _all_shardings(mesh, len(shape))
    src, dst = shs[rng.integers(len(shs))], shs[rng.integers(len(shs))]
    x = rng.integers(-50, 50, size=shape).astype(np.int64)
    g = Graph("reshard")
    g.mesh = mesh
    em = Emitter(g, mesh)
    y = reshard(em, g.add_input(src.local_shape(shape), "int64"), src, dst, shape)
    # a pending sum cannot be looked at: settle it (a second plan) before comparing
    g.outputs = [reshard(em, y, dst, dst.replace(partial=()), shape)]
    placed = place(x, src, rng)
    res = run_per_device(g, mesh, {d: [placed[d]] for d in range(mesh.size)})
    got = assemble({d: res[d][0] for d in res}, dst.replace(partial=()), shape, "int64")
    np.testing.assert_array_equal(got, x, err_msg=f"{src} -> {dst} on {mesh} for {shape}")


def _run_plan(mesh, src, dst, x):
    g = Graph("reshard")
    g.mesh = mesh
    g.outputs = [reshard(Emitter(g, mesh), g.add_input(src.local_shape(x.shape), x.dtype.name), src, dst, x.shape)]
    placed = place(x, src)
    res = run_per_device(g, mesh, {d: [placed[d]] for d in range(mesh.size)})
    return assemble({d: res[d][0] for d in res}, dst, x.shape, x.dtype), g


@pytest.mark.parametrize("src,dst", [
    ((("a", "b"), "c"), ("b", "c")),          # reorder within a dim, then gather the minor axis
    ((("a", "b"), None), (("b", "a"), None)),
    (("a", ("b", "c")), ("b", ("c", "a"))),   # all shards trade places at once
    (("c", "a"), ("a", "c")),
])
def test_permute_plans_are_exact(src, dst):
    mesh = Mesh((2, 2, 2), ("a", "b", "c"))
    x = np.arange(1024 * 6).reshape(1024, 6)
    s, d = mesh.sharding(*src), mesh.sharding(*dst)
    got, g = _run_plan(mesh, s, d, x)
    np.testing.assert_array_equal(got, x)
    assert "collective_permute" in [op.name for op in g.ops]
    assert "all_to_all" not in [op.name for op in g.ops]


def test_warns_naming_the_op_and_line_when_it_must_gather():
    mesh = Mesh((2, 2), ("a", "b"))
    g = Graph("f")
    g.mesh = mesh
    x = g.add_input((8,), "float32", mesh.sharding("a"))
    y = g.emit(NEGATE, x, loc="model.py:42")
    y.sharding = mesh.sharding("b")
    g.outputs = [y]
    with pytest.warns(ReshardWarning, match=r"negate at model\.py:42"):
        partition(g)


def test_no_warning_for_cheap_reshards():
    g = Graph("f")
    g.mesh = M22
    x = g.add_input((8, 8), "float32", M22.sharding("a", None))
    y = g.emit(NEGATE, x, loc="model.py:7")
    y.sharding = M22.sharding(None, "a")
    g.outputs = [y]
    with warnings.catch_warnings():
        warnings.simplefilter("error", ReshardWarning)
        pg = partition(g)
    assert [op.name for op in collective_ops(pg)] == ["all_to_all"]
