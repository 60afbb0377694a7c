"""The collective IR ops and the LocalCommunicator, on real threads.

Every collective runs as an op of a per-device Graph (compiled by the numpy backend) on
the LocalRuntime, over each axis and axis pair of meshes (2,), (4,), (2, 2), and is
checked against a plain-numpy statement of its semantics computed from the mesh's
device array independently of Mesh.group. Then: determinism, failures (a rank that
raises, one that never arrives, one that skips a collective, mismatched calls), and
the per-device VJPs (dot-product transpose test).
"""
from __future__ import annotations

import functools
import itertools
import threading
import time

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from spmd.backends import compile_graph
from spmd.errors import CollectiveError, ShapeError, SpmdError
from spmd.ir import REGISTRY, Graph
from spmd.ir.ops.names import (
    ALL_GATHER, ALL_REDUCE, ALL_TO_ALL, AXIS_INDEX, COLLECTIVE_PERMUTE, REDUCE_SCATTER
)
from spmd.transports.local import local_communicator as local
from spmd.transports.local.local_runtime import LocalRuntime
from spmd.sharding import Mesh

RT = LocalRuntime()
MESHES = [Mesh((2,), ("x",)), Mesh((4,), ("x",)), Mesh((2, 2), ("x", "y")),
          Mesh((2, 2), ("x", "y"), devices=[[3, 1], [0, 2]])]
DTYPES = ["float32", "float64", "int32", "int64", "bool", "int8", "int16", "uint8", "uint16", "uint32", "uint64"]
COLLECTIVES = ["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "collective_permute", "axis_index"]


def axes_choices(mesh):
    names = mesh.axis_names
    out = [()] + [(a,) for a in names]
    out += [p for p in itertools.permutations(names, 2)]
    return out


def group_of(mesh, d, axes):
    """Independent of Mesh.group: devices sharing d's coordinates off `axes`, ordered
    row-major over `axes` as given."""
    where = {int(dev): c for c, dev in np.ndenumerate(mesh.devices)}
    c = dict(zip(mesh.axis_names, where[d]))
    members = [dev for dev, cc in where.items()
               if all(cc[k] == c[a] for k, a in enumerate(mesh.axis_names) if a not in axes)]

    def key(dev):
        cc = dict(zip(mesh.axis_names, where[dev]))
        return tuple(cc[a] for a in axes)
    return sorted(members, key=key)


def rand(rng, shape, dtype):
    dt = np.dtype(dtype)
    if dt.kind == "f":
        return rng.standard_normal(shape).astype(dt)
    if dt.kind == "b":
        return rng.random(shape) < 0.5
    return rng.integers(-50, 50, size=shape).astype(dt)


def seq_reduce(kind, xs):
    f = {"sum": np.add, "max": np.maximum, "min": np.minimum, "prod": np.multiply}[kind]
    return functools.reduce(f, xs[1:], xs[0].copy())


def run_op(mesh, name, xs, **attrs):
    """One op on every device; xs: {device: local input}. -> {device: result}."""
    g = Graph(name)
    if name == "axis_index":
        g.outputs = [g.emit(name, **attrs)]
    else:
        any_x = next(iter(xs.values()))
        v = g.add_input(any_x.shape, any_x.dtype.name)
        g.outputs = [g.emit(name, v, **attrs)]
    exe = compile_graph(g)
    args = {d: ([] if name == "axis_index" else [xs[d]]) for d in range(mesh.size)}
    return {d: out[0] for d, out in RT.run(exe, mesh, args).items()}


def assert_same(got, want, what):
    assert got.dtype == want.dtype and got.shape == want.shape, f"{what}: {got.dtype}{got.shape} vs {want.dtype}{want.shape}"
    assert np.array_equal(got, want), f"{what}:\n got {got}\nwant {want}"


# ----------------------------------------------------------------------- the registry
def test_collectives_are_registered_as_per_device_ops():
    for name in COLLECTIVES:
        op = REGISTRY[name]
        assert op.family == "collective" and op.needs_comm and op.factors is None, name
        assert op.flops([], None, {}) == 0


def test_shape_rules():
    g = Graph()
    x = g.add_input((4, 6), "float32")
    assert g.emit(ALL_REDUCE, x, axes=("x",), reduction="sum", group_size=2).shape == (4, 6)
    assert g.emit(ALL_GATHER, x, axes=("x",), dimension=1, group_size=3).shape == (4, 18)
    assert g.emit(REDUCE_SCATTER, x, axes=("x",), dimension=1, reduction="max", group_size=3).shape == (4, 2)
    assert g.emit(ALL_TO_ALL, x, axes=("x", "y"), split_dimension=0, concat_dimension=1,
                  group_size=4).shape == (1, 24)
    assert g.emit(COLLECTIVE_PERMUTE, x, axes="x", pairs=((0, 1), (1, 0)), group_size=2).shape == (4, 6)
    v = g.emit(AXIS_INDEX, axes=("x",))
    assert (v.shape, v.dtype) == ((), "int64")
    bad = [("reduce_scatter", dict(axes=("x",), dimension=0, reduction="sum", group_size=3), "does not split"),
           ("all_to_all", dict(axes=("x",), split_dimension=1, concat_dimension=0, group_size=4), "does not split"),
           ("all_reduce", dict(axes=("x",), reduction="mean", group_size=2), "unknown reduction"),
           ("all_gather", dict(axes=("x",), dimension=2, group_size=2), "not a dim"),
           ("collective_permute", dict(axes=("x",), pairs=((0, 1), (1, 1)), group_size=2), "destination twice"),
           ("collective_permute", dict(axes=("x",), pairs=((0, 2),), group_size=2), "group indices"),
           ("all_reduce", dict(axes=("x", "x"), reduction="sum", group_size=4), "distinct")]
    for name, attrs, msg in bad:
        with pytest.raises(ShapeError, match=msg):
            g.emit(name, x, **attrs)


# ----------------------------------------------------------------------- semantics vs numpy
def cases():
    for mesh in MESHES:
        for axes in axes_choices(mesh):
            yield mesh, axes


CASES = list(cases())
CASE_IDS = [f"{m.shape}{'-perm' if not m._default_devices else ''}-{'.'.join(a) or 'none'}" for m, a in CASES]


@pytest.mark.parametrize("mesh,axes", CASES, ids=CASE_IDS)
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_collectives_match_numpy(mesh, axes, data):
    seed = data.draw(st.integers(0, 2**16), "seed")
    rng = np.random.default_rng(seed)
    dtype = data.draw(st.sampled_from(DTYPES), "dtype")
    ndim = data.draw(st.integers(0, 3), "ndim")
    shape = [data.draw(st.integers(0, 3), f"dim{k}") for k in range(ndim)]
    xs = {d: rand(rng, shape, dtype) for d in range(mesh.size)}
    # both paths: inputs copied into the exchange (small), or read in place (large)
    small_limit = data.draw(st.sampled_from([local.SMALL_BYTES, 0]), "small_limit")
    saved, local.SMALL_BYTES = local.SMALL_BYTES, small_limit
    try:
        check_all(mesh, axes, data, rng, dtype, shape, xs)
    finally:
        local.SMALL_BYTES = saved


def check_all(mesh, axes, data, rng, dtype, shape, xs):
    G = int(np.prod([mesh.axis_size(a) for a in axes], dtype=np.int64))
    ndim = len(shape)
    groups = {d: group_of(mesh, d, axes) for d in range(mesh.size)}
    idx = {d: groups[d].index(d) for d in range(mesh.size)}
    what = f"{mesh} axes={axes} {dtype}{shape}"

    # all_reduce (bool: max/min only, as numpy's or/and; sum of bools is also or)
    kinds = ["max", "min", "sum"] if dtype == "bool" else ["sum", "max", "min", "prod"]
    kind = data.draw(st.sampled_from(kinds), "reduction")
    got = run_op(mesh, "all_reduce", xs, axes=axes, reduction=kind, group_size=G)
    for d in range(mesh.size):
        want = seq_reduce(kind, [xs[j] for j in groups[d]])
        assert_same(got[d], want, f"all_reduce {kind} {what} on {d}")

    # permute: a random partial map (each dst at most once; a src may send twice)
    dsts = data.draw(st.lists(st.integers(0, G - 1), unique=True, max_size=G), "dsts")
    pairs = tuple((data.draw(st.integers(0, G - 1), f"src{t}"), t) for t in dsts)
    got = run_op(mesh, "collective_permute", xs, axes=axes, pairs=pairs, group_size=G)
    for d in range(mesh.size):
        src = {t: s for s, t in pairs}.get(idx[d])
        want = np.zeros_like(xs[d]) if src is None else xs[groups[d][src]]
        assert_same(got[d], want, f"permute {pairs} {what} on {d}")

    if ndim == 0:
        return
    d1 = data.draw(st.integers(0, ndim - 1), "d1")
    d2 = data.draw(st.integers(0, ndim - 1), "d2")

    # all_gather along d1
    got = run_op(mesh, "all_gather", xs, axes=axes, dimension=d1, group_size=G)
    for d in range(mesh.size):
        assert_same(got[d], np.concatenate([xs[j] for j in groups[d]], axis=d1), f"all_gather {what} on {d}")

    # reduce_scatter / all_to_all need dims that divide: make one that does
    shape2 = list(shape)
    shape2[d1] = G * data.draw(st.integers(0, 2), "blocks")
    ys = {d: rand(rng, shape2, dtype) for d in range(mesh.size)}
    got = run_op(mesh, "reduce_scatter", ys, axes=axes, dimension=d1, reduction=kind, group_size=G)
    for d in range(mesh.size):
        full = seq_reduce(kind, [ys[j] for j in groups[d]])
        assert_same(got[d], np.split(full, G, axis=d1)[idx[d]], f"reduce_scatter {kind} {what} on {d}")

    got = run_op(mesh, "all_to_all", ys, axes=axes, split_dimension=d1, concat_dimension=d2, group_size=G)
    for d in range(mesh.size):
        want = np.concatenate([np.split(ys[j], G, axis=d1)[idx[d]] for j in groups[d]], axis=d2)
        assert_same(got[d], want, f"all_to_all {d1}->{d2} {what} on {d}")


@pytest.mark.parametrize("mesh", MESHES, ids=lambda m: str(m.shape) + ("-perm" if not m._default_devices else ""))
def test_axis_index(mesh):
    for axes in axes_choices(mesh):
        got = run_op(mesh, "axis_index", {}, axes=axes)
        for d in range(mesh.size):
            where = {int(dev): c for c, dev in np.ndenumerate(mesh.devices)}[d]
            c = dict(zip(mesh.axis_names, where))
            want = 0
            for a in axes:
                want = want * mesh.axis_size(a) + c[a]
            assert_same(got[d], np.array(want, np.int64), f"axis_index {axes} on {d}")


def test_communicator_broadcast_and_barrier():
    mesh = MESHES[2]
    hits = []

    def prog(inputs, comm):
        (x,) = inputs
        b = comm.broadcast(x, ("y",), root=1)
        hits.append(comm.rank)
        comm.barrier()
        assert len(hits) == 4          # nobody passes the barrier before all arrived
        return [b]

    out = RT.run(prog, mesh, {d: [np.full(3, float(d))] for d in range(4)})
    for d in range(4):
        assert np.array_equal(out[d][0], np.full(3, float(group_of(mesh, d, ("y",))[1])))


def test_results_do_not_alias_inputs_or_each_other():
    """Results are new arrays: writing to one changes no input and no other rank's result."""
    mesh = MESHES[1]
    xs = {d: np.arange(6.0) + d for d in range(4)}
    keep = {d: x.copy() for d, x in xs.items()}
    for name, attrs in [("all_reduce", dict(reduction="max")), ("all_gather", dict(dimension=0)),
                        ("collective_permute", dict(pairs=((0, 0), (0, 1), (2, 3)))),
                        ("all_to_all", dict(split_dimension=0, concat_dimension=0)),
                        ("reduce_scatter", dict(dimension=0, reduction="sum"))]:
        if name in ("all_to_all", "reduce_scatter"):
            xs2 = {d: np.arange(8.0) + d for d in range(4)}
        else:
            xs2 = xs
        got = run_op(mesh, name, xs2, axes=("x",), group_size=4, **attrs)
        before = {d: got[d].copy() for d in got}
        for d in got:
            got[d][...] = -1
        assert all(np.array_equal(xs[d], keep[d]) for d in xs), name
        ids = {id(v) for v in got.values()}
        assert len(ids) == 4, name
        assert any(not np.array_equal(before[d], got[d]) for d in got) or all(v.size == 0 for v in got.values())


# ----------------------------------------------------------------------- determinism
@pytest.mark.parametrize("n", [1001, 100_003])        # small (copied) and large (in place, blockwise)
def test_all_reduce_is_bit_identical_on_every_rank_and_in_group_order(n):
    mesh = Mesh((4,), ("x",))
    rng = np.random.default_rng(1)
    # values whose float32 sum depends on the order of addition
    xs = {d: (rng.standard_normal(n) * 10.0 ** rng.integers(-4, 5, n)).astype(np.float32) for d in range(4)}
    want = seq_reduce("sum", [xs[d] for d in range(4)])
    assert not np.array_equal(want, seq_reduce("sum", [xs[d] for d in (3, 1, 2, 0)])), "test data too tame"
    for _ in range(5):
        got = run_op(mesh, "all_reduce", xs, axes=("x",), reduction="sum", group_size=4)
        for d in range(4):
            assert got[d].tobytes() == want.tobytes()


# ----------------------------------------------------------------------- failures
def test_group_size_mismatch_is_an_error():
    with pytest.raises(SpmdError, match="groups of 4 devices.*has 2"):
        run_op(MESHES[0], "all_reduce", {0: np.ones(2), 1: np.ones(2)}, axes=("x",), reduction="sum", group_size=4)


def test_a_rank_that_raises_fails_the_run_promptly(monkeypatch):
    monkeypatch.setenv("SPMD_COLLECTIVE_TIMEOUT", "60")
    mesh = Mesh((4,), ("x",))

    def prog(inputs, comm):
        (x,) = inputs
        x = comm.all_reduce(x, ("x",))
        if comm.rank == 2:
            raise ValueError("boom on purpose")
        return [comm.all_gather(x, ("x",))]

    t0 = time.monotonic()
    with pytest.raises(ValueError, match="boom on purpose") as e:
        RT.run(prog, mesh, {d: [np.ones(2)] for d in range(4)})
    assert time.monotonic() - t0 < 5
    assert "rank 2" in " ".join(getattr(e.value, "__notes__", []))
    # an spmd error carries the rank in its message
    g = Graph()
    v = g.add_input((2,), "float64")
    g.outputs = [g.emit(ALL_GATHER, v, axes=("x",), dimension=0, group_size=4)]
    exe = compile_graph(g)

    def prog2(inputs, comm):
        if comm.rank == 1:
            raise SpmdError("bad shard")
        return exe(inputs, comm)

    with pytest.raises(SpmdError, match="rank 1: bad shard"):
        RT.run(prog2, mesh, {d: [np.ones(2)] for d in range(4)})
    # the runtime is still usable
    out = RT.run(exe, mesh, {d: [np.full(2, float(d))] for d in range(4)})
    assert np.array_equal(out[3][0], np.repeat(np.arange(4.0), 2))


def test_a_rank_that_never_arrives_times_out_naming_it(monkeypatch):
    monkeypatch.setenv("SPMD_COLLECTIVE_TIMEOUT", "0.3")
    mesh = Mesh((4,), ("x",))
    release = threading.Event()

    def prog(inputs, comm):
        if comm.rank == 3:
            release.wait(10)            # stuck (in a long computation, say)
        return [comm.all_reduce(inputs[0], ("x",))]

    t0 = time.monotonic()
    with pytest.raises(CollectiveError, match=r"timed out after 0.3 s waiting for rank\(s\) \[3\]"):
        RT.run(prog, mesh, {d: [np.ones(2)] for d in range(4)})
    assert time.monotonic() - t0 < 3
    release.set()
    out = RT.run(lambda i, c: [c.all_reduce(i[0], ("x",))], mesh, {d: [np.ones(2)] for d in range(4)})
    assert np.array_equal(out[0][0], np.full(2, 4.0))


def test_a_rank_that_skips_a_collective_fails_fast(monkeypatch):
    monkeypatch.setenv("SPMD_COLLECTIVE_TIMEOUT", "60")
    mesh = Mesh((2, 2), ("x", "y"))

    def prog(inputs, comm):
        if comm.rank == 1:
            return [inputs[0]]
        return [comm.all_reduce(inputs[0], ("x", "y"))]

    t0 = time.monotonic()
    with pytest.raises(CollectiveError, match=r"rank\(s\) \[1\] finished the program without joining"):
        RT.run(prog, mesh, {d: [np.ones(2)] for d in range(4)})
    assert time.monotonic() - t0 < 5


def test_mismatched_collectives_are_reported():
    mesh = Mesh((2,), ("x",))

    def prog(inputs, comm):
        if comm.rank == 0:
            return [comm.all_gather(inputs[0], ("x",))]
        return [comm.all_reduce(inputs[0], ("x",))]

    with pytest.raises(CollectiveError, match="does not agree"):
        RT.run(prog, mesh, {d: [np.ones(2)] for d in range(2)})

    def prog2(inputs, comm):
        return [comm.all_reduce(inputs[0][: 1 + comm.rank], ("x",))]

    with pytest.raises(CollectiveError, match=r"float64\[1\].*float64\[2\]|float64\[2\].*float64\[1\]"):
        RT.run(prog2, mesh, {d: [np.ones(2)] for d in range(2)})


def test_needs_a_communicator():
    g = Graph()
    v = g.add_input((2,), "float32")
    g.outputs = [g.emit(ALL_REDUCE, v, axes=("x",), reduction="sum", group_size=2)]
    with pytest.raises(SpmdError, match="needs a communicator"):
        compile_graph(g)([np.ones(2, np.float32)])


# ----------------------------------------------------------------------- per-device VJPs
LINEAR = [("all_reduce", dict(reduction="sum"), (3, 4)),
          ("all_gather", dict(dimension=1), (3, 4)),
          ("reduce_scatter", dict(dimension=1, reduction="sum"), (3, 4)),
          ("all_to_all", dict(split_dimension=1, concat_dimension=0), (3, 4)),
          ("collective_permute", dict(pairs=((0, 1), (1, 2), (2, 3), (3, 0))), (3, 4)),
          ("collective_permute", dict(pairs=((0, 0), (0, 1), (2, 3))), (3, 4))]


@pytest.mark.parametrize("name,attrs,shape", LINEAR, ids=[f"{n}{i}" for i, (n, _, _) in enumerate(LINEAR)])
def test_vjp_is_the_transpose(name, attrs, shape):
    """For a linear collective C over ranks: sum_r <ct_r, C(x)_r> == sum_r <C^T(ct)_r, x_r>."""
    mesh = Mesh((2, 2), ("x", "y"))
    g = Graph()
    x = g.add_input(shape, "float64")
    y = g.emit(name, x, axes=("y", "x"), group_size=4, **attrs)
    ct = g.add_input(y.shape, "float64")
    (t,) = REGISTRY[name].vjp(g, y.producer, ct)
    g.outputs = [y, t]
    rng = np.random.default_rng(0)
    args = {d: [rng.standard_normal(shape), rng.standard_normal(y.shape)] for d in range(4)}
    out = RT.run(compile_graph(g), mesh, args)
    lhs = sum(float(np.vdot(args[d][1], out[d][0])) for d in range(4))
    rhs = sum(float(np.vdot(out[d][1], args[d][0])) for d in range(4))
    assert abs(lhs - rhs) < 1e-9 * max(1.0, abs(lhs)), (lhs, rhs)


def test_all_reduce_max_vjp_goes_to_the_maximum():
    mesh = Mesh((2,), ("x",))
    g = Graph()
    x = g.add_input((3,), "float64")
    y = g.emit(ALL_REDUCE, x, axes=("x",), reduction="max", group_size=2)
    ct = g.add_input((3,), "float64")
    (t,) = REGISTRY["all_reduce"].vjp(g, y.producer, ct)
    g.outputs = [t]
    args = {0: [np.array([1.0, 5.0, 2.0]), np.array([1.0, 1.0, 1.0])],
            1: [np.array([3.0, 0.0, 2.0]), np.array([2.0, 2.0, 2.0])]}
    out = RT.run(compile_graph(g), mesh, args)
    # d(sum_r max)/dx: the total cotangent 3 goes to the arg max, ties split it
    assert np.array_equal(out[0][0], [0.0, 3.0, 1.5])
    assert np.array_equal(out[1][0], [3.0, 0.0, 1.5])


def test_inputs_may_be_reused_once_the_collective_returns():
    """A backend that writes into its input buffer right after a collective (in-place
    reuse) must not change what other ranks receive: the collective returns only after
    every rank has read it."""
    mesh = Mesh((8,), ("x",))
    n = 50_000

    def prog(inputs, comm):
        x = inputs[0]
        outs = []
        for name, f in [("gather", lambda: comm.all_gather(x, ("x",))),
                        ("reduce", lambda: comm.all_reduce(x, ("x",))),
                        ("a2a", lambda: comm.all_to_all(x, ("x",), 0, 0)),
                        ("permute", lambda: comm.permute(x, ("x",), [(j, (j + 1) % 8) for j in range(8)]))]:
            outs.append(f())
            x[...] = -1.0                    # reuse the buffer
            x[...] = np.arange(n) + comm.rank
        return outs

    for _ in range(3):
        out = RT.run(prog, mesh, {d: [np.arange(n, dtype=np.float64) + d] for d in range(8)})
        base = np.arange(n, dtype=np.float64)
        for d in range(8):
            g, r, a, p = out[d]
            assert np.array_equal(g, np.concatenate([base + j for j in range(8)]))
            assert np.array_equal(r, 8 * base + 28)
            assert np.array_equal(a, np.concatenate([(base + j)[d * n // 8:(d + 1) * n // 8] for j in range(8)]))
            assert np.array_equal(p, base + (d - 1) % 8)
