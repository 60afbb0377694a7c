"""Pad, concatenate and dynamic_slice fused into loop kernels as guarded loads, and the
index-set splitting that decides guards and iota masks per region (backends/llvm:
emitters.emit_pieces, codegen regions, index_sets.py), against the numpy backend: random
programs of those ops (hypothesis) bit for bit, the regions' edge cases (empty pieces,
regions one wide, tests that differ per device), and stencils on random meshes with even
and uneven splits."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import spmd
from spmd.backends import compile_graph
from spmd.backends.llvm import compile_llvm
from spmd.backends.llvm.executable import KernelStep
from spmd.backends.llvm.index_sets import Pos, InRange, breakpoints, capped, decided, intervals, truth
from spmd.ir import Graph
from spmd.ir.ops.names import (
    ADD, BROADCAST_IN_DIM, COMPARE, CONCATENATE, CONSTANT, DYNAMIC_SLICE, IOTA, MULTIPLY, NEGATE,
    PAD, REDUCE, REVERSE, SELECT, SLICE
)


def same(got, want):
    for a, b in zip(got, want):
        assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, a.dtype, b.shape, b.dtype)
        assert np.array_equal(a, b, equal_nan=True), f"\n got {a}\nwant {b}"


def kernel_count(exe):
    return sum(isinstance(s, KernelStep) for s in exe.steps)


# -------------------------------------------------------------------- random programs
# a program: x -> a chain of re-indexing steps (pad, slice, concatenate with a shifted
# copy, dynamic slice at runtime starts, a select on an iota range test, a reverse: an
# index coefficient of -1 under the guards), then an
# elementwise op so the chain is one kernel, optionally summed (int: exact)
@st.composite
def programs(draw):
    ndim = draw(st.integers(1, 3))
    shape = tuple(draw(st.lists(st.integers(1, 7), min_size=ndim, max_size=ndim)))
    dtype = draw(st.sampled_from(["float64", "int32"]))
    steps = draw(st.lists(st.sampled_from(["pad", "slice", "concat", "dslice", "mask", "rev"]), min_size=1, max_size=4))
    params = [draw(st.lists(st.integers(-3, 9), min_size=4 * ndim, max_size=4 * ndim)) for _ in steps]
    reduce = draw(st.booleans()) and dtype == "int32"
    return shape, dtype, list(zip(steps, params)), reduce


def build(shape, dtype, steps, reduce):
    g = Graph("guarded")
    x = g.add_input(shape, dtype)
    fill = g.add_input((), dtype)
    args = [np.arange(int(np.prod(shape)), dtype=dtype).reshape(shape) * 3 - 5, np.array(-7, dtype)]
    v = x
    for kind, p in steps:
        n = len(v.shape)
        if kind == "pad":
            lo = tuple(abs(a) % 3 for a in p[:n])
            hi = tuple(abs(a) % 3 for a in p[n:2 * n])
            v = g.emit(PAD, v, fill, low=lo, high=hi, interior=(0,) * n)
        elif kind == "slice":
            start = tuple(min(abs(a) % 3, s) for a, s in zip(p[:n], v.shape))
            limit = tuple(max(st_, s - abs(b) % 3) for st_, b, s in zip(start, p[n:2 * n], v.shape))
            v = g.emit(SLICE, v, start=start, limit=limit, stride=(1,) * n)
        elif kind == "concat":
            d = abs(p[0]) % n
            k = min(abs(p[1]) % 3, v.shape[d])            # (an empty piece too)
            part = g.emit(SLICE, v, start=(0,) * n,
                          limit=tuple(k if e == d else s for e, s in enumerate(v.shape)), stride=(1,) * n)
            v = g.emit(CONCATENATE, part, v, part, dimension=d)
        elif kind == "dslice":
            sizes = tuple(max(0, s - abs(a) % 3) for a, s in zip(p[:n], v.shape))
            starts = []
            for a in p[n:2 * n]:              # out of range on purpose: numpy's clamping
                starts.append(g.add_input((), "int64"))
                args.append(np.array(a, np.int64))
            v = g.emit(DYNAMIC_SLICE, v, *starts, slice_sizes=sizes)
        elif kind == "rev":
            v = g.emit(REVERSE, v, dimensions=tuple(sorted({abs(a) % n for a in p[:2]})))
        else:                                 # a select on a range test of positions
            d = abs(p[0]) % n
            io = g.emit(IOTA, shape=v.shape, dtype="int64", dimension=d)
            c = g.emit(BROADCAST_IN_DIM, g.emit(CONSTANT, value=np.array(p[1] % 5, np.int64)),
                       shape=v.shape, broadcast_dimensions=())
            m = g.emit(COMPARE, io, c, direction=["GE", "LT", "EQ", "NE"][abs(p[2]) % 4])
            other = g.emit(BROADCAST_IN_DIM, fill, shape=v.shape, broadcast_dimensions=())
            v = g.emit(SELECT, m, v, other)
    one = g.emit(BROADCAST_IN_DIM, g.emit(CONSTANT, value=np.array(1, dtype)), shape=v.shape,
                 broadcast_dimensions=())
    v = g.emit(ADD, v, one)
    g.outputs = [g.emit(REDUCE, v, kind="sum", axes=tuple(range(len(v.shape)))) if reduce else v]
    return g, args


@settings(max_examples=60, deadline=None)
@given(programs())
def test_random_guarded_load_programs_match_the_numpy_backend(prog):
    g, args = build(*prog)
    exe = compile_llvm(g)
    # every guarded load is computed inside the one kernel (nothing copied on its own)
    assert kernel_count(exe) == 1 and all(isinstance(s, KernelStep) for s in exe.steps), exe.plan
    same(exe(list(args)), compile_graph(g, "numpy")(list(args)))


def test_a_chain_of_guarded_loads_is_one_kernel():
    """pad(slice(concatenate(pad(x), x))) + 1: one kernel, nothing materialised between."""
    g = Graph("chain")
    x, f = g.add_input((6, 5), "float64"), g.add_input((), "float64")
    p = g.emit(PAD, x, f, low=(1, 0), high=(0, 2), interior=(0, 0))
    c = g.emit(CONCATENATE, p, g.emit(PAD, x, f, low=(1, 0), high=(0, 2), interior=(0, 0)), dimension=0)
    s = g.emit(SLICE, c, start=(2, 1), limit=(12, 7), stride=(1, 1))
    out = g.emit(PAD, s, f, low=(1, 1), high=(1, 1), interior=(0, 0))
    g.outputs = [g.emit(MULTIPLY, out, out)]
    exe = compile_llvm(g)
    assert kernel_count(exe) == 1 and len(exe.steps) == 1
    args = [np.random.default_rng(0).standard_normal((6, 5)), np.array(0.5)]
    same(exe(args), compile_graph(g, "numpy")(args))


def test_a_pad_with_interior_padding_runs_on_its_own():
    g = Graph("interior")
    x, f = g.add_input((4,), "float64"), g.add_input((), "float64")
    g.outputs = [g.emit(NEGATE, g.emit(PAD, x, f, low=(1,), high=(0,), interior=(2,)))]
    exe = compile_llvm(g)
    assert any(not isinstance(s, KernelStep) for s in exe.steps)
    args = [np.arange(4.0), np.array(9.0)]
    same(exe(args), compile_graph(g, "numpy")(args))


# ------------------------------------------------------------------- the regions
def test_intervals_cut_where_tests_change_and_drop_empty_pieces():
    assert intervals([], 5) == [(0, 5)]
    assert intervals([0, 5, 7, -1], 5) == [(0, 5)]                # cuts at the ends: none
    assert intervals([1, 4, 4, 1], 5) == [(0, 1), (1, 4), (4, 5)]  # width-1 pieces, repeats
    assert intervals([1], 1) == [(0, 1)]
    assert intervals([], 0) == []


def test_too_many_pieces_keep_the_longest_interval_and_its_sides():
    pts = set(range(1, 30, 2))
    got = capped({"k": pts}, {"k": 100}, [["k"]])["k"]
    assert intervals(got, 100) == [(0, 29), (29, 100)]
    # a nest of three loops of 5 pieces each (125 regions) is coarsened to 3 per loop
    keys = ["a", "b", "c"]
    got = capped({k: {1, 2, 8, 9} for k in keys}, {k: 10 for k in keys}, [keys])
    assert all(intervals(got[k], 10) == [(0, 2), (2, 8), (8, 10)] for k in keys)


def test_range_tests_per_device():
    """pos = i + 32 * axis_index on two devices: `pos >= 1` holds on the whole row range
    [1, 32) of both, not on [0, 1) (device 0 says no, device 1 yes), and changes at 1."""
    pos = Pos((("i", 1),), (0, 32))
    t = InRange(pos, 1, None)
    assert decided(truth(t, {"i": (1, 31)})) is True
    assert truth(t, {"i": (0, 0)}) == (0, 1) and decided(truth(t, {"i": (0, 0)})) is None
    assert breakpoints(t, "i", {"i": (0, 31)}) == {1, -31}
    assert decided(truth(InRange(pos, None, 33), {"i": (0, 0)})) is True
    # empty test range: never; an empty loop: anything holds
    assert decided(truth(InRange(pos, 3, 3), {"i": (0, 31)})) is False
    assert decided(truth(InRange(pos, 100, None), {"i": (5, 4)})) is True


@pytest.mark.parametrize("n", [1, 2, 3, 9])
def test_regions_one_wide_and_empty(n):
    """A 2-D stencil written back into its grid on grids so small that regions are one
    wide, or the interior is empty."""
    def step(u):
        for _ in range(2):
            u[1:-1, 1:-1] = 0.5 * (u[2:, 1:-1] + u[:-2, 1:-1]) - u[1:-1, 1:-1]
        return u.sum()

    u = np.random.default_rng(n).standard_normal((n, n + 1))
    want_u = u.copy()
    want = step(want_u)
    got_u = u.copy()
    got = spmd.jit(step, backend="llvm")(got_u)
    # (the grid bit for bit; the sum's order of additions is the kernel's)
    assert np.array_equal(got_u, want_u) and np.isclose(float(got), float(want), rtol=1e-12, atol=1e-12)


def test_one_jacobi_step_is_one_kernel_reading_u_once_with_no_temporaries():
    def jacobi(u):
        u[1:-1, 1:-1] = 0.25 * (u[2:, 1:-1] + u[:-2, 1:-1] + u[1:-1, 2:] + u[1:-1, :-2])
        return u

    u = np.random.default_rng(0).random((64, 48))
    low = spmd.jit(jacobi).lower(u)
    exe = low.compile()
    ks = [s for s in exe.steps if isinstance(s, KernelStep)]
    assert len(ks) == 1 and all(isinstance(s, KernelStep) or s.opdef.reindex.view for s in exe.steps), exe.plan
    (k,) = ks
    assert k.kernel.inputs == [low.graph.inputs[0]], exe.plan
    assert exe.memory.arena_bytes == 0 and low.memory()["temp_bytes"] == 0
    # the interior region is a loop over the row with no guard or mask left in it
    text = exe.ir["big"] if "big" in exe.ir else exe.ir["small"]
    assert text.count("select i1") == 0 and text.count("icmp slt") >= 9      # 3 x 3 regions
    want = u.copy()
    jacobi(want)
    got = u.copy()
    spmd.jit(jacobi)(got)
    assert np.array_equal(got, want)


# ------------------------------------------------------------------ meshes
def shifted_stencil(u, a, b, c):
    """A boundary-masked stencil with terms at random offsets along each dim."""
    u[1:-1, 1:-1] = (a * u[2:, 1:-1] + b * u[:-2, 1:-1] + c * u[1:-1, 2:] - u[1:-1, :-2]
                     + u[2:, 2:] * u[:-2, :-2])
    u[0, :] = u[1, :]
    u[:, -1] = 0.5
    return u


@settings(max_examples=12, deadline=None)
@given(st.sampled_from([(1, 2), (2, 1), (2, 2), (4, 1), (1, 3)]), st.integers(3, 13), st.integers(3, 11),
       st.integers(1, 5))
def test_stencils_on_random_meshes_match_numpy(mesh_shape, n0, n1, steps):
    spmd.init(num_devices=4)
    mesh = spmd.Mesh(mesh_shape, ("x", "y"))
    sh = mesh.sharding("x", "y")
    u = np.random.default_rng(n0 * 31 + n1).standard_normal((n0, n1))

    def prog(u):
        for _ in range(steps):
            shifted_stencil(u, 0.25, -0.5, 2.0)
        return u

    want = u.copy()
    prog(want)
    a = spmd.device_put(u.copy(), sh)
    got = spmd.jit(prog, in_shardings=(sh,))(a)
    assert np.array_equal(got.numpy(), want) and np.array_equal(a.numpy(), want)


def pressure_sweeps(p, b, nit):
    """The cavity flow's pressure sweeps (benchmarks/stencil_programs.py): a stencil
    whose result four boundary writes copy a row or column of into its edges."""
    for _ in range(nit):
        pn = p.copy()
        p[1:-1, 1:-1] = (((pn[1:-1, 2:] + pn[1:-1, 0:-2]) * 0.3 + (pn[2:, 1:-1] + pn[0:-2, 1:-1]) * 0.2) / 1.7
                         - 0.01 * b[1:-1, 1:-1])
        p[:, -1] = p[:, -2]
        p[0, :] = p[1, :]
        p[:, 0] = p[:, 1]
        p[-1, :] = 0
    return p


@pytest.mark.parametrize("spec", [("x", None), (None, "y"), ("x", "y")])
def test_boundary_copies_on_a_split_grid_leave_a_sweep_one_kernel(spec):
    """On a split grid `p[0, :] = p[1, :]` is the sweep's result shifted by a row, picked
    in the row whose test differs between the devices: the sweep is computed again in
    that strip (codegen.check_recompute), not its neighbour reads stored whole first
    (four more grids through memory a sweep: the cavity's loop ran 2-4x slower)."""
    spmd.init(num_devices=4)
    mesh = spmd.Mesh((2, 2), ("x", "y"))
    sh = mesh.sharding(*spec)
    rng = np.random.default_rng(1)
    p, b = rng.random((64, 64)), rng.random((64, 64))
    f = spmd.jit(lambda p, b: pressure_sweeps(p, b, 6), in_shardings=(sh, sh), out_shardings=sh)
    exe = f.lower(p.copy(), b).compile()
    (loop,) = [s for s in exe.steps if not isinstance(s, KernelStep) and s.name == "scan"]
    body = exe.subprograms[id(loop.attrs["body"])]
    kernels = body.plan.fusion.kernels()
    # one kernel sweeps the grid; any other packs an edge strip a collective sends (the
    # corners of a 2-D split's halo)
    assert sum(any(op.name == "divide" for op in k.ops) for k in kernels) == 1, body.plan
    grid = body.graph.inputs[0].size
    assert all(2 * k.root.size < grid for k in kernels if not any(op.name == "divide" for op in k.ops)), body.plan
    want = pressure_sweeps(p.copy(), b, 6)
    got = f(spmd.device_put(p.copy(), sh), spmd.device_put(b, sh)).numpy()
    assert np.array_equal(got, want)


@settings(max_examples=10, deadline=None)
@given(st.sampled_from([(2, 1), (1, 2), (2, 2), (4, 1)]), st.integers(33, 70), st.integers(33, 70),
       st.integers(1, 4), st.booleans())
def test_stencils_with_boundary_copies_on_grids_strips_are_thin_in_match_numpy(mesh_shape, n0, n1, steps, rolled):
    """Grids large enough that a boundary strip is a thin region (computed again there,
    not stored): the sweeps rolled into a loop, or unrolled (each a kernel of its own:
    a stencil of a stencil is still stored), bit for bit numpy's."""
    spmd.init(num_devices=4)
    mesh = spmd.Mesh(mesh_shape, ("x", "y"))
    sh = mesh.sharding("x", "y")
    rng = np.random.default_rng(n0 * 71 + n1)
    p, b = rng.standard_normal((n0, n1)), rng.standard_normal((n0, n1))
    want = pressure_sweeps(p.copy(), b, steps)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SPMD_ROLL", "1" if rolled else "0")
        got = spmd.jit(lambda p, b: pressure_sweeps(p, b, steps), in_shardings=(sh, sh),
                       out_shardings=sh)(spmd.device_put(p.copy(), sh), spmd.device_put(b, sh))
    assert np.array_equal(got.numpy(), want)
