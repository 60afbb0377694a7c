"""The LLVM backend's native schedules (llvm/schedule.py, native.py): kernels and dots run
in one native call; dots read transposed and batched operands in place. Results must equal
the numpy backend's, and each test checks that the native path it is about was taken (a
step that fell back to Python would still give the right numbers)."""
from collections import Counter

import numpy as np
import pytest

import spmd
from spmd.backends.llvm import native
from spmd.backends.llvm.plan import KernelStep
from spmd.backends.llvm.schedule import Segment

rng = np.random.default_rng(3)


def schedule(f, *args):
    """f's program as the native schedule runs it on one thread: (the names of the steps
    run from Python, sorted; how many times the segments call each native helper, kernels
    counted as "kernel")."""
    exe = spmd.jit(f, backend="llvm").lower(*args).compile()
    sched = exe.schedule(1)
    python = sorted(exe.steps[it].name for it in sched.items if isinstance(it, int))
    helpers = {addr: name for name, addr in native.helpers().items() if isinstance(addr, int)}
    kernels = {s.addr_t for s in exe.steps if isinstance(s, KernelStep)}
    calls = Counter("kernel" if fn in kernels else helpers[fn]
                    for it in sched.items if isinstance(it, Segment) for fn, _ in it.instrs)
    return python, calls


def bits(dtype):
    return "f32" if np.dtype(dtype) == np.float32 else "f64"


def _both(f, *args):
    got = spmd.jit(f, backend="llvm")(*args)
    want = spmd.jit(f, backend="numpy")(*args)
    for g, w in zip(spmd.tree.tree_flatten(got)[0], spmd.tree.tree_flatten(want)[0]):
        tol = 1e-4 if np.asarray(w).dtype == np.float32 else 1e-9
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=tol, atol=tol * (1 + np.abs(w).max()))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_attention_shaped_dots(dtype):
    B, T, H, D = 2, 5, 3, 4
    x = rng.standard_normal((B, T, H * D)).astype(dtype)
    w = rng.standard_normal((H * D, H * D)).astype(dtype)

    def f(x, w):
        q = (x @ w).reshape(B, T, H, D).transpose(0, 2, 1, 3)
        k = (np.tanh(x) @ w).reshape(B, T, H, D).transpose(0, 2, 1, 3)
        s = q @ k.transpose(0, 1, 3, 2)
        a = np.exp(s - s.max(axis=-1, keepdims=True))
        o = (a @ q).transpose(0, 2, 1, 3).reshape(B, T, H * D)
        return o @ w.T, x.reshape(B * T, H * D).T @ o.reshape(B * T, H * D)
    _both(f, x, w)
    # the reshapes and transposes between the dots are read in place, but for the two
    # operands BLAS cannot read as they are (reshapes of transposed views): native copies
    isz = np.dtype(dtype).itemsize
    assert schedule(f, x, w) == ([], {f"spmd_dot_{bits(dtype)}": 6, "kernel": 2, f"spmd_copy{isz}": 2})


def test_dots_with_sliced_and_transposed_operands_and_grads():
    a = rng.standard_normal((7, 6)).astype(np.float32)
    b = rng.standard_normal((6, 9)).astype(np.float32)

    def f(a, b):
        def loss(a, b):
            return np.sum(np.tanh(a[1:, ::2] @ b[::2, 2:]) ** 2) + np.sum(a.T @ a)
        return spmd.value_and_grad(loss, argnums=(0, 1))(a, b)
    _both(f, a, b)
    python, calls = schedule(f, a, b)
    assert python == ["pad", "pad"] and calls["spmd_dot_f32"] == 6, (python, calls)   # (pad: numpy's)


def test_program_outputs_are_views_of_native_results():
    a = rng.standard_normal((4, 6)).astype(np.float32)

    def f(a):
        y = a @ a.T
        return y.T, y.reshape(-1), (a.T @ a)[1:3]
    _both(f, a)
    assert schedule(f, a) == ([], {"spmd_dot_f32": 2})
    out = spmd.jit(f)(a)
    for o in out:
        assert o.flags.writeable and o.base is None


def test_repeated_calls_with_new_inputs():
    """The segments' pointers to inputs and outputs are patched in before each call."""
    def step(a, b):
        return np.tanh(a @ b).sum(axis=0) + (a.T @ a).sum()
    f = spmd.jit(step)
    assert schedule(step, np.ones((5, 3), np.float32), np.ones((3, 4), np.float32)) == \
        ([], {"spmd_dot_f32": 2, "kernel": 1})
    for i in range(3):
        a = rng.standard_normal((5, 3)).astype(np.float32)
        b = rng.standard_normal((3, 4)).astype(np.float32)
        np.testing.assert_allclose(f(a, b), np.tanh(a @ b).sum(axis=0) + (a.T @ a).sum(), rtol=1e-5)


def test_dot_of_a_reshaped_transposed_view_copies_natively():
    x = rng.standard_normal((3, 2, 5, 4)).astype(np.float32)
    w = rng.standard_normal((8, 6)).astype(np.float32)

    def f(x, w):
        y = np.tanh(x).transpose(0, 2, 1, 3).reshape(3, 5, 8)    # numpy copies this reshape
        return y @ w, np.einsum("bti,btj->ij", y, y)
    _both(f, x, w)
    assert schedule(f, x, w) == ([], {"kernel": 1, "spmd_copy4": 1, "spmd_dot_f32": 2})


@pytest.mark.parametrize("itype", [np.int32, np.int64])
def test_embedding_gather_and_scatter_grad(itype):
    table = rng.standard_normal((10, 3)).astype(np.float32)
    tok = np.array([[0, 3, 3], [9, 12, -2]], dtype=itype)     # out of range: clamped, as numpy's take(mode=clip)

    def f(t, tok):
        def loss(t):
            return np.sum(np.tanh(t[np.clip(tok, 0, 9)]) ** 2) + np.sum(np.take(t, tok, axis=0, mode="clip"))
        return spmd.value_and_grad(loss)(t)
    _both(f, table, tok)
    python, calls = schedule(f, table, tok)
    assert python == [] and calls["spmd_gather"] == 2 and calls["spmd_scatter_f32"] == 2, (python, calls)


def test_small_integer_powers():
    x = np.array([-2.5, -1.0, -0.0, 0.0, 0.3, 1.0, 7.0, np.inf, -np.inf, np.nan], np.float32)

    def f(x):
        return x ** 0, x ** 1, x ** 2, x ** 3, x ** 4, x ** -1, x ** -2, x ** 2.5
    with np.errstate(all="ignore"):
        got = spmd.jit(f, backend="llvm")(x)
        want = f(x)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-6)
    python, calls = schedule(f, x)
    assert python == [] and set(calls) == {"kernel"}, (python, calls)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_column_sums_and_their_epilogues(dtype):
    x = rng.standard_normal((8, 64, 300)).astype(dtype)
    b = rng.standard_normal(300).astype(dtype)

    def f(x, b):
        return b - 0.1 * x.sum(axis=(0, 1)), x.max(axis=0), np.tanh(x).sum(axis=0)
    _both(f, x, b)
    python, calls = schedule(f, x, b)
    # the sums run row by row natively; a column max has no native lowering (numpy's)
    assert python == ["reduce"] and calls[f"spmd_colsum_{bits(dtype)}"] == 2, (python, calls)
