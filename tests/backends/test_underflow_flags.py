"""Where numpy's result is 0 or a normal float, a kernel's steps make no denormal on the
way: a denormal result costs the CPU a microcode assist (~7x the time of the vector
instruction), so exp of a causal mask's -1e9 scores ran a softmax 6x slower than numpy.
Read from the x86 status register (MXCSR): its underflow flag is set by a tiny inexact
result, and sticks until cleared. The kernel runs on the calling thread (a program with
no mesh and one native segment, backends/llvm/direct_run.py), whose register this reads."""
import ctypes
import platform

import numpy as np
import pytest

import spmd

pytestmark = pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86's MXCSR")

UNDERFLOW = 1 << 4


@pytest.fixture(scope="module")
def mxcsr():
    """(read, write) of this thread's MXCSR, compiled with llvmlite."""
    import llvmlite.binding as llvm
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    ir = """
declare void @llvm.x86.sse.stmxcsr(ptr)
declare void @llvm.x86.sse.ldmxcsr(ptr)
define i32 @get() {
  %p = alloca i32
  call void @llvm.x86.sse.stmxcsr(ptr %p)
  %v = load i32, ptr %p
  ret i32 %v
}
define void @set(i32 %v) {
  %p = alloca i32
  store i32 %v, ptr %p
  call void @llvm.x86.sse.ldmxcsr(ptr %p)
  ret void
}"""
    mod = llvm.parse_assembly(ir)
    target = llvm.Target.from_default_triple().create_target_machine()
    engine = llvm.create_mcjit_compiler(mod, target)
    engine.finalize_object()
    get = ctypes.CFUNCTYPE(ctypes.c_uint32)(engine.get_function_address("get"))
    put = ctypes.CFUNCTYPE(None, ctypes.c_uint32)(engine.get_function_address("set"))
    yield get, put, engine


def flags_of(f, x, mxcsr):
    get, put, _ = mxcsr
    f(x)                                     # (compiled, and the direct run set up)
    put(get() & ~0x3F)
    out = f(x)
    return get() & 0x3F, np.asarray(out)


@pytest.mark.parametrize("dt,masked", [("float32", -1e9), ("float32", -105.0), ("float32", -np.inf),
                                       ("float32", -3.0e38), ("float64", -1e9), ("float64", -747.0),
                                       ("float64", -np.inf)])
def test_exp_of_a_masked_score_underflows_nowhere(mxcsr, dt, masked):
    x = np.zeros((8, 128), dt)
    x[:, ::2] = masked
    x[:, 1::2] = np.linspace(-80, 80, 64 * 8, dtype=dt).reshape(8, 64)
    flags, got = flags_of(spmd.jit(lambda s: np.exp(s) / 3.0), x, mxcsr)
    np.testing.assert_array_equal(got[:, ::2], 0.0)
    np.testing.assert_allclose(got, np.exp(x) / x.dtype.type(3.0), rtol=4 * np.finfo(dt).eps, atol=0)
    assert not flags & UNDERFLOW, f"exp of {masked} made a denormal on the way (MXCSR {flags:#x})"


def test_the_flag_is_read_where_the_kernel_runs(mxcsr):
    """The probe itself: a denormal result numpy also makes does set it."""
    x = np.full((8, 128), -95.0, np.float32)
    flags, got = flags_of(spmd.jit(lambda s: np.exp(s)), x, mxcsr)
    assert got[0, 0] == np.exp(np.float32(-95.0)) and got[0, 0] < np.finfo(np.float32).tiny
    assert flags & UNDERFLOW
