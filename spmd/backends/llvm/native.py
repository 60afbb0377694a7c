"""Native schedules: run a whole stretch of a program's steps with one call from Python.

A program's steps are kernels, dots, views (transpose/reshape/slice feeding a dot; a
reshape numpy would have to copy is a native strided copy), constants and everything else (collectives, gather, scatter, ...). Consecutive kernels and dots form a
*segment*: a flat list of instructions `(function, argument block)` that one native loop
(`spmd_run`) calls in order, with the GIL released for the whole segment. Each kernel gets
a trampoline `kN_t(ptr args)` that loads its buffer pointers from its argument block; a
dot is `spmd_dot_f32/f64(ptr args)`, a loop of cblas ?gemm calls (one per batch matrix)
into the BLAS numpy itself links, with the operands' transposes and strides worked out at
build time. Views cost nothing: a dot reads its operand's base buffer at an offset with
strides.

Argument blocks live in one int64 array per thread (the `arena`). Pointers to the memory
plan's buffers are written once per thread; pointers that change from call to call (the
program's inputs, outputs, and values made by steps that run in Python) are patched in
before each segment runs, one vectorised assignment per segment.
"""
from __future__ import annotations

import ctypes
import os
import re
import threading

import numpy as np

from .exchange_ir import EXCHANGE_NAMES, exchange_ir
from .jit import compile_ir

RUNNER_IR = """
define void @spmd_run(ptr %prog, i64 %n) {
entry:
  br label %h
h:
  %i = phi i64 [0, %entry], [%i1, %b]
  %c = icmp slt i64 %i, %n
  br i1 %c, label %b, label %x
b:
  %j = shl i64 %i, 1
  %pf = getelementptr i64, ptr %prog, i64 %j
  %f = load ptr, ptr %pf
  %j1 = add i64 %j, 1
  %pa = getelementptr i64, ptr %prog, i64 %j1
  %a = load ptr, ptr %pa
  call void %f(ptr %a)
  %i1 = add i64 %i, 1
  br label %h
x:
  ret void
}
"""

# argument block of a loop (loops.py): length, instructions per body program, strided
# entries, then four body programs (2 x instructions each: function, argument block):
# iteration 0's, 1's, and the even and odd ones after; a cell that stops the loop when
# nonzero (the rank's native status, exchange.py: a collective of the body stopped), or
# 0; then per strided entry: the entry it sets, its address at iteration 0, bytes added
# per iteration (a scanned row)
LOOP_HEAD = 8
LOOP_IR = """
; iteration i of the loop of block a: the rows of scanned values set, and the body program
; of the iteration, or null when the stop cell is set
define ptr @spmd_loop_iter(ptr %a, i64 %i) {
entry:
  %g2 = getelementptr i64, ptr %a, i64 2
  %ns = load i64, ptr %g2
  %gstop = getelementptr i64, ptr %a, i64 7
  %stop = load ptr, ptr %gstop
  %nostop = icmp eq ptr %stop, null
  br i1 %nostop, label %sh, label %stv
stv:
  %sv = load atomic i64, ptr %stop monotonic, align 8
  %go = icmp eq i64 %sv, 0
  br i1 %go, label %sh, label %stopped
stopped:
  ret ptr null
sh:
  %s = phi i64 [0, %entry], [0, %stv], [%s1, %sb]
  %sc = icmp slt i64 %s, %ns
  br i1 %sc, label %sb, label %run
sb:
  %t = mul i64 %s, 3
  %t0 = add i64 %t, 8
  %q0 = getelementptr i64, ptr %a, i64 %t0
  %slot = load ptr, ptr %q0
  %t1 = add i64 %t, 9
  %q1 = getelementptr i64, ptr %a, i64 %t1
  %base = load i64, ptr %q1
  %t2 = add i64 %t, 10
  %q2 = getelementptr i64, ptr %a, i64 %t2
  %stride = load i64, ptr %q2
  %m = mul i64 %i, %stride
  %addr = add i64 %base, %m
  store i64 %addr, ptr %slot
  %s1 = add i64 %s, 1
  br label %sh
run:
  %is0 = icmp eq i64 %i, 0
  %is1 = icmp eq i64 %i, 1
  %odd = and i64 %i, 1
  %v23 = add i64 %odd, 2
  %v1 = select i1 %is1, i64 1, i64 %v23
  %v = select i1 %is0, i64 0, i64 %v1
  %pv = add i64 %v, 3
  %pp = getelementptr i64, ptr %a, i64 %pv
  %prog = load ptr, ptr %pp
  ret ptr %prog
}

define void @spmd_loop(ptr %a) {
entry:
  %len = load i64, ptr %a
  %g1 = getelementptr i64, ptr %a, i64 1
  %n = load i64, ptr %g1
  br label %h
h:
  %i = phi i64 [0, %entry], [%i1, %run]
  %c = icmp slt i64 %i, %len
  br i1 %c, label %it, label %x
it:
  %prog = call ptr @spmd_loop_iter(ptr %a, i64 %i)
  %stop = icmp eq ptr %prog, null
  br i1 %stop, label %x, label %run
run:
  call void @spmd_run(ptr %prog, i64 %n)
  %i1 = add i64 %i, 1
  br label %h
x:
  ret void
}

; the programs of nr ranks in lockstep on one thread (the local runtime's ranks when they
; are more than the cores: transports/local/local_runtime.py): instruction i of every rank before
; instruction i + 1 of any, so a rank's receive from a rank of the same thread finds its
; message posted. A loop runs its iterations in lockstep too.
define void @spmd_run_multi(ptr %progs, i64 %nr, i64 %n) {
entry:
  %args = alloca ptr, i64 %nr
  br label %h
h:
  %i = phi i64 [0, %entry], [%i1, %next]
  %c = icmp slt i64 %i, %n
  br i1 %c, label %b, label %x
b:
  %j = shl i64 %i, 1
  %j1 = add i64 %j, 1
  %p0 = load ptr, ptr %progs
  %pf0 = getelementptr i64, ptr %p0, i64 %j
  %f0 = load ptr, ptr %pf0
  %isloop = icmp eq ptr %f0, @spmd_loop
  br i1 %isloop, label %lh, label %rh
rh:
  %r = phi i64 [0, %b], [%r1, %rb]
  %rc = icmp slt i64 %r, %nr
  br i1 %rc, label %rb, label %next
rb:
  %pp = getelementptr ptr, ptr %progs, i64 %r
  %p = load ptr, ptr %pp
  %pf = getelementptr i64, ptr %p, i64 %j
  %f = load ptr, ptr %pf
  %pa = getelementptr i64, ptr %p, i64 %j1
  %a = load ptr, ptr %pa
  call void %f(ptr %a)
  %r1 = add i64 %r, 1
  br label %rh
lh:
  %q = phi i64 [0, %b], [%q1, %lb]
  %lc = icmp slt i64 %q, %nr
  br i1 %lc, label %lb, label %lrun
lb:
  %lpp = getelementptr ptr, ptr %progs, i64 %q
  %lp = load ptr, ptr %lpp
  %lpa = getelementptr i64, ptr %lp, i64 %j1
  %la = load ptr, ptr %lpa
  %dst = getelementptr ptr, ptr %args, i64 %q
  store ptr %la, ptr %dst
  %q1 = add i64 %q, 1
  br label %lh
lrun:
  call void @spmd_loop_multi(ptr %args, i64 %nr)
  br label %next
next:
  %i1 = add i64 %i, 1
  br label %h
x:
  ret void
}

define void @spmd_loop_multi(ptr %args, i64 %nr) {
entry:
  %a0 = load ptr, ptr %args
  %len = load i64, ptr %a0
  %g1 = getelementptr i64, ptr %a0, i64 1
  %n = load i64, ptr %g1
  %bp = alloca ptr, i64 %nr
  br label %h
h:
  %i = phi i64 [0, %entry], [%i1, %run]
  %c = icmp slt i64 %i, %len
  br i1 %c, label %rh, label %x
rh:
  %r = phi i64 [0, %h], [%r1, %rok]
  %rc = icmp slt i64 %r, %nr
  br i1 %rc, label %rb, label %run
rb:
  %pa = getelementptr ptr, ptr %args, i64 %r
  %a = load ptr, ptr %pa
  %prog = call ptr @spmd_loop_iter(ptr %a, i64 %i)
  %stop = icmp eq ptr %prog, null
  br i1 %stop, label %x, label %rok
rok:
  %dst = getelementptr ptr, ptr %bp, i64 %r
  store ptr %prog, ptr %dst
  %r1 = add i64 %r, 1
  br label %rh
run:
  call void @spmd_run_multi(ptr %bp, i64 %nr, i64 %n)
  %i1 = add i64 %i, 1
  br label %h
x:
  ret void
}
"""

# argument block of a dot: fn A B C M N K lda ldb ldc transA transB, then two batch levels
# (outer, inner), each: extent strideA strideB strideC (strides in bytes); then the BLAS's
# set-threads function (or 0), the threads this dot wants, and the cell holding the current
# setting (small products run on one thread: waking BLAS threads costs more than they save,
# and on a loaded machine a woken thread may wait for a core for a whole time slice)
DOT_FIELDS = 23
DOT_IR = """
define void @spmd_dot_{t}(ptr %a) {{
entry:
{loads}
  %cur = load i64, ptr %p22
  %need = icmp ne i64 %cur, %f21
  %has = icmp ne ptr %p20, null
  %do = and i1 %need, %has
  br i1 %do, label %set, label %go
set:
  %w32 = trunc i64 %f21 to i32
  call void %p20(i32 %w32)
  store i64 %f21, ptr %p22
  br label %go
go:
  br label %oh
oh:
  %o = phi i64 [0, %go], [%o1, %ix]
  %oc = icmp slt i64 %o, %f12
  br i1 %oc, label %ob, label %x
ob:
  %ooa = mul i64 %o, %f13
  %oob = mul i64 %o, %f14
  %ooc = mul i64 %o, %f15
  %qa = getelementptr i8, ptr %p1, i64 %ooa
  %qb = getelementptr i8, ptr %p2, i64 %oob
  %qc = getelementptr i8, ptr %p3, i64 %ooc
  br label %h
h:
  %i = phi i64 [0, %ob], [%i1, %b]
  %c = icmp slt i64 %i, %f16
  br i1 %c, label %b, label %ix
b:
  %oa = mul i64 %i, %f17
  %obb = mul i64 %i, %f18
  %occ = mul i64 %i, %f19
  %pa = getelementptr i8, ptr %qa, i64 %oa
  %pb = getelementptr i8, ptr %qb, i64 %obb
  %pc = getelementptr i8, ptr %qc, i64 %occ
  call void %p0(i32 101, i32 %ta, i32 %tb, {I} %m, {I} %n, {I} %k, {T} 1.0, ptr %pa, {I} %lda, ptr %pb, {I} %ldb, {T} 0.0, ptr %pc, {I} %ldc)
  %i1 = add i64 %i, 1
  br label %h
ix:
  %o1 = add i64 %o, 1
  br label %oh
x:
  ret void
}}
"""


def _dot_ir(t, T, I):   # noqa: E741 - the int type's name in BLAS
    loads = []
    for j in range(DOT_FIELDS):
        loads.append(f"  %g{j} = getelementptr i64, ptr %a, i64 {j}")
        isptr = j < 4 or j in (20, 22)
        loads.append(f"  {'%p' if isptr else '%f'}{j} = load {'ptr' if isptr else 'i64'}, ptr %g{j}")
    loads += ["  %ta = trunc i64 %f10 to i32", "  %tb = trunc i64 %f11 to i32"]
    for name, j in (("m", 4), ("n", 5), ("k", 6), ("lda", 7), ("ldb", 8), ("ldc", 9)):
        loads.append(f"  %{name} = trunc i64 %f{j} to i32" if I == "i32" else f"  %{name} = add i64 %f{j}, 0")
    return DOT_IR.format(t=t, T=T, I=I, loads="\n".join(loads))


def trampoline(name, nparams):
    """`name_t(ptr args)`: the kernel `name` called with its pointers (and start, end, tid)
    read from an argument block."""
    lines = [f"define void @{name}_t(ptr %a) #0 {{", "entry:"]
    args = []
    for j in range(nparams + 3):
        lines.append(f"  %g{j} = getelementptr i64, ptr %a, i64 {j}")
        kind = "ptr" if j < nparams else "i64"
        lines.append(f"  %v{j} = load {kind}, ptr %g{j}")
        args.append(f"{kind} %v{j}")
    lines += [f"  call void @{name}({', '.join(args)})", "  ret void", "}"]
    return "\n".join(lines)


_cores = []


def cores():
    """The host's cores (asked once: os.cpu_count reads /proc or /sys, and a loop body
    asks at every iteration)."""
    if not _cores:
        _cores.append(os.cpu_count() or 1)
    return _cores[0]


# ----------------------------------------------------------------------------- BLAS
_blas = None
# the ranks of the local runtime are threads that build their schedules at the same time:
# one of them finds the BLAS (and compiles the helpers), the others wait for it. A rank
# that saw a half-made table would run its dots another way (numpy's matmul: other bits)
_init_lock = threading.Lock()


def blas():
    """{"gemm": {"float32": addr, "float64": addr}, "int": "i64"|"i32", "set_threads": fn}
    for the cblas numpy links, or {} when it cannot be found (dots then run in numpy)."""
    global _blas
    if _blas is None:
        with _init_lock:
            if _blas is None:
                _blas = _find_blas()
    return _blas


def _find_blas():
    try:
        with open("/proc/self/maps") as f:
            libs = set(re.findall(r"(/\S*(?:openblas|blas)\S*\.so\S*)", f.read()))
        # numpy's own first: scipy loads a second OpenBLAS into the process, and the
        # products must run on (and set the threads of) the one numpy's matmul uses
        libs = sorted(libs, key=lambda p: ("/numpy" not in p, p))
    except OSError:
        libs = []
    for path in libs:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for s, d, it, thr in (("scipy_cblas_sgemm64_", "scipy_cblas_dgemm64_", "i64", "scipy_openblas_set_num_threads64_"),
                              ("cblas_sgemm64_", "cblas_dgemm64_", "i64", "openblas_set_num_threads64_"),
                              ("cblas_sgemm", "cblas_dgemm", None, "openblas_set_num_threads")):
            try:
                fs, fd = getattr(lib, s), getattr(lib, d)
            except AttributeError:
                continue
            if it is None:   # plain names: 32-bit ints unless the library is an ILP64 build
                if "64" in path.rsplit("/", 1)[-1]:
                    continue
                it = "i32"
            st = getattr(lib, thr, None)
            if st is not None:
                st.argtypes, st.restype = [ctypes.c_int], None
            return {"gemm": {"float32": ctypes.cast(fs, ctypes.c_void_p).value,
                             "float64": ctypes.cast(fd, ctypes.c_void_p).value},
                    "int": it, "set_threads": st, "lib": lib}
    return {}


# the BLAS's current thread setting, shared with the native dots (which change it)
blas_threads_cell = np.zeros(1, np.int64)
# multiply-adds per matrix below which a dot runs on one thread: a second thread's wake-up
# costs a few microseconds, and from 2^20 (a 256x64 by 64x64 product, 30 us) two threads
# ran 1.5x faster on 2 cores, 1.9x from 2^24 (an attention model's 1024x64 by 64x256);
# with 2^27 a train_gpt step on one device ran its products on one thread, 15-20% slower
SMALL_DOT = 1 << 20


def set_blas_threads(n):
    """BLAS threads for the process (the ranks of the local runtime share one budget)."""
    if n == blas_threads_cell[0]:
        return
    b = blas()
    if b.get("set_threads") is not None:
        b["set_threads"](int(n))
    blas_threads_cell[0] = n


def shares_blas(comm) -> bool:
    """Several ranks of the run are threads of this process (the local runtime): its one
    BLAS thread count then stays as the runtime set it for the run, since a rank switching
    it would change the bits of another rank's product running at that moment
    (runtime/blas.py)."""
    return getattr(comm, "ranks_in_process", 1) > 1


def set_threads_addr():
    st = blas().get("set_threads")
    return ctypes.cast(st, ctypes.c_void_p).value if st is not None else 0


_helpers = None


def helpers():
    """{name: address} of spmd_run and the dot wrappers (compiled once, cached on disk)."""
    global _helpers
    if _helpers is None:
        b = blas()
        with _init_lock:
            if _helpers is None:
                _helpers = _compile_helpers(b.get("int", "i64"))
    return _helpers


def _compile_helpers(it):
    ir = RUNNER_IR + LOOP_IR + _dot_ir("f32", "float", it) + _dot_ir("f64", "double", it) + \
        "".join(_copy_ir(n) + _scopy_ir(n) + _scopy_ir(n, True) for n in (1, 4, 8)) + GATHER_IR_DECL + _gather_ir() + \
        _scatter_ir("f32", "float") + _scatter_ir("f64", "double") + \
        _colsum_ir("f32", "float") + _colsum_ir("f64", "double") + exchange_ir()
    names = ["spmd_loop", "spmd_run_multi", "spmd_colsum_f32", "spmd_colsum_f64", "spmd_run", "spmd_dot_f32", "spmd_dot_f64",
             "spmd_copy1", "spmd_copy4", "spmd_copy8",
             "spmd_scopy1", "spmd_scopy4", "spmd_scopy8", "spmd_dscopy1", "spmd_dscopy4", "spmd_dscopy8",
             "spmd_gather", "spmd_scatter_f32", "spmd_scatter_f64"] + EXCHANGE_NAMES
    addrs = compile_ir(ir, names, None, False)
    run = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64)(addrs["spmd_run"])
    run_multi = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)(addrs["spmd_run_multi"])
    return dict(addrs, run=run, run_multi=run_multi)


# ----------------------------------------------------------------------------- layouts
def gemm_operand(rs, cs, isz, rows, cols):
    """(transpose flag, leading dimension) of a matrix with row and column strides `rs`,
    `cs` (bytes) as a BLAS operand of `rows x cols`, or None if BLAS cannot read it as it is."""
    if rs % isz or cs % isz:
        return None
    if cols == 1 or cs == isz:                  # row-major
        ld = rs // isz if rows > 1 else cols
        if ld >= max(1, cols):
            return 111, ld
    if rows == 1 or rs == isz:                  # column-major: the transpose of a row-major
        ld = cs // isz if cols > 1 else rows
        if ld >= max(1, rows):
            return 112, ld
    return None


def batch_levels(batch_shape):
    """Ways to run a dot's batch dimensions as two nested loops (outer, inner extents)."""
    b = int(np.prod(batch_shape, dtype=np.int64))
    out = [(1, b)]
    for j in range(1, len(batch_shape)):
        out.append((int(np.prod(batch_shape[:j], dtype=np.int64)), int(np.prod(batch_shape[j:], dtype=np.int64))))
    return out


# ----------------------------------------------------------------------------- copies
COPY_DIMS = 6
# argument block of a copy: dst src, then COPY_DIMS extents and COPY_DIMS source strides
# (bytes); the destination is contiguous, written in row-major order


def _copy_ir(isz):
    t = {1: "i8", 4: "i32", 8: "i64"}[isz]
    lines = [f"define void @spmd_copy{isz}(ptr %a) {{", "entry:",
             "  %dp = load ptr, ptr %a", "  %g1 = getelementptr i64, ptr %a, i64 1", "  %sp = load ptr, ptr %g1",
             "  %o.a = alloca i64", "  store i64 0, ptr %o.a"]
    for d in range(COPY_DIMS):
        lines += [f"  %ge{d} = getelementptr i64, ptr %a, i64 {2 + d}", f"  %e{d} = load i64, ptr %ge{d}",
                  f"  %gs{d} = getelementptr i64, ptr %a, i64 {2 + COPY_DIMS + d}", f"  %s{d} = load i64, ptr %gs{d}"]
    lines.append("  br label %h0")
    prev_lbl = "entry"
    for d in range(COPY_DIMS):
        lines += [f"h{d}:", f"  %i{d} = phi i64 [0, %{prev_lbl}], [%n{d}, %x{d + 1}]" if d < COPY_DIMS - 1
                  else f"  %i{d} = phi i64 [0, %{prev_lbl}], [%n{d}, %b{d}]",
                  f"  %c{d} = icmp slt i64 %i{d}, %e{d}", f"  br i1 %c{d}, label %b{d}, label %x{d}", f"b{d}:",
                  f"  %m{d} = mul i64 %i{d}, %s{d}", f"  %off{d} = add i64 {'%off' + str(d - 1) if d else '0'}, %m{d}"]
        if d < COPY_DIMS - 1:
            lines.append(f"  br label %h{d + 1}")
            prev_lbl = f"b{d}"
    last = COPY_DIMS - 1
    lines += [f"  %src = getelementptr i8, ptr %sp, i64 %off{last}", f"  %v = load {t}, ptr %src",
              "  %o = load i64, ptr %o.a", f"  %dst = getelementptr {t}, ptr %dp, i64 %o",
              f"  store {t} %v, ptr %dst", "  %o1 = add i64 %o, 1", "  store i64 %o1, ptr %o.a",
              f"  %n{last} = add i64 %i{last}, 1", f"  br label %h{last}"]
    for d in range(last, -1, -1):
        lines.append(f"x{d}:")
        if d == 0:
            lines.append("  ret void")
        else:
            lines += [f"  %n{d - 1} = add i64 %i{d - 1}, 1", f"  br label %h{d - 1}"]
    return "\n".join(lines) + "\n}\n"


def _scopy_ir(isz, at_starts=False):
    """spmd_scopy{isz}: a copy between two strided layouts (block: dst src, COPY_DIMS
    extents, source strides, destination strides, in bytes).

    spmd_dscopy{isz} (at_starts): the same into a window of dst whose start along each dim
    is read when it runs (a dynamic_update_slice at traced starts); the block goes on with
    COPY_DIMS pointers to the starts, their byte widths (8: int64, 4: int32, 0: no
    pointer, the start is 0), the largest start of each dim (a start is clamped to [0,
    largest], as the op's), and dst's stride of each dim in bytes."""
    t = {1: "i8", 4: "i32", 8: "i64"}[isz]
    D = COPY_DIMS
    name = f"spmd_dscopy{isz}" if at_starts else f"spmd_scopy{isz}"
    lines = [f"define void @{name}(ptr %a) {{", "entry:",
             "  %d0p = load ptr, ptr %a" if at_starts else "  %dp = load ptr, ptr %a",
             "  %g1 = getelementptr i64, ptr %a, i64 1", "  %sp = load ptr, ptr %g1"]
    if not at_starts:         # a copy of a buffer onto itself (an update in place) moves nothing
        lines += ["  %same = icmp eq ptr %dp, %sp"]
        for d in range(D):
            lines += [f"  %gS{d} = getelementptr i64, ptr %a, i64 {2 + D + d}", f"  %S{d} = load i64, ptr %gS{d}",
                      f"  %gT{d} = getelementptr i64, ptr %a, i64 {2 + 2 * D + d}", f"  %T{d} = load i64, ptr %gT{d}",
                      f"  %eq{d} = icmp eq i64 %S{d}, %T{d}",
                      f"  %same{d} = and i1 {'%same' if d == 0 else '%same' + str(d - 1)}, %eq{d}"]
        lines += [f"  br i1 %same{D - 1}, label %done, label %go", "go:"]
    if at_starts:
        lines += ["  %zero = alloca i64", "  store i64 0, ptr %zero"]
        acc = "0"
        for d in range(D):
            for nm, at in (("p", 2 + 3 * D + d), ("w", 2 + 4 * D + d), ("hi", 2 + 5 * D + d), ("ds", 2 + 6 * D + d)):
                lines += [f"  %g{nm}{d} = getelementptr i64, ptr %a, i64 {at}"]
            lines += [f"  %p{d} = load ptr, ptr %gp{d}", f"  %w{d} = load i64, ptr %gw{d}",
                      f"  %hi{d} = load i64, ptr %ghi{d}", f"  %ds{d} = load i64, ptr %gds{d}",
                      f"  %is8{d} = icmp eq i64 %w{d}, 8", f"  %is4{d} = icmp eq i64 %w{d}, 4",
                      f"  %p8{d} = select i1 %is8{d}, ptr %p{d}, ptr %zero",
                      f"  %p4{d} = select i1 %is4{d}, ptr %p{d}, ptr %zero",
                      f"  %v8{d} = load i64, ptr %p8{d}", f"  %v4{d} = load i32, ptr %p4{d}",
                      f"  %x4{d} = sext i32 %v4{d} to i64",
                      f"  %sv{d} = select i1 %is4{d}, i64 %x4{d}, i64 %v8{d}",
                      f"  %neg{d} = icmp slt i64 %sv{d}, 0", f"  %lo{d} = select i1 %neg{d}, i64 0, i64 %sv{d}",
                      f"  %big{d} = icmp sgt i64 %lo{d}, %hi{d}", f"  %cl{d} = select i1 %big{d}, i64 %hi{d}, i64 %lo{d}",
                      f"  %od{d} = mul i64 %cl{d}, %ds{d}", f"  %acc{d} = add i64 {acc}, %od{d}"]
            acc = f"%acc{d}"
        lines.append(f"  %dp = getelementptr i8, ptr %d0p, i64 {acc}")
    for d in range(D):
        for name, at in (("e", 2 + d), ("s", 2 + D + d), ("t", 2 + 2 * D + d)):
            lines += [f"  %g{name}{d} = getelementptr i64, ptr %a, i64 {at}",
                      f"  %{name}{d} = load i64, ptr %g{name}{d}"]
    lines.append("  br label %h0")
    prev = "entry" if at_starts else "go"
    for d in range(D):
        back = f"%x{d + 1}" if d < D - 1 else f"%b{d}"
        lines += [f"h{d}:", f"  %i{d} = phi i64 [0, %{prev}], [%n{d}, {back}]",
                  f"  %c{d} = icmp slt i64 %i{d}, %e{d}", f"  br i1 %c{d}, label %b{d}, label %x{d}", f"b{d}:",
                  f"  %ms{d} = mul i64 %i{d}, %s{d}", f"  %so{d} = add i64 {'%so' + str(d - 1) if d else '0'}, %ms{d}",
                  f"  %mt{d} = mul i64 %i{d}, %t{d}", f"  %to{d} = add i64 {'%to' + str(d - 1) if d else '0'}, %mt{d}"]
        if d < D - 1:
            lines.append(f"  br label %h{d + 1}")
            prev = f"b{d}"
    last = D - 1
    lines += [f"  %src = getelementptr i8, ptr %sp, i64 %so{last}", f"  %v = load {t}, ptr %src",
              f"  %dst = getelementptr i8, ptr %dp, i64 %to{last}", f"  store {t} %v, ptr %dst",
              f"  %n{last} = add i64 %i{last}, 1", f"  br label %h{last}"]
    for d in range(last, -1, -1):
        lines.append(f"x{d}:")
        lines += ["  ret void"] if d == 0 else [f"  %n{d - 1} = add i64 %i{d - 1}, 1", f"  br label %h{d - 1}"]
    if not at_starts:
        lines += ["done:", "  ret void"]
    return "\n".join(lines) + "\n}\n"


def scopy_entries(src, dst):
    """[extents..., source strides..., destination strides...] (padded to COPY_DIMS) for
    copying the strided view `src` into the strided view `dst` of the same shape, or None."""
    if src.ndim > COPY_DIMS:
        return None
    pad = COPY_DIMS - src.ndim
    return [1] * pad + list(src.shape) + [0] * pad + list(src.strides) + [0] * pad + list(dst.strides)


def copy_entries(view, isz):
    """[extents..., strides...] (padded to COPY_DIMS) for copying a strided view, or None."""
    if view.ndim > COPY_DIMS:
        return None
    pad = COPY_DIMS - view.ndim
    return [1] * pad + list(view.shape) + [0] * pad + list(view.strides)


# ----------------------------------------------------------------------------- gather/scatter
# take-form gather and scatter-add along axis 0 of contiguous arrays (indices clamped, as
# the ops' numpy references do). gather: out idx x n_idx nrows row_bytes idx64
# scatter: out x idx upd n_idx nrows row_len idx64 x_bytes (adds in index order, as np.add.at)
def _index_load(lines, var, idx_ptr, i):
    lines += [f"  %ip4.{var} = getelementptr i32, ptr {idx_ptr}, i64 {i}",
              f"  %ip8.{var} = getelementptr i64, ptr {idx_ptr}, i64 {i}",
              f"  br i1 %is64, label %l8.{var}, label %l4.{var}",
              f"l4.{var}:", f"  %v4.{var} = load i32, ptr %ip4.{var}", f"  %w4.{var} = sext i32 %v4.{var} to i64",
              f"  br label %lj.{var}", f"l8.{var}:", f"  %w8.{var} = load i64, ptr %ip8.{var}", f"  br label %lj.{var}",
              f"lj.{var}:", f"  %raw.{var} = phi i64 [%w4.{var}, %l4.{var}], [%w8.{var}, %l8.{var}]",
              f"  %lo.{var} = icmp slt i64 %raw.{var}, 0", f"  %c0.{var} = select i1 %lo.{var}, i64 0, i64 %raw.{var}",
              f"  %hi.{var} = icmp sgt i64 %c0.{var}, %maxrow",
              f"  %{var} = select i1 %hi.{var}, i64 %maxrow, i64 %c0.{var}"]


def _fields(lines, n, ptrs):
    for j in range(n):
        lines.append(f"  %g{j} = getelementptr i64, ptr %a, i64 {j}")
        lines.append(f"  %f{j} = load {'ptr' if j in ptrs else 'i64'}, ptr %g{j}")


GATHER_IR_DECL = "declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)\n"


def _gather_ir():
    lines = ["define void @spmd_gather(ptr %a) {", "entry:"]
    _fields(lines, 6, (0, 1, 2))      # out idx x n_idx nrows row_bytes ; idx64 at 6
    lines += ["  %g6 = getelementptr i64, ptr %a, i64 6", "  %f6 = load i64, ptr %g6",
              "  %is64 = icmp ne i64 %f6, 0", "  %maxrow = sub i64 %f4, 1", "  br label %h", "h:",
              "  %i = phi i64 [0, %entry], [%i1, %lj.r]", "  %c = icmp slt i64 %i, %f3", "  br i1 %c, label %b, label %x",
              "b:"]
    _index_load(lines, "r", "%f1", "%i")
    lines += ["  %so = mul i64 %r, %f5", "  %src = getelementptr i8, ptr %f2, i64 %so",
              "  %do = mul i64 %i, %f5", "  %dst = getelementptr i8, ptr %f0, i64 %do",
              "  call void @llvm.memcpy.p0.p0.i64(ptr %dst, ptr %src, i64 %f5, i1 false)",
              "  %i1 = add i64 %i, 1", "  br label %h", "x:", "  ret void", "}"]
    return "\n".join(lines) + "\n"


def _scatter_ir(t, T):
    lines = [f"define void @spmd_scatter_{t}(ptr %a) {{", "entry:"]
    _fields(lines, 9, (0, 1, 2, 3))   # out x idx upd n_idx nrows row_len idx64 x_bytes
    lines += ["  call void @llvm.memcpy.p0.p0.i64(ptr %f0, ptr %f1, i64 %f8, i1 false)",
              "  %is64 = icmp ne i64 %f7, 0", "  %maxrow = sub i64 %f5, 1", "  br label %h", "h:",
              "  %i = phi i64 [0, %entry], [%i1, %xe]", "  %c = icmp slt i64 %i, %f4", "  br i1 %c, label %b, label %x",
              "b:"]
    _index_load(lines, "r", "%f2", "%i")
    lines += ["  %ro = mul i64 %r, %f6", f"  %drow = getelementptr {T}, ptr %f0, i64 %ro",
              "  %uo = mul i64 %i, %f6", f"  %urow = getelementptr {T}, ptr %f3, i64 %uo", "  br label %he", "he:",
              "  %e = phi i64 [0, %lj.r], [%e1, %be]", "  %ce = icmp slt i64 %e, %f6",
              "  br i1 %ce, label %be, label %xe", "be:",
              f"  %pd = getelementptr {T}, ptr %drow, i64 %e", f"  %pu = getelementptr {T}, ptr %urow, i64 %e",
              f"  %vd = load {T}, ptr %pd", f"  %vu = load {T}, ptr %pu", f"  %s = fadd {T} %vd, %vu",
              f"  store {T} %s, ptr %pd", "  %e1 = add i64 %e, 1", "  br label %he", "xe:",
              "  %i1 = add i64 %i, 1", "  br label %h", "x:", "  ret void", "}"]
    return "\n".join(lines) + "\n"


def _colsum_ir(t, T):
    """out[j] = sum over i of x[i, j] for a contiguous (rows, cols) x, in row order (as numpy's
    sum over leading axes adds them). args: out x rows cols"""
    lines = [f"define void @spmd_colsum_{t}(ptr %a) {{", "entry:"]
    _fields(lines, 4, (0, 1))
    lines += ["  br label %zh", "zh:", "  %z = phi i64 [0, %entry], [%z1, %zb]", "  %zc = icmp slt i64 %z, %f3",
              "  br i1 %zc, label %zb, label %h", "zb:", f"  %zp = getelementptr {T}, ptr %f0, i64 %z",
              f"  store {T} 0.0, ptr %zp", "  %z1 = add i64 %z, 1", "  br label %zh",
              "h:", "  %i = phi i64 [0, %zh], [%i1, %xe]", "  %c = icmp slt i64 %i, %f2", "  br i1 %c, label %b, label %x",
              "b:", "  %ro = mul i64 %i, %f3", f"  %row = getelementptr {T}, ptr %f1, i64 %ro", "  br label %he",
              "he:", "  %e = phi i64 [0, %b], [%e1, %be]", "  %ce = icmp slt i64 %e, %f3",
              "  br i1 %ce, label %be, label %xe", "be:",
              f"  %pd = getelementptr {T}, ptr %f0, i64 %e", f"  %pu = getelementptr {T}, ptr %row, i64 %e",
              f"  %vd = load {T}, ptr %pd", f"  %vu = load {T}, ptr %pu", f"  %s = fadd {T} %vd, %vu",
              f"  store {T} %s, ptr %pd", "  %e1 = add i64 %e, 1", "  br label %he", "xe:",
              "  %i1 = add i64 %i, 1", "  br label %h", "x:", "  ret void", "}"]
    return "\n".join(lines) + "\n"
