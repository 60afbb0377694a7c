"""The LLVM backend's memory plan (backends/llvm/memory.py): kernels written in place
into a dying input's buffer, outputs computed in the caller's buffer, one arena of
temporaries at static offsets; and where in place would be wrong, that it does not happen.
Every case also runs and is compared with numpy (a silent wrong answer is the worst bug)."""
import io

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import spmd
from paths import ROOT
from spmd.backends import compile_graph
from spmd.backends.llvm import compile_llvm
from spmd.ir import Graph
from spmd.ir.ops.names import (
    ADD, ALL_REDUCE, BROADCAST_IN_DIM, CONSTANT, DIVIDE, DOT_GENERAL, EXP, MULTIPLY, NEGATE,
    REDUCE, RESHAPE, SLICE, SQRT, SUBTRACT, TANH, TRANSPOSE
)
from spmd.sharding import Mesh

from partition_util import check_random_jit_program, random_program, reference

F4 = 4


def dot(g, a, b):
    return g.emit(DOT_GENERAL, a, b, lhs_batch=(), rhs_batch=(), lhs_contract=(1,), rhs_contract=(0,))


def run_both(g, *args, calls=2):
    """The LLVM executable (twice: the arena is kept between calls) against the numpy backend;
    the arguments must come back unchanged."""
    exe = compile_llvm(g)
    want = compile_graph(g, "numpy")([a.copy() for a in args])
    before = [a.copy() for a in args]
    for _ in range(calls):
        got = exe(list(args))
        for w, r in zip(want, got):
            np.testing.assert_allclose(r, w, rtol=1e-5, atol=1e-6)
    for a, b in zip(args, before):
        np.testing.assert_array_equal(a, b)          # the caller's arrays are not written
    return exe, got


def data(*shapes, seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal(s) / 4).astype(np.float32) for s in shapes]


# ------------------------------------------------------------------ where it happens
def test_chain_runs_in_place_and_peak_drops_to_one_buffer():
    """dot -> tanh -> exp -> negate (three kernels, forced apart by the dots' later reads being
    none): each kernel overwrites the buffer it reads, so the temporaries need one buffer."""
    g = Graph()
    x, w = g.add_input((32, 32), "float32"), g.add_input((32, 32), "float32")
    d = dot(g, x, w)
    a = g.emit(TANH, d)
    b = dot(g, a, w)                 # a dies here
    c = g.emit(EXP, b)             # in place in b's buffer
    e = dot(g, c, w)
    f = g.emit(NEGATE, e)          # in place in e's buffer, which is the output's
    g.outputs = [f]
    exe, (out,) = run_both(g, *data((32, 32), (32, 32)))
    mem = exe.memory
    assert mem.in_place == {a: d, c: b, f: e}, mem.in_place
    # d/a and b/c are temporaries (one buffer each, not both live); e is the output's
    # array, which holds d/a until e is written; the arena holds b/c
    assert e not in mem.offset_of and f not in mem.offset_of
    assert mem.in_outputs == {d: (e, 0), a: (e, 0)}, mem.in_outputs
    assert mem.peak_bytes == mem.arena_bytes == 32 * 32 * F4, mem
    assert out.flags.owndata and out.flags.writeable


def test_weight_update_is_computed_in_the_new_weights_buffer():
    """The SGD step's w - lr * (x.T @ g): the gradient dot writes into the output's array and
    the update kernel runs in place there (XLA's buffer sharing), so no temporary holds it."""
    g = Graph()
    w, x, gr = g.add_input((64, 16), "float32"), g.add_input((8, 64), "float32"), g.add_input((8, 16), "float32")
    gw = g.emit(DOT_GENERAL, x, gr, lhs_batch=(), rhs_batch=(), lhs_contract=(0,), rhs_contract=(0,))
    lr = g.emit(BROADCAST_IN_DIM, g.emit(CONSTANT, value=np.array(0.1, np.float32)),
                shape=(64, 16), broadcast_dimensions=())
    new = g.emit(SUBTRACT, w, g.emit(MULTIPLY, lr, gw))
    g.outputs = [new]
    exe, _ = run_both(g, *data((64, 16), (8, 64), (8, 16)))
    assert exe.memory.in_place == {new: gw}
    assert exe.memory.arena_bytes == 0


def test_program_through_jit_reports_memory():
    def f(x, w):
        h = np.tanh(x @ w)
        return np.exp(h @ w.T) * 2.0
    x, w = data((16, 32), (32, 32))
    low = spmd.jit(f).lower(x, w)
    m = low.memory()
    assert m["temp_bytes"] == low.compile().memory.arena_bytes
    assert m["in_place"] >= 1 and m["argument_bytes"] == x.nbytes + w.nbytes
    assert m["output_bytes"] == 16 * 32 * F4
    # what it does not count is said: the communicators' own buffers are outside the plan
    assert "communicator" in m["not_counted"] and "MPI" in m["not_counted"]
    np.testing.assert_allclose(spmd.jit(f)(x, w), f(x, w), rtol=1e-5)


# ------------------------------------------------------------ where it must not happen
def test_not_in_place_when_the_input_is_read_later():
    g = Graph()
    x, w = g.add_input((16, 16), "float32"), g.add_input((16, 16), "float32")
    d = dot(g, x, w)
    a = g.emit(TANH, d)
    b = dot(g, a, d)                 # d is read after the tanh kernel
    g.outputs = [b]
    exe, _ = run_both(g, *data((16, 16), (16, 16)))
    assert a not in exe.memory.in_place


def test_not_in_place_into_a_callers_argument():
    g = Graph()
    x = g.add_input((16, 16), "float32")
    a = g.emit(EXP, x)
    b = g.emit(TANH, g.emit(TRANSPOSE, a, permutation=(1, 0)))
    g.outputs = [b]
    exe, _ = run_both(g, *data((16, 16)))            # run_both checks x comes back unchanged
    assert not exe.memory.in_place or x not in exe.memory.in_place.values()


def test_not_in_place_while_a_view_of_the_input_is_alive():
    """A reshape feeding a dot is a numpy view of its operand: the operand's buffer stays
    busy until the view's last reader, so a kernel in between must not overwrite it."""
    g = Graph()
    x, w, v = g.add_input((8, 6), "float32"), g.add_input((6, 8), "float32"), g.add_input((4, 6), "float32")
    d = dot(g, x, w)                                   # (8, 8)
    r = g.emit(RESHAPE, d, shape=(4, 16))            # a view of d
    e = g.emit(EXP, d)                               # d's last direct read
    t = g.emit(DOT_GENERAL, r, g.emit(RESHAPE, e, shape=(16, 4)), lhs_batch=(), rhs_batch=(),
               lhs_contract=(1,), rhs_contract=(0,))   # reads the view after the exp kernel
    g.outputs = [t, g.emit(TANH, v)]
    exe, _ = run_both(g, *data((8, 6), (6, 8), (4, 6)))
    assert e not in exe.memory.in_place


@pytest.mark.parametrize("how", ["transpose", "reduce", "broadcast"])
def test_not_in_place_when_the_kernel_reads_other_elements(how):
    """d + d.T, d - max(d, axis=1), d * d[0] broadcast: the kernel reads elements of d other
    than the one it writes, so writing into d would corrupt later reads."""
    g = Graph()
    x, w = g.add_input((16, 16), "float32"), g.add_input((16, 16), "float32")
    d = dot(g, x, w)
    if how == "transpose":
        out = g.emit(ADD, d, g.emit(TRANSPOSE, d, permutation=(1, 0)))
    elif how == "reduce":
        m = g.emit(REDUCE, d, axes=(1,), kind="max")
        out = g.emit(SUBTRACT, d, g.emit(BROADCAST_IN_DIM, m, shape=(16, 16), broadcast_dimensions=(0,)))
    else:
        row = g.emit(RESHAPE, g.emit(SLICE, d, start=(0, 0), limit=(1, 16), stride=(1, 1)), shape=(16,))
        out = g.emit(MULTIPLY, d, g.emit(BROADCAST_IN_DIM, row, shape=(16, 16), broadcast_dimensions=(1,)))
    g.outputs = [g.emit(EXP, out)]
    exe, _ = run_both(g, *data((16, 16), (16, 16)))
    assert d not in exe.memory.in_place.values()


def test_outputs_never_share_a_buffer():
    """Two outputs from one buffer group cannot happen (an output is never overwritten), and
    the same value returned twice or an output and its view come back as separate arrays."""
    g = Graph()
    x, w = g.add_input((8, 8), "float32"), g.add_input((8, 8), "float32")
    d = dot(g, x, w)
    e = g.emit(EXP, d)
    f = g.emit(TANH, e)
    g.outputs = [d, e, f, f, g.emit(TRANSPOSE, f, permutation=(1, 0))]
    exe, got = run_both(g, *data((8, 8), (8, 8)))
    assert not exe.memory.in_place          # d, e, f are all outputs: none may be overwritten
    for i in range(len(got)):
        for j in range(i):
            assert not np.shares_memory(got[i], got[j]), (i, j)


def test_loop_bodies_do_not_overwrite_the_carried_state():
    """A while body's inputs are its arguments (the carried state, also read by the loop):
    its kernels write them nowhere in place; the loop still matches numpy."""
    def f(x, w):
        def body(i, c):
            h = np.tanh(c @ w)
            return np.exp(h) * 0.5 + c
        return spmd.fori_loop(0, 3, body, x)

    x, w = data((8, 8), (8, 8))
    want = x.copy()
    for _ in range(3):
        want = np.exp(np.tanh(want @ w)) * 0.5 + want
    for backend in ("llvm", "numpy"):
        got = spmd.jit(f, backend=backend)(x, w)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_in_place_can_be_switched_off(monkeypatch):
    monkeypatch.setenv("SPMD_IN_PLACE", "0")
    g = Graph()
    x, w = g.add_input((16, 16), "float32"), g.add_input((16, 16), "float32")
    d = dot(g, x, w)
    g.outputs = [dot(g, g.emit(TANH, d), w)]
    exe, _ = run_both(g, *data((16, 16), (16, 16)))
    # d and its tanh in two buffers: d's the output's (dead before the output's dot)
    assert not exe.memory.in_place and exe.memory.arena_bytes == 16 * 16 * F4
    assert exe.memory.in_outputs == {d: (g.outputs[0], 0)}


# -------------------------------------------------------------------- random programs
@pytest.mark.slow
@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2 ** 31 - 1), st.booleans())
def test_random_programs_on_one_device_match_numpy(seed, even):
    """Random programs (dots, elementwise chains, reductions, views, indexing) compiled whole
    by the LLVM backend, planner on, against the numpy reference, twice (arena reuse)."""
    rng = np.random.default_rng(seed)
    dtype = "int64" if seed % 3 == 0 else "float64"
    g, args = random_program(rng, dtype, (4, 8, 16) if even else (3, 5, 7, 9), int(rng.integers(5, 31)))
    want = reference(g, args)
    exe = compile_llvm(g)
    before = [a.copy() for a in args]
    for _ in range(2):
        got = exe([a for a in args])
        for k, (w, r) in enumerate(zip(want, got)):
            if dtype == "int64":
                np.testing.assert_array_equal(r, w, err_msg=f"output {k}:\n{g}")
            else:
                np.testing.assert_allclose(r, w, rtol=1e-9, atol=1e-9, err_msg=f"output {k}:\n{g}")
    for a, b in zip(args, before):
        np.testing.assert_array_equal(a, b)


@settings(max_examples=80, deadline=None)
@given(st.integers(0, 2 ** 31 - 1))
def test_random_elementwise_webs_over_dying_temporaries_match_numpy(seed):
    """Dots (temporaries that die in the kernels reading them), then a random web of
    elementwise ops and transposes over them with random values escaping as outputs: the
    kernels have several outputs and several same-shape inputs, the case where which
    output may take which input's buffer matters."""
    rng = np.random.default_rng(seed)
    n = int(rng.choice([3, 8, 16]))
    g = Graph()
    x, w = g.add_input((n, n), "float64"), g.add_input((n, n), "float64")
    pool = [dot(g, a, b) for a, b in [(x, w), (w, x), (x, x), (w, w)][:int(rng.integers(2, 5))]]
    for _ in range(int(rng.integers(3, 20))):
        a = pool[rng.integers(len(pool))]
        kind = rng.random()
        if kind < 0.35:
            v = g.emit(str(rng.choice(["tanh", "negate", "abs", "sin"])), a)
        elif kind < 0.85:
            v = g.emit(str(rng.choice(["add", "multiply", "subtract", "maximum"])), a, pool[rng.integers(len(pool))])
        else:
            v = g.emit(TRANSPOSE, a, permutation=(1, 0))
        pool.append(v)
    k = int(rng.integers(1, 7))
    g.outputs = [pool[-1]] + [pool[i] for i in rng.choice(len(pool), size=k, replace=True)]
    args = data((n, n), (n, n), seed=seed % 1000)
    args = [a.astype(np.float64) for a in args]
    want = compile_graph(g, "numpy")([a.copy() for a in args])
    exe = compile_llvm(g)
    for _ in range(2):
        for wv, r in zip(want, exe(list(args))):
            np.testing.assert_allclose(r, wv, rtol=1e-12, atol=1e-12, err_msg=str(exe.plan))


MESHES = [Mesh((2,), ("x",)), Mesh((4,), ("x",)), Mesh((2, 2), ("a", "b"))]


@pytest.mark.slow
@settings(max_examples=15, deadline=None)
@given(st.integers(0, 2 ** 31 - 1), st.booleans())
def test_random_jit_programs_on_meshes_with_the_llvm_backend(seed, even):
    check_random_jit_program(seed, MESHES[seed % len(MESHES)], even, backend="llvm")


def test_multi_output_kernel_writes_each_output_over_an_input_it_reads():
    """One kernel with three outputs over three dying inputs of one shape: a kernel stores an
    output as soon as it has it, so an output may only take the buffer of an input it is
    computed from (else a later output would read the overwritten element)."""
    g = Graph()
    x, w = g.add_input((16, 16), "float32"), g.add_input((16, 16), "float32")
    a, b, c = dot(g, x, w), dot(g, w, x), dot(g, x, x)
    a2 = g.emit(ADD, a, b)                       # reads a, b
    b2 = g.emit(MULTIPLY, b, c)                  # reads b, c
    c2 = g.emit(SUBTRACT, c, g.emit(EXP, a))   # reads c, a
    g.outputs = [a2, b2, c2]
    exe, _ = run_both(g, *data((16, 16), (16, 16)))
    deps = {a2: {a, b}, b2: {b, c}, c2: {c, a}}
    for r, src in exe.memory.in_place.items():
        assert src in deps[r], (r, src)


def test_an_output_stored_early_never_takes_the_buffer_of_an_input_read_after():
    """t = tanh(a); e = exp(b) (an output, stored as soon as computed); root = e * t. The
    kernel computes e before it loads a, so e must not go into a's buffer even though
    that would let the root have b's; a plan that did gives tanh(e) instead of tanh(a)."""
    g = Graph()
    x, w = g.add_input((16, 16), "float32"), g.add_input((16, 16), "float32")
    a, b = dot(g, x, w), dot(g, w, x)
    t = g.emit(TANH, a)
    e = g.emit(EXP, b)
    root = g.emit(MULTIPLY, e, t)
    g.outputs = [root, e]
    exe, _ = run_both(g, *data((16, 16), (16, 16)))
    assert exe.memory.in_place.get(e) in (None, b)


def _adam(p, m, v, t, gr):
    t = t + 1.0
    nm = 0.9 * m + 0.1 * gr
    nv = 0.99 * v + 0.01 * gr ** 2
    new_p = p - 0.01 * (nm / (1 - 0.9 ** t)) / (np.sqrt(nv / (1 - 0.99 ** t)) + 1e-8)
    return new_p, nm, nv, t


def _adam_step(state, x):
    p, opt = state
    gr = np.tanh(x @ p)                            # a gradient-like value from the parameters
    new_p, nm, nv, t = _adam(p, opt["m"], opt["v"], opt["t"], gr)
    return new_p, {"m": nm, "v": nv, "t": t}


def _adam_state(seed=0):
    rng = np.random.default_rng(seed)
    p = rng.standard_normal((16, 16)).astype(np.float32) / 4
    return p, {"m": np.zeros_like(p), "v": np.zeros_like(p), "t": np.float32(0.0)}, \
        rng.standard_normal((16, 16)).astype(np.float32)


def _assert_state(got, want):
    for a, b in zip(spmd.tree.tree_flatten(got)[0], spmd.tree.tree_flatten(want)[0]):
        a = a.numpy() if hasattr(a, "numpy") else a
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=2e-5, atol=1e-6)


def test_donated_numpy_arguments_are_copied_not_written():
    p, opt, x = _adam_state()
    before = (p.copy(), {k: np.array(v, copy=True) for k, v in opt.items()})
    f = spmd.jit(_adam_step, donate_argnums=0)
    low = f.lower((p, opt), x)
    assert low.memory()["donated"] and low.memory()["in_place"] >= 3
    got = f((p, opt), x)
    _assert_state(got, _adam_step((before[0], before[1]), x))
    _assert_state((p, opt), before)                # the caller's numpy arrays are untouched


@pytest.mark.parametrize("shape", [(2, 2), (4,)])
def test_donated_arrays_give_their_buffers_and_are_invalid_after(shape):
    """Adam steps with params and optimizer state donated on a mesh: every step matches
    numpy, the outputs are computed in the donated buffers, and a donated Array raises."""
    axes = ("data", "model")[:len(shape)]
    mesh = spmd.Mesh(shape, axes)
    p, opt, x = _adam_state()
    psh = mesh.sharding(axes[0], None)
    sh = ((psh, {"m": psh, "v": mesh.sharding(None, axes[-1]), "t": mesh.sharding()}), mesh.sharding())
    f = spmd.jit(_adam_step, in_shardings=sh, donate_argnums=0)
    state = spmd.tree.tree_unflatten(spmd.tree.tree_flatten((p, opt))[1],
                                     [spmd.device_put(np.asarray(a), s) for a, s in
                                      zip(spmd.tree.tree_flatten((p, opt))[0], spmd.tree.tree_flatten(sh[0])[0])])
    want = (p, opt)
    for _ in range(3):
        old = state
        handles = {d: h for d, h in old[0]._handles.items()}
        state = f(state, x)
        want = _adam_step(want, x)
        _assert_state(state, want)
        with pytest.raises(spmd.SpmdError, match="donated"):
            old[0].numpy()
        with pytest.raises(spmd.SpmdError, match="donated"):
            f(old, x)
    if shape == (4,):
        # the new parameters live in the donated parameters' buffers (on 2x2 the program
        # computes them from a slice of a gathered copy, so there they are fresh)
        assert all(state[0]._handles[d] is h for d, h in handles.items())


def test_donating_an_array_passed_twice_is_still_right():
    mesh = spmd.Mesh((2,), ("x",))
    a = spmd.device_put(np.arange(8, dtype=np.float32), mesh.sharding("x"))
    f = spmd.jit(lambda u, w: (np.exp(u) * 2.0, w + 1.0), donate_argnums=0)
    r, s = f(a, a)              # the same buffers, donated once and read once
    np.testing.assert_allclose(r.numpy(), np.exp(np.arange(8, dtype=np.float32)) * 2, rtol=1e-6)
    np.testing.assert_allclose(s.numpy(), np.arange(8) + 1.0)


def test_static_and_donated_conflict():
    with pytest.raises(spmd.SpmdError, match="static and donated"):
        spmd.jit(lambda a, b: a, static_argnums=1, donate_argnums=1)


@pytest.mark.slow
@pytest.mark.parametrize("shape", [(1, 1), (2, 2)])
def test_gpt_training_steps_with_the_planner_match_the_numpy_backend(shape):
    """examples/train_gpt.py's step (Adam; params and state donated on a mesh) for three
    steps: every output of the LLVM backend, in place and arena on, against the numpy
    reference backend, which plans nothing."""
    import importlib.util
    import os
    path = os.path.join(ROOT, "examples", "train_gpt.py")
    spec = importlib.util.spec_from_file_location("train_gpt_mem", path)
    tg = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tg)
    rng = np.random.default_rng(0)
    params = tg.init_params(rng, 16, 1, 8)
    opt = {"m": {k: np.zeros_like(v) for k, v in params.items()},
           "v": {k: np.zeros_like(v) for k, v in params.items()}, "t": np.float32(0.0)}
    x = rng.integers(0, 256, (4, 8)).astype(np.int32)
    y = rng.integers(0, 256, (4, 8)).astype(np.int32)
    mesh = spmd.Mesh(shape, ("data", "model")) if shape != (1, 1) else None
    kw = {}
    if mesh is not None:
        psh = tg.param_shardings(mesh, params)
        kw = dict(in_shardings=(psh, {"m": psh, "v": psh, "t": mesh.sharding()}, mesh.sharding("data", None),
                                mesh.sharding("data", None)), donate_argnums=(0, 1))
    got = {}
    for backend in ("llvm", "numpy"):
        f = spmd.jit(tg.make_step(1, 2, 3e-3, mesh), backend=backend, **kw)
        p, o = params, opt
        for _ in range(3):
            loss, p, o = f(p, o, x, y)
        got[backend] = [np.asarray(a.numpy() if hasattr(a, "numpy") else a)
                        for a in spmd.tree.tree_flatten((loss, p, o))[0]]
    for a, b in zip(got["llvm"], got["numpy"]):
        np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-5)


@pytest.mark.parametrize("n", [4, 128])         # under and over the local backend's small-message size
@pytest.mark.parametrize("mesh", [Mesh((2,), ("x",)), Mesh((2, 2), ("x", "y"))])
def test_all_reduce_in_place_over_its_operand(n, mesh):
    """A dot's result all-reduced: the plan runs the all-reduce over the dot's buffer (the
    collective's `out=` is its operand) and every device gets the group's sum."""
    from spmd.transports.local.local_runtime import LocalRuntime
    g = Graph("ar")
    a, b = g.add_input((n, n), "float64"), g.add_input((n, n), "float64")
    d = dot(g, a, b)
    r = g.emit(ALL_REDUCE, d, axes=("x",), reduction="sum", group_size=2)
    g.outputs = [g.emit(TANH, r)]
    exe = compile_llvm(g)
    assert exe.memory.in_place.get(r) is d
    rng = np.random.default_rng(n)
    args = {dev: [rng.standard_normal((n, n)), rng.standard_normal((n, n))] for dev in range(mesh.size)}
    where = {int(dev): c for c, dev in np.ndenumerate(mesh.devices)}
    for _ in range(2):
        out = LocalRuntime().run(exe, mesh, {k: [x.copy() for x in v] for k, v in args.items()})
        for dev in range(mesh.size):
            group = [e for e in range(mesh.size) if where[e][1:] == where[dev][1:]]
            want = np.tanh(sum(args[e][0] @ args[e][1] for e in group))
            np.testing.assert_allclose(out[dev][0], want, rtol=1e-12, atol=1e-12)


def test_a_donated_buffer_the_program_cannot_write_is_copied_first():
    """A read-only donated input (Ray's object store hands out read-only arrays), 0-d too:
    copied with its shape, written there, the caller's array untouched."""
    g = Graph()
    t, m = g.add_input((), "float32"), g.add_input((4, 4), "float32")
    g.outputs = [g.emit(ADD, t, g.emit(CONSTANT, value=np.array(1, np.float32))),
                 g.emit(TANH, m)]
    exe = compile_llvm(g, donated=[0, 1])
    assert set(exe.memory.in_place.values()) == {t, m}
    tv, mv = np.array(2.0, np.float32), np.ones((4, 4), np.float32)
    tv.flags.writeable = mv.flags.writeable = False
    a, b = exe([tv, mv])
    assert a.shape == () and float(a) == 3.0 and float(tv) == 2.0
    np.testing.assert_allclose(b, np.tanh(np.ones((4, 4))), rtol=1e-6)
    assert (mv == 1).all()


# ------------------------------------------------------------ the peak, as a user sees it
def _mlp_step(ws, x):
    def loss(ws):
        h = x
        for w in ws:
            h = np.tanh(h @ w)               # the activations' line
        return np.mean(h ** 2)
    return spmd.grad(loss)(ws)


def test_the_reported_peak_is_what_a_run_allocates():
    """lowered.memory()['peak_bytes'] against the bytes a run really holds: the arguments,
    the arena and scratch (kept between calls) and the most a call allocates on top
    (tracemalloc sees numpy's allocations)."""
    import tracemalloc
    rng = np.random.default_rng(0)
    ws = [(rng.standard_normal((256, 256)) / 16).astype(np.float32) for _ in range(4)]
    x = rng.standard_normal((512, 256)).astype(np.float32)
    f = spmd.jit(_mlp_step)
    f(ws, x)
    m = f.lower(ws, x).memory()
    tracemalloc.start()
    try:
        f(ws, x)
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        out = f(ws, x)
        step = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    held = m["argument_bytes"] + m["temp_bytes"] + m["scratch_bytes"]
    assert abs(held + step - m["peak_bytes"]) <= 0.05 * m["peak_bytes"] + 65536, (held + step, m)
    assert len(out) == 4
    # temporaries (XLA's temp allocation): neither the arguments nor the outputs
    temps = m["temp_bytes"] + m["scratch_bytes"] + max(0, step - sum(o.nbytes for o in out))
    assert abs(temps - m["temporary_bytes"]) <= 0.05 * m["temporary_bytes"] + 65536, (temps, m)


def test_the_peak_names_what_is_live_there_and_where_it_was_made():
    rng = np.random.default_rng(1)
    ws = [(rng.standard_normal((64, 64)) / 8).astype(np.float32) for _ in range(4)]
    x = rng.standard_normal((128, 64)).astype(np.float32)
    low = spmd.jit(_mlp_step).lower(ws, x)
    m = low.memory()
    peak = m["peak"]
    assert sum(peak["by_kind"].values()) + m["scratch_bytes"] == peak["live_bytes"]
    assert peak["by_kind"]["arguments"] == m["argument_bytes"]
    kept = [r for r in peak["live"] if r["kind"] == "activations"]
    assert kept and all(r["loc"] == "test_memory_plan.py:" + str(_mlp_step.__code__.co_firstlineno + 4)
                        for r in kept), peak["live"]
    text = low.as_text("optimized")
    assert all(f"{r['value']} = " in text for r in kept)      # named as in the printed program
    # every activation is a tanh result the backward pass reads: 3 of the 4 are held at once at least
    assert peak["by_kind"]["activations"] >= 3 * 128 * 64 * 4


def test_a_matmuls_gradient_frees_its_activation_before_the_inputs_gradient_is_made():
    """In x @ w the weight's gradient is the activation's last read: made first, the
    activation's buffer is free before the input's gradient (its size) is made."""
    def loss(ws, x):
        h = np.sin(x) @ ws[0]                # (2048, 512): the activation
        return np.sum((h @ ws[1]) ** 2)
    rng = np.random.default_rng(0)
    ws = [(rng.standard_normal(s) / 16).astype(np.float32) for s in ((64, 512), (512, 8))]
    x = rng.standard_normal((2048, 64)).astype(np.float32)
    f = spmd.jit(spmd.grad(loss))
    m = f.lower(ws, x).memory()
    h_bytes = 2048 * 512 * 4
    assert m["temporary_bytes"] < 1.5 * h_bytes, m      # the activation and dh never both live
    s = np.sin(x.astype(np.float64))
    h = s @ ws[0]
    dy = 2 * (h @ ws[1])
    for got, want in zip(f(ws, x), (s.T @ (dy @ ws[1].T), h.T @ dy)):
        np.testing.assert_allclose(got, want, rtol=2e-4, atol=1e-3)


# ------------------------------------------- collectives' results and donated outputs
def test_an_update_is_written_into_the_donated_state_not_into_the_gradient():
    """Adam's update of one weight in one kernel: new p, m, v each written into its donated
    argument's buffer, not into the (dying) gradient's, which would then be held from the
    gradient's first write to the end as an output."""
    g = Graph()
    p, m, v = (g.add_input((64, 64), "float32") for _ in range(3))
    x, d = g.add_input((32, 64), "float32"), g.add_input((32, 64), "float32")
    grad = g.emit(DOT_GENERAL, x, d, lhs_batch=(), rhs_batch=(), lhs_contract=(0,), rhs_contract=(0,))

    def c(val):
        return g.emit(BROADCAST_IN_DIM, g.emit(CONSTANT, value=np.array(val, np.float32)),
                      shape=(64, 64), broadcast_dimensions=())
    new_m = g.emit(ADD, g.emit(MULTIPLY, c(0.9), m), g.emit(MULTIPLY, c(0.1), grad))
    new_v = g.emit(ADD, g.emit(MULTIPLY, c(0.99), v), g.emit(MULTIPLY, c(0.01), g.emit(MULTIPLY, grad, grad)))
    new_p = g.emit(SUBTRACT, p, g.emit(DIVIDE, new_m, g.emit(ADD, g.emit(SQRT, new_v), c(1e-8))))
    g.outputs = [new_p, new_m, new_v]
    exe = compile_llvm(g, donated=(0, 1, 2))
    assert {exe.memory.in_place[r] for r in (new_p, new_m, new_v)} == {p, m, v}, exe.memory.in_place
    args = data((64, 64), (64, 64), (64, 64), (32, 64), (32, 64))
    want = compile_graph(g, "numpy")([a.copy() for a in args])
    for w, r in zip(want, exe([a.copy() for a in args])):
        np.testing.assert_allclose(r, w, rtol=1e-5, atol=1e-6)


def test_collectives_write_into_the_plan_and_free_what_they_read():
    """FSDP's all_gather of a weight and reduce_scatter of its gradient write into buffers
    the plan places (the arena), and the gradient's full buffer is free once it is
    reduce-scattered (a collective's result is a new array: it aliases nothing)."""
    spmd.init(backend="local", num_devices=4)
    mesh = Mesh((4,), ("data",))
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((256, 128)) / 16).astype(np.float32)
    x = rng.standard_normal((512, 256)).astype(np.float32)

    def step(w, x):
        return w - 0.1 * spmd.grad(lambda w: np.mean(np.tanh(x @ w) ** 2))(w)
    row = mesh.sharding("data", None)
    f = spmd.jit(step, in_shardings=(row, row))
    low = f.lower(w, x)
    exe = low.compile()
    g = low.graph
    colls = [op.result for op in g.ops if op.opdef.takes_out and op.opdef.needs_comm and op.opdef.collective.out_may_be_operand is None]
    # in the arena, or the buffer the update (the program's output) is written into
    planned = set(exe.memory.offset_of) | set(exe.memory.in_place.values())
    assert len(colls) == 2 and all(v in planned for v in colls), colls
    prof = exe.memory_profile()
    steps = {id(op): k for k, op in enumerate(prof.ops)}
    for op in g.ops:
        if op.opdef.needs_comm and op.operands and op.operands[0].producer is not None \
                and op.operands[0].producer.opdef.lowering == "matmul":
            b = next(b for b in prof.buffers if any(v is op.operands[0] for _, v in b.values))
            assert b.end == steps[id(op)], (b.start, b.end, steps[id(op)])
    np.testing.assert_allclose(f(w, x).numpy(), w - 0.1 * (2 * x.T @ (np.tanh(x @ w) * (1 - np.tanh(x @ w) ** 2))
                                                           / (512 * 128)), rtol=1e-4, atol=1e-6)


def test_explain_names_the_peak_and_what_is_live_there():
    rng = np.random.default_rng(2)
    ws = [(rng.standard_normal((64, 64)) / 8).astype(np.float32) for _ in range(4)]
    x = rng.standard_normal((128, 64)).astype(np.float32)
    low = spmd.jit(_mlp_step).lower(ws, x)
    short = low.explain(file=io.StringIO())
    text = low.explain(file=io.StringIO(), verbose=True)
    m = low.memory()
    assert short.splitlines()[-1] in text
    head = next(ln for ln in text.splitlines() if ln.startswith("memory per device:"))
    assert f"peak {m['peak_bytes'] / 2**10:.1f} KB" in head and m["peak"]["loc"] in head, head
    line = "test_memory_plan.py:" + str(_mlp_step.__code__.co_firstlineno + 4)
    biggest = m["peak"]["live"][0]
    assert any(ln.split()[:1] == [biggest["value"]] for ln in text.splitlines()), text
    assert line in text.split("memory per device:")[1], text
