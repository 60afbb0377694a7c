"""A call of a program whose native schedule is one segment goes through the executable's
DirectRun (backends/llvm/direct_run.py): a program without a mesh, and the ranks of a
local run of a small program that exchanges nothing, one after another on the caller's
thread. DirectRun works out once per schedule where the segment's addresses and the
results come from; its results must be what a plain call of the executable gives:
numpy's values, fresh buffers (an argument handed back, a view, a constant or the same
value twice copied; a donated argument's buffer handed back where the output was
computed in it), over many calls with different inputs. Arguments it cannot take as they
are (read-only, strided, another dtype) take the general path, which copies or refuses
them."""
from __future__ import annotations

import numpy as np
import pytest

import spmd
from spmd.backends.llvm import compile_llvm
from spmd.backends.llvm.executable import LLVMExecutable
from spmd.ir import Graph
from spmd.ir.ops.names import ADD, MULTIPLY, RESHAPE, TRANSPOSE
from spmd.sharding import Mesh
from spmd.transports.local.local_runtime import LocalRuntime, runs_in_turn

MESH = Mesh((4,), ("d",))


def step(w, m, g):
    m = 0.9 * m + g
    w -= 0.01 * m                 # written in place: w's new value is an output
    u = w * 2.0
    return m, u.reshape(8, 3, 2), u.T, u, u, g, np.ones((8, 6))


def numpy_step(w, m, g):
    w = w.copy()
    out = step(w, m.copy(), g.copy())
    return w, out


def test_a_jitted_step_with_donated_arguments_and_views_in_its_results(monkeypatch):
    spmd.init(backend="local", num_devices=4)
    mesh = spmd.Mesh((4,), ("d",))
    sh = mesh.sharding("d", None)
    f = spmd.jit(step, in_shardings=(sh, sh, sh), donate_argnums=(1,))
    rng = np.random.default_rng(0)
    for call in range(6):
        w, m, g = (rng.standard_normal((8, 6)) for _ in range(3))
        W, M, G = (spmd.device_put(a.copy(), sh) for a in (w, m, g))
        g_shards = {d: h for d, h in G._handles.items()}
        out = f(W, M, G)
        if call == 0:
            exe = next(iter(f._cache.values())).runs.program.executable
            assert not exe.talks and runs_in_turn(exe)
            # from now on no rank may take the general path (Executable.__call__)
            monkeypatch.setattr(LLVMExecutable, "__call__", lambda *a: pytest.fail("a rank took the general path"))
        new_w, want = numpy_step(w, m, g)
        np.testing.assert_allclose(W.numpy(), new_w, rtol=1e-15)
        for o, x in zip(out, want):
            assert o.shape == x.shape
            np.testing.assert_allclose(o.numpy(), x, rtol=1e-15)
        with pytest.raises(spmd.SpmdError, match="donated"):
            M.numpy()
        # every result's shard is a fresh, writeable, C-ordered buffer of its own: not the
        # argument handed back, not shared with another result
        shards = [(k, d, h) for k, o in enumerate(out) for d, h in o._handles.items()]
        for k, d, h in shards:
            assert h.flags.writeable and h.flags.c_contiguous and h.base is None
            assert not any(np.shares_memory(h, s) for s in g_shards.values())
        for i, (k, d, h) in enumerate(shards):
            for k2, d2, h2 in shards[i + 1:]:
                assert (k, d) == (k2, d2) or not np.shares_memory(h, h2)


def test_a_jitted_step_without_a_mesh_writes_its_argument_as_numpy_does(monkeypatch):
    f = spmd.jit(step, donate_argnums=(1,))
    rng = np.random.default_rng(1)
    for call in range(6):
        w, m, g = (rng.standard_normal((8, 6)) for _ in range(3))
        w0, m0 = w.copy(), m.copy()
        out = f(w, m, g)
        if call == 0:
            exe = next(iter(f._cache.values())).runs.program.executable
            assert exe.runner(None) is not exe         # a DirectRun's
            monkeypatch.setattr(LLVMExecutable, "__call__", lambda *a: pytest.fail("the general path was taken"))
        new_w, want = numpy_step(w0, m0, g)
        np.testing.assert_allclose(w, new_w, rtol=1e-15)      # written in place, as numpy does
        np.testing.assert_array_equal(m, m0)                   # a donated numpy argument stays its owner's
        for o, x in zip(out, want):
            assert o.shape == x.shape and o.flags.writeable
            np.testing.assert_allclose(o, x, rtol=1e-15)
        assert not any(np.shares_memory(o, a) for o in out for a in (w, m, g))


def views_program():
    """y = x * x + x (in place into x where x is donated); outputs y, y reshaped and
    transposed (views of y's buffer), the argument z handed back, y again."""
    g = Graph("views")
    x = g.add_input((4, 6), "float64")
    z = g.add_input((4, 6), "float64")
    y = g.emit(ADD, g.emit(MULTIPLY, x, x), z)
    g.outputs = [y, g.emit(RESHAPE, y, shape=(6, 4)), g.emit(TRANSPOSE, y, permutation=(1, 0)), z, y]
    return g


def numpy_views(x, z):
    y = x * x + z
    return [y, y.reshape(6, 4), y.T, z, y]


@pytest.mark.parametrize("donated", [(), (0,)])
def test_results_are_a_plain_calls_over_many_calls(donated):
    exe = compile_llvm(views_program(), donated=donated)
    assert runs_in_turn(exe)
    rt = LocalRuntime()
    rng = np.random.default_rng(len(donated))
    for _ in range(5):
        xs = {d: rng.standard_normal((4, 6)) for d in range(4)}
        zs = {d: rng.standard_normal((4, 6)) for d in range(4)}
        args = {d: [xs[d].copy(), zs[d].copy()] for d in range(4)}
        got = rt.run(exe, MESH, args)
        for d in range(4):
            want = numpy_views(xs[d], zs[d])
            plain = exe([xs[d].copy(), zs[d].copy()])
            for o, p, w in zip(got[d], plain, want):
                assert o.shape == w.shape and o.flags.c_contiguous and o.flags.writeable and o.base is None
                np.testing.assert_array_equal(o, w)
                np.testing.assert_array_equal(o, p)
            assert not np.shares_memory(got[d][3], args[d][1])     # the argument handed back is a copy
            outs = got[d]
            for i in range(len(outs)):
                for j in range(i + 1, len(outs)):
                    assert not np.shares_memory(outs[i], outs[j])
            if not donated:
                np.testing.assert_array_equal(args[d][0], xs[d])   # not donated: untouched


def test_arguments_it_cannot_take_as_they_are_take_the_general_path():
    """A donated argument that is read-only or strided is copied first (the caller's is
    untouched), as a plain call does; the results are right."""
    exe = compile_llvm(views_program(), donated=(0,))
    rt = LocalRuntime()
    rng = np.random.default_rng(7)
    xs = {d: rng.standard_normal((4, 6)) for d in range(4)}
    z = rng.standard_normal((4, 6))
    z.setflags(write=False)         # (read, not donated: taken as it is)
    for kind in ("read-only", "strided", "float32"):
        args = {}
        for d in range(4):
            if kind == "read-only":
                x = xs[d].copy()
                x.setflags(write=False)
            elif kind == "strided":
                x = np.zeros((4, 12))
                x[:, ::2] = xs[d]
                x = x[:, ::2]
            else:
                x = xs[d].astype(np.float32)
            args[d] = [x, z]
        if kind == "float32":
            with pytest.raises(spmd.SpmdError, match="input 0 is float32"):
                rt.run(exe, MESH, args)
            continue
        got = rt.run(exe, MESH, args)
        for d in range(4):
            np.testing.assert_array_equal(got[d][0], xs[d] * xs[d] + z)
            np.testing.assert_array_equal(args[d][0], xs[d])
