"""A concatenation that runs as a step of its own (more operands than a kernel's pieces)
is native strided copies into its result (steps.py join_instrs): numpy's bits along each
axis, of views (transposed, strided) and of operands the memory plan computed in place."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import spmd
from spmd.backends.llvm import native
from spmd.backends.llvm.lowering_table import MAX_PIECES
from spmd.backends.llvm.schedule import Segment

K = MAX_PIECES + 2          # operands: the join is not fused


def program(axis, kind):
    def f(a):
        if kind == "computed":
            parts = [a * (k + 1) for k in range(K)]
        elif kind == "transposed":
            parts = [a.T[:, k % a.shape[0]:][:, :1] for k in range(K)] if axis == 1 else [a.T for _ in range(K)]
        else:
            parts = [a[:, ::2] + 0 * k if k % 2 else a[:, ::2] for k in range(K)]
        return np.concatenate(parts, axis=axis) * 1.5
    return f


def copies(f, *args) -> int:
    exe = f.lower(*args).compile()
    names = {native.helpers()[f"spmd_scopy{n}"] for n in (1, 4, 8)}
    return sum(fn in names for it in exe.schedule(1).items if isinstance(it, Segment) for fn, _ in it.instrs)


@settings(max_examples=15, deadline=None)
@given(axis=st.integers(0, 1), kind=st.sampled_from(["computed", "transposed", "strided"]),
       rows=st.integers(1, 5), cols=st.integers(1, 6), dtype=st.sampled_from(["float32", "float64", "int32", "int64"]))
def test_a_join_of_many_operands_runs_natively_with_numpys_bits(axis, kind, rows, cols, dtype):
    a = (np.arange(rows * cols) % 7 + 1).reshape(rows, cols).astype(dtype)
    f = program(axis, kind)
    want = f(a.copy())
    jf = spmd.jit(f)
    got = np.asarray(jf(a.copy()))
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("axis", [0, 1])
def test_the_join_is_native_copies(axis):
    a = np.arange(12.0).reshape(3, 4)
    assert copies(spmd.jit(program(axis, "strided")), a) > 0
