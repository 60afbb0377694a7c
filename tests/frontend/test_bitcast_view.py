"""x.view(dtype) of a dtype of the same size: numpy's reading of the same bytes (the
float bits as an integer, and back), a view that writes through to x, under jit (both
backends, split over a mesh) and eagerly on spmd.Arrays, against numpy."""
import warnings

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import spmd

MESH = spmd.Mesh((2,), ("d",))
SAME_SIZE = {4: ["float32", "int32", "uint32"], 8: ["float64", "int64", "uint64"],
             2: ["int16", "uint16"], 1: ["int8", "uint8"]}


def values(rng, n, dt):
    if np.dtype(dt).kind == "f":
        x = rng.standard_normal(n).astype(dt) * 100
        x[:3] = [np.inf, -0.0, np.nan][: min(3, n)]
        return x
    info = np.iinfo(dt)
    return rng.integers(info.min, info.max, n, dtype=dt, endpoint=True)


def program(src, dst):
    def f(x, w):
        y = x * 1                              # a traced array of x's bytes
        v = y.view(dst)
        read = v + 0                           # the bits as dst, a copy
        v[1:3] = w[1:3]                        # written through the view: y's bytes change
        back = y.view(dst).view(src)           # a view of a view, back to src
        return read, y, back, v
    return f


def check(got, want):
    for g, w in zip(got, want):
        g = np.asarray(g.numpy() if hasattr(g, "numpy") else g)
        assert g.dtype == w.dtype and g.shape == w.shape
        assert g.tobytes() == w.tobytes(), (g, w)      # bit for bit (NaN payloads, -0.0)


@settings(max_examples=30, deadline=None)
@given(st.sampled_from([(s, d) for group in SAME_SIZE.values() for s in group for d in group if s != d]),
       st.integers(4, 9), st.integers(0, 2 ** 32 - 1))
def test_view_as_a_dtype_of_the_same_size(pair, n, seed):
    src, dst = pair
    rng = np.random.default_rng(seed)
    x, w = values(rng, n, src), values(rng, n, dst)
    f = program(src, dst)
    with np.errstate(all="ignore"):
        want = f(x, w)
    check(spmd.jit(f, backend="llvm", fallback=False)(x, w), want)
    check(spmd.jit(f, backend="numpy", fallback=False)(x, w), want)
    if n % 2 == 0:
        check(spmd.jit(f, in_shardings=(MESH.sharding("d"), MESH.sharding("d")), fallback=False)(x, w), want)
        with warnings.catch_warnings():
            warnings.simplefilter("error")          # runs sharded: nothing gathered
            got = f(spmd.device_put(x, MESH.sharding("d")), spmd.device_put(w, MESH.sharding("d")))
        check(got, want)


def test_float_bit_tricks(compiler):
    def f(x):
        i = x.view(np.int32)
        exponent = ((i >> 23) & 0xFF) - 127
        magic = (np.int32(0x5F3759DF) - (i >> 1)).view(np.float32)     # the fast inverse square root
        return exponent, magic * (1.5 - 0.5 * x * magic * magic)
    x = np.array([0.25, 1.0, 2.0, 10.0, 1e6], np.float32)
    check(spmd.jit(f, backend=compiler)(x), f(x))


def test_a_view_of_another_size_says_so():
    def f(x):
        return x.view(np.int32)
    with pytest.raises(NotImplementedError, match="same size"):
        spmd.jit(f, fallback=False)(np.ones(4))
