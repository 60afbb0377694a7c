"""Buffers a stencil's time loop reuses (backends/llvm/loops.py, Lowered.reused): a scan
double-buffers its carried grid and writes its result where the memory plan wants it; an
argument the function writes in place gives its buffers to the program, which hands the
new value back in them. No new grid per iteration or per call, results unchanged."""
import tracemalloc

import numpy as np
import pytest

import spmd
from spmd.backends.llvm import compile_llvm
from spmd.backends.llvm.loops import buffers
from spmd.ir import Graph
from spmd.ir.ops.names import TANH

N = 128
GRID = N * N * 8


def relax(u, steps):
    """Jacobi sweeps written in place (rolled into a scan from 4 sweeps on); returns a
    scalar, so a call's only grid is u's."""
    for _ in range(steps):
        u[1:-1, 1:-1] = 0.25 * (u[2:, 1:-1] + u[:-2, 1:-1] + u[1:-1, 2:] + u[1:-1, :-2])
    return u[1, 1]


def numpy_relax(u, steps):
    u = u.copy()
    relax(u, steps)
    return u


def data(a):
    return a.__array_interface__["data"][0]


@pytest.mark.parametrize("length", range(1, 8))
@pytest.mark.parametrize("in_place", [False, True])
def test_loop_buffers_alternate_and_end_in_the_target(length, in_place):
    if in_place and length == 1:
        pytest.skip("a lone iteration cannot write the buffer it reads (scan_overwrites asks for two)")
    first, target = object(), object()
    spares = [object(), object()]
    if in_place:
        target = first
    seq = buffers(first, target, length, lambda k: spares[k])
    reads = [first] + seq[:-1]
    assert seq[-1] is target
    assert all(w is not r for w, r in zip(seq, reads)), "an iteration writes the buffer it reads"
    assert spares[1] not in seq[1:] and (spares[1] in seq) == (in_place and length % 2 == 1)


@pytest.mark.parametrize("steps", [9, 10])
def test_a_rolled_loop_on_a_numpy_argument_makes_no_grid_per_call(steps):
    u = np.random.default_rng(steps).random((N, N))
    f = spmd.jit(relax, static_argnums=(1,))
    low = f.lower(u, steps)
    assert any(op.name == "scan" for op in low.graph.ops), "the sweeps should be rolled"
    want = numpy_relax(u, steps)
    got = u.copy()
    where = data(got)
    f(got, steps)                                       # the first call makes the loop's spare grid
    np.testing.assert_array_equal(got, want)
    again = want.copy()
    relax(again, steps)
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        f(got, steps)
        peak = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    assert peak < GRID // 2, f"a call allocated {peak} bytes (a grid is {GRID})"
    assert data(got) == where
    np.testing.assert_array_equal(got, again)


@pytest.mark.parametrize("steps", [2, 9, 10])
def test_an_array_written_in_place_keeps_its_buffers(steps):
    """On a mesh: the program writes the new grid into the argument's own shards (the loop's
    last iteration writes there), so the Array keeps its buffers; values are numpy's."""
    spmd.init(num_devices=4)
    mesh = spmd.Mesh((1, 2), ("x", "y"))
    sh = mesh.sharding("x", "y")
    u = np.random.default_rng(steps).random((N, N + 3))
    a = spmd.device_put(u.copy(), sh)
    f = spmd.jit(relax, in_shardings=(sh,), static_argnums=(1,))
    before = [data(s.data) for s in a.shards]
    f(a, steps)
    np.testing.assert_array_equal(a.numpy(), numpy_relax(u, steps))
    if steps >= 4:       # (a rolled loop: its result lands in the carried argument's buffers)
        assert [data(s.data) for s in a.shards] == before
    f(a, steps)
    np.testing.assert_array_equal(a.numpy(), numpy_relax(numpy_relax(u, steps), steps))


def test_the_loop_result_is_planned_over_the_argument_it_updates():
    u = np.zeros((16, 16))
    low = spmd.jit(relax, static_argnums=(1,)).lower(u, 10)
    exe = low.compile()
    (scan,) = [op for op in low.graph.ops if op.name == "scan"]
    assert exe.memory.in_place.get(scan.results[0]) is low.graph.inputs[0]
    assert low.reused == {0} and exe.written == {1: 0}


def test_other_outputs_never_alias_an_argument_written_in_place():
    """v is computed over u's dying buffer only if it is then copied: the write of u (to
    zeros) must not change the v the caller gets."""
    def f(u):
        v = u * 2.0
        u[...] = 0.0
        return v

    u = np.arange(12.0).reshape(3, 4)
    got = u.copy()
    v = spmd.jit(f)(got)
    np.testing.assert_array_equal(v, np.arange(12.0).reshape(3, 4) * 2)
    np.testing.assert_array_equal(got, np.zeros((3, 4)))
    assert not np.shares_memory(v, got)


def test_a_returned_update_is_the_argument_itself_as_numpys():
    """numpy returns u itself, and so does jit: no copy of the new value (a PRK step
    `a += b + s * c; return a` paid a whole-array copy a call), u's own buffer."""
    u = np.random.default_rng(1).random((N, N))
    got = u.copy()
    where = data(got)

    def f(u):
        relax(u, 6)
        return u

    r = spmd.jit(f)(got)
    want = numpy_relax(u, 6)
    np.testing.assert_array_equal(got, want)
    assert r is got and data(got) == where


def test_a_copy_of_an_update_is_not_the_argument():
    """`return u.copy()` is a new array in numpy: jit's result must not share u's memory
    even where the copy is the same value in the program."""
    u = np.zeros((4, 4))

    def f(u):
        u += 1.0
        return u.copy(), u

    c, same = spmd.jit(f)(u)
    assert same is u and c is not u and not np.shares_memory(c, u)
    c += 5.0
    np.testing.assert_array_equal(u, np.ones((4, 4)))


def test_a_returned_sharded_update_is_the_argument_itself():
    """The same on a mesh: the STREAM triad `a += b + 3 c; return a` on spmd.Arrays hands
    back a itself, updated, its shards in their own buffers (no copy a call)."""
    mesh = spmd.Mesh((2,), ("x",))
    a, b, c = (spmd.device_put(np.arange(16.0) * k, mesh.sharding("x")) for k in (1, 2, 3))
    bufs = [h.ctypes.data for h in a._handles.values()]

    def triad(a, b, c):
        a += b + 3.0 * c
        return a

    r = spmd.jit(triad)(a, b, c)
    assert r is a and [h.ctypes.data for h in a._handles.values()] == bufs
    np.testing.assert_array_equal(np.asarray(a), np.arange(16.0) * 12)


def test_an_array_on_a_one_device_mesh_is_written_in_place():
    """An spmd.Array on a 1-device mesh runs as numpy; jit raised 'cannot update in place'
    for a function writing into it. It takes the new value, and is the result."""
    mesh = spmd.Mesh((1,), ("x",))
    a, b = (spmd.device_put(np.arange(8.0) * k, mesh.sharding("x")) for k in (1, 2))

    def f(a, b):
        a += 2.0 * b
        return a

    r = spmd.jit(f)(a, b)
    assert r is a and a.sharding == mesh.sharding("x")
    np.testing.assert_array_equal(np.asarray(a), np.arange(8.0) * 5)


def test_a_read_only_argument_is_not_written():
    u = np.random.default_rng(2).random((8, 8))
    u.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        spmd.jit(relax, static_argnums=(1,))(u, 5)
    u.flags.writeable = True
    assert np.array_equal(u, np.random.default_rng(2).random((8, 8)))


def test_an_executable_computes_an_output_in_the_buffer_it_is_given():
    g = Graph("into")
    x = g.add_input((4, 4), "float64")
    g.outputs = [g.emit(TANH, x)]
    exe = compile_llvm(g)
    buf = np.empty((4, 4))
    (out,) = exe([np.ones((4, 4))], into={0: buf})
    assert out is buf and np.allclose(buf, np.tanh(1.0))
    (out,) = exe([np.ones((4, 4))])
    assert out is not buf


def test_a_whole_reduction_feeding_a_large_update_is_its_own_kernel_and_the_update_is_in_place():
    """CG's step: r.r feeds the new direction p. Fused, every thread would sum all of r
    again and p could not be written over the arrays the sum reads; apart, r and p are
    both computed in their own buffers."""
    def update(r, ap, p, a, rs):
        r -= a * ap
        rs_new = np.sum(r * r)
        p[...] = r + (rs_new / rs) * p
        return rs_new

    rng = np.random.default_rng(3)
    r, ap, p = (rng.random((256, 256)) for _ in range(3))
    a, rs = np.array(0.01), np.array(3.0)
    low = spmd.jit(update).lower(r, ap, p, a, rs)
    exe = low.compile()
    (red,) = [k for k in exe.plan.fusion.kernels() if k.root.producer.name == "reduce"]
    assert [op.name for op in red.ops][-1] == "reduce" and red.outputs == [red.root]
    assert low.memory()["in_place"] == 2
    want_r, want_p = r.copy(), p.copy()
    want = update(want_r, ap, want_p, a, rs)
    got_r, got_p = r.copy(), p.copy()
    where = data(got_r), data(got_p)
    got = spmd.jit(update)(got_r, ap, got_p, a, rs)
    np.testing.assert_array_equal(got_r, want_r)
    np.testing.assert_allclose(float(got), float(want), rtol=1e-13)
    np.testing.assert_allclose(got_p, want_p, rtol=1e-13)
    assert (data(got_r), data(got_p)) == where


def _window_step(inp, out):
    """PRK's stencil update: out's window += a stencil of inp; inp += 1."""
    out[2:-2, 2:-2] += 0.5 * (inp[3:-1, 2:-2] - inp[1:-3, 2:-2]) + inp[2:-2, 2:-2]
    inp += 1.0
    return inp, out


@pytest.mark.parametrize("shift", [None, (0, 0), (-1, 0), (0, 1), (1, -1)])
def test_a_windowed_update_on_a_mesh_is_in_place_where_it_reads_its_own_element(shift):
    """Partitioned, `out[2:-2, 2:-2] += ...` reads out through a pad of a slice that puts
    every element back in place: the new out is written over the old (no second grid a
    call). A further update reading out shifted must still see the old values; numpy's
    answer every way."""
    def step(inp, out):
        _window_step(inp, out)
        if shift is not None:
            di, dj = shift
            out[2:-2, 2:-2] += out[2 + di:14 + di, 2 + dj:10 + dj]
        return inp, out

    mesh = spmd.Mesh((2,), ("x",))
    arrs = [np.random.default_rng(i).random((16, 12)) for i in range(2)]
    want = [a.copy() for a in arrs]
    step(*want)
    placed = [spmd.device_put(a, mesh.sharding("x", None)) for a in arrs]
    f = spmd.jit(step)
    exe = f.lower(*placed).compile()
    f(*placed)
    for p, w in zip(placed, want):
        np.testing.assert_allclose(np.asarray(p), w, rtol=1e-13)
    if shift is None:
        assert len(exe.memory.in_place) == 2 and {r.shape for r in exe.memory.in_place} == {(8, 12)}


def diagonal(x, k):
    m = np.zeros((x.shape[0], x.shape[0]))
    for i in range(x.shape[0]):
        m[i, i] = x[i] * k                   # one element at a time: dynamic_update_slice
    m[0, 1:3] = m[0, 0:2]                    # the update read from the buffer it writes
    m[k % 3, :] += 1.0
    return m @ x


@pytest.mark.parametrize("k", [1, 2, 4])
def test_element_writes_update_one_buffer(k):
    """A loop of one-element writes into a new array is rolled into a scan whose native
    loop updates one buffer in place: each iteration moves its element, not the array
    (a copy of the whole array per write would be 64 copies of 32 KB per call)."""
    from spmd.backends.llvm.loops import updated_in_place
    x = np.arange(1.0, 65.0)
    f = spmd.jit(diagonal, static_argnums=1)
    np.testing.assert_allclose(f(x, k), diagonal(x, k), rtol=1e-13)
    exe = f.lower(x, k)._exe
    (scan,) = [o for o in exe.graph.ops if o.name == "scan"]
    assert scan.attrs["length"] >= 63                    # (the first write may stay out: it writes zeros' constant)
    body = exe.subprograms[id(scan.attrs["body"])]
    bsched = body.schedule(1)
    seg = bsched.only_segment()
    assert seg is not None                               # the loop runs natively
    (m,) = [j for j, v in enumerate(scan.attrs["body"].inputs[:scan.attrs["num_carry"]]) if v.shape == (64, 64)]
    assert updated_in_place(body, bsched, seg, scan.attrs["num_carry"]) == {m}


def test_a_carried_array_read_after_its_update_is_not_updated_in_place():
    """An iteration that reads the old array after writing the new one needs both."""
    from spmd.backends.llvm.loops import updated_in_place

    def f(x):
        m = np.zeros((32, 32))
        acc = np.zeros(32)
        for i in range(32):
            new = m.copy()
            new[i, i] = x[i]
            acc = acc + m[:, i] * 2.0 + new[i]
            m = new
        return m, acc

    x = np.arange(1.0, 33.0)
    import os
    os.environ["SPMD_ROLL_MIN_OPS"] = "8"
    try:
        fj = spmd.jit(f)
        got = fj(x)
        exe = fj.lower(x)._exe
    finally:
        del os.environ["SPMD_ROLL_MIN_OPS"]
    for g, w in zip(got, f(x)):
        np.testing.assert_array_equal(np.asarray(g), w)
    (scan,) = [o for o in exe.graph.ops if o.name == "scan"]
    body = exe.subprograms[id(scan.attrs["body"])]
    bsched = body.schedule(1)
    seg = bsched.only_segment()
    if seg is not None:
        kept = updated_in_place(body, bsched, seg, scan.attrs["num_carry"])
        late = {j for j, v in enumerate(scan.attrs["body"].inputs[:scan.attrs["num_carry"]])
                if any(v in op.operands for op in scan.attrs["body"].ops if op.name != "dynamic_update_slice")}
        assert not kept & late


def test_traced_position_writes_in_place_from_python():
    """A write at a traced index (in a loop on data) runs from Python into the plan's buffer."""
    def f(x, n):
        m = np.zeros(8)
        i = 0
        while i < n:
            m[i] = x[i] * 2 + m[max(i - 1, 0)]
            i += 1
        return m
    x = np.arange(8.0)
    got = spmd.jit(f)(x, 5)
    np.testing.assert_array_equal(got, f(x, 5))


def test_update_at_traced_starts_into_the_plans_buffer():
    """dynamic_update_slice at starts the program reads (run from Python): the result in
    the memory plan's buffer, written over its operand where it dies there, clamped starts."""
    from spmd.ir.ops.names import ADD, DYNAMIC_UPDATE_SLICE
    g = Graph("updates")
    x, u, i, j = g.add_input((6, 5), "float64"), g.add_input((2, 2), "float64"), \
        g.add_input((), "int64"), g.add_input((), "int64")
    y = g.emit(ADD, x, x)                                     # a temporary: written over below
    a = g.emit(DYNAMIC_UPDATE_SLICE, y, u, i, j)
    b = g.emit(DYNAMIC_UPDATE_SLICE, a, g.emit(ADD, u, u), j, i)
    g.outputs = [b]
    exe = compile_llvm(g)
    assert exe.memory.in_place.get(b) is not None
    xs, us = np.arange(30.0).reshape(6, 5), -np.arange(4.0).reshape(2, 2)
    for s, t in [(0, 0), (1, 3), (5, 9), (-2, 2)]:
        want = 2 * xs
        si, sj = min(max(s, 0), 4), min(max(t, 0), 3)
        want[si:si + 2, sj:sj + 2] = us
        ti, tj = min(max(t, 0), 4), min(max(s, 0), 3)
        want[ti:ti + 2, tj:tj + 2] = 2 * us
        got, = exe([xs, us, np.int64(s), np.int64(t)])
        np.testing.assert_array_equal(got, want)
