"""How a step that runs on its own (not inside a fused kernel) runs: the `native`,
`run` and `prepare` entries of the lowering table (lowering_table.py).

- `native(sched, op)`: the step as instructions of a native segment (schedule.py): a list
  of `(function address, argument entries)`, FREE (nothing to run: the value is read
  where it is), or None (the step runs from Python between segments). An argument entry
  is an int, `(Value | Scratch, byte offset)`, a pointer the schedule fills in, or Here(k),
  the address of entry k of the same block.
- `run(exe, op, env, comm, slots, nthreads)`: the step from Python, its result into env.
- `prepare(op)`: what the step needs worked out once, at build time (exe.prepared[op]).
"""
from __future__ import annotations

import numpy as np

from ...errors import SpmdError
from ...ir.ops.dot import dims as dot_dims
from ...ir.ops.indexing import clamp_starts
from ..executor import run_op
from . import native

class Free:
    """What `native` returns for a step with no instruction: its value is read where it is."""


FREE = Free()


class Scratch:
    """A per-thread buffer an instruction uses internally (not a value of the program).
    Instructions run one at a time, so scratch of the same `slot` (a dot's lhs copy is
    slot 0, its rhs copy slot 1) shares one buffer, as large as the largest."""

    def __init__(self, nbytes, slot=0):
        self.nbytes, self.slot = nbytes, slot


class Here:
    """An argument entry holding the address of entry `k` of the same instruction's block
    (a loop's instruction holds its body's programs and argument blocks in its own block)."""

    def __init__(self, k):
        self.k = k


# -- from Python ------------------------------------------------------------------------------
def run_reference(exe, op, env, comm, slots, nthreads):
    """The op's numpy reference: into the memory plan's buffer when the OpDef `takes_out`
    (maybe its operand's: all_reduce in place); control-flow bodies (while, cond, scan)
    run as native executables of their own."""
    if not op.opdef.takes_out:
        run_op(op, env, comm, run=lambda g, xs: exe.subprograms[id(g)](xs, comm), parts=exe.parts)
        return
    out = exe.buffer(op.result, slots, env)
    placed = exe.memory.joined.get(op.result)
    if placed is not None:
        join_into(op, [env[o] for o in op.operands], out, placed)
        env[op.result] = out
        return
    run_op(op, env, comm, out=out, parts=exe.parts)
    if env[op.result] is not out:
        np.copyto(out, env[op.result])
        env[op.result] = out


def run_update(exe, op, env, comm, slots, nthreads):
    """A dynamic_update_slice from Python (traced starts): into the memory plan's buffer,
    which holds the operand already where the plan wrote the update over it."""
    x, u, *starts = [env[o] for o in op.operands]
    out = exe.buffer(op.result, slots, env)
    if not (out.__array_interface__ == x.__array_interface__):     # (written over x: it is there)
        np.copyto(out, x)
    at = clamp_starts(x.shape, u.shape, starts)
    out[tuple(slice(s, s + k) for s, k in zip(at, u.shape))] = u
    env[op.result] = out


def run_copied_into(exe, op, env, comm, slots, nthreads):
    """The op's numpy reference, its result copied into the memory plan's buffer (a row
    whose native instructions write there, so the plan places the result)."""
    run_op(op, env, comm, parts=exe.parts)
    out = exe.buffer(op.result, slots, env)
    np.copyto(out, env[op.result])
    env[op.result] = out


def join_into(op, xs, out, placed):
    """A join (concatenate) whose operands at `placed` were computed in their place in
    `out` (the memory plan): only the others are copied in."""
    d = op.opdef.reindex.joins(op.attrs)
    at = 0
    for i, x in enumerate(xs):
        n = x.shape[d]
        region = out[(slice(None),) * d + (slice(at, at + n),)]
        at += n
        if i in placed and x.__array_interface__["data"][0] == region.__array_interface__["data"][0] \
                and x.strides == region.strides:
            continue
        region[...] = x


def run_matmul(exe, op, env, comm, slots, nthreads):
    """dot_general through numpy's matmul (BLAS), straight into the plan's buffer."""
    plan = exe.prepared[op]
    _, (_, m, k), _, _, (_, _, n) = plan
    if not native.shares_blas(comm):
        native.set_blas_threads(1 if m * n * k < native.SMALL_DOT else nthreads)
    out = exe.buffer(op.result, slots, env)
    try:
        matmul_into(*[env[o] for o in op.operands], out, plan)
    except Exception as e:
        raise SpmdError(f"{op.name} at {op.loc} failed at run time: {type(e).__name__}: {e}") from e
    env[op.result] = out


def dot_plan(op):
    """(lhs permutation, lhs 3-d shape, rhs permutation, rhs 3-d shape, out 3-d shape):
    dot_general as one batched matmul, worked out once at compile time."""
    lhs, rhs = op.operands
    lb, rb, lc, rc = (op.attrs[k] for k in ("lhs_batch", "rhs_batch", "lhs_contract", "rhs_contract"))
    lf, rf = dot_dims(lhs.ndim, rhs.ndim, lb, rb, lc, rc)
    size = lambda v, ds: int(np.prod([v.shape[d] for d in ds], dtype=np.int64))  # noqa: E731
    b, m, n, k = size(lhs, lb), size(lhs, lf), size(rhs, rf), size(lhs, lc)
    return (list(lb) + lf + list(lc), (b, m, k), list(rb) + list(rc) + rf, (b, k, n), (b, m, n))


def matmul_into(lhs, rhs, out, plan):
    """The operands' transposes are views (BLAS reads them transposed); the result goes
    straight into `out`."""
    pa, sa, pb, sb, so = plan
    a = lhs.transpose(pa).reshape(sa)
    c = rhs.transpose(pb).reshape(sb)
    o = out.reshape(so)
    if so[0] == 1:
        np.matmul(a[0], c[0], out=o[0])
    else:
        np.matmul(a, c, out=o)


# -- as native instructions -------------------------------------------------------------------
def literal_instrs(sched, op):
    """A constant is made once and read where it is (the graph keeps the array)."""
    c = np.asarray(op.attrs["value"], dtype=op.result.dtype)
    sched.consts[op.result] = c if c.flags.c_contiguous else c.copy()
    return FREE


CONST_LIMIT = 1 << 16     # elements: a re-indexed constant bigger than this is made per call


def reindexed_constant_instrs(sched, op):
    """A re-index (broadcast, transpose, slice...) of constants is computed once, when the
    program is built, and read where it is (like a constant)."""
    if op.result.size > CONST_LIMIT or not all(o in sched.consts for o in op.operands):
        return None
    c = op.opdef.ref(*[sched.consts[o] for o in op.operands], **op.attrs)
    sched.consts[op.result] = np.ascontiguousarray(c, dtype=op.result.dtype)
    return FREE


def copy_instrs(sched, op):
    """A reshape numpy would copy (of a transposed view): a native strided copy of its
    operand, in row-major order, into a fresh buffer."""
    isz = np.dtype(op.result.dtype).itemsize
    if isz not in (1, 4, 8) or op.result.size == 0:
        return None
    base, view, dbase = sched.dummy(op.operands[0])
    ext = native.copy_entries(view, isz)
    if ext is None:
        return None
    off = view.__array_interface__["data"][0] - dbase.__array_interface__["data"][0]
    return [(sched.helpers[f"spmd_copy{isz}"], [(op.result, 0), (base, off)] + ext)]


def join_instrs(sched, op):
    """A join (concatenate) as native strided copies of its operands into their places in
    the result; an operand the memory plan computed in its place is not copied. None for
    ops of the row that are not joins (pad, dynamic_slice), or item sizes the copies do
    not move."""
    joins = op.opdef.reindex.joins
    isz = np.dtype(op.result.dtype).itemsize
    if joins is None or isz not in (1, 4, 8) or op.result.size == 0:
        return None
    d = joins(op.attrs)
    mem = sched.exe.memory
    out = np.empty(op.result.shape, op.result.dtype)
    placed = mem.joined.get(op.result, ())
    home = mem.place(op.result)
    instrs, at = [], 0
    for i, x in enumerate(op.operands):
        n = x.shape[d]
        region = out[(slice(None),) * d + (slice(at, at + n),)]
        off = region.__array_interface__["data"][0] - out.__array_interface__["data"][0]
        at += n
        if x.size == 0:
            continue
        if i in placed and home is not None and mem.place(x) == (home[0], home[1] + off):
            continue
        base, view, dbase = sched.dummy(x)
        ext = native.scopy_entries(view, region)
        if ext is None:
            return None
        src = view.__array_interface__["data"][0] - dbase.__array_interface__["data"][0]
        instrs.append((sched.helpers[f"spmd_scopy{isz}"], [(op.result, off), (base, src)] + ext))
    return instrs or FREE


def update_instrs(sched, op):
    """A dynamic_update_slice (a one-element write through a view, views.py; a loop's
    `x[i] = v`, compiler/passes/roll.py) as native strided copies: the operand into the
    result (unless the memory plan put them in one buffer), then the update into its
    window, at numpy's clamped starts: those that are constants placed now, the traced
    ones read when it runs (spmd_dscopy). None for item sizes the copies do not move."""
    x, u, *starts = op.operands
    isz = np.dtype(op.result.dtype).itemsize
    traced = [s not in sched.consts for s in starts]
    if isz not in (1, 4, 8) or op.result.size == 0 or \
            any(t and s in sched.views for s, t in zip(starts, traced)):
        return None
    at = [0 if t else min(max(int(sched.consts[s]), 0), n - k) for s, t, n, k in zip(starts, traced, x.shape, u.shape)]
    out = np.empty(op.result.shape, op.result.dtype)
    mem = sched.exe.memory
    home = mem.place(op.result)
    moves = [] if x not in sched.views and home is not None and mem.place(x) == home else [(x, out, 0)]
    if u.size:
        region = out[(Ellipsis,) + tuple(slice(a, a + k) for a, k in zip(at, u.shape))]   # (0-d: a view too)
        moves.append((u, region, region.__array_interface__["data"][0] - out.__array_interface__["data"][0]))
    instrs = []
    for v, dst, off in moves:
        base, view, dbase = sched.dummy(v)
        ext = native.scopy_entries(view, dst)
        if ext is None:
            return None
        src = view.__array_interface__["data"][0] - dbase.__array_interface__["data"][0]
        if v is u and any(traced):
            pad = native.COPY_DIMS - out.ndim
            ptrs = [0] * pad + [(s, 0) if t else 0 for s, t in zip(starts, traced)]
            widths = [0] * pad + [np.dtype(s.dtype).itemsize if t else 0 for s, t in zip(starts, traced)]
            his = [0] * pad + [n - k for n, k in zip(x.shape, u.shape)]
            instrs.append((sched.helpers[f"spmd_dscopy{isz}"], [(op.result, off), (base, src)] + ext + ptrs + widths
                           + his + [0] * pad + list(out.strides)))
        else:
            instrs.append((sched.helpers[f"spmd_scopy{isz}"], [(op.result, off), (base, src)] + ext))
    return instrs or FREE


def column_sum_instrs(sched, op):
    """A float sum over the leading axes of a contiguous operand, row by row."""
    x = op.operands[0]
    axes = tuple(op.attrs["axes"])
    if (op.attrs["kind"] != "sum" or x.dtype not in ("float32", "float64") or x in sched.views
            or axes != tuple(range(len(axes))) or x.size == 0):
        return None
    cols = op.result.size
    name = "spmd_colsum_f32" if x.dtype == "float32" else "spmd_colsum_f64"
    return [(sched.helpers[name], [(op.result, 0), (x, 0), x.size // cols, cols])]


def _rows_of(sched, op):
    """(operand, indices, row length, 1 if the indices are int64) of a gather or scatter
    along axis 0 of contiguous operands, or None."""
    if op.attrs["axis"] != 0 or any(o in sched.views for o in op.operands):
        return None
    x, idx = op.operands[0], op.operands[1]
    if x.shape[0] == 0 or idx.dtype not in ("int32", "int64"):
        return None
    return x, idx, x.size // x.shape[0], int(idx.dtype == "int64")


def take_rows_instrs(sched, op):
    """gather along axis 0, natively."""
    got = _rows_of(sched, op)
    if got is None:
        return None
    x, idx, row, is64 = got
    isz = np.dtype(x.dtype).itemsize
    return [(sched.helpers["spmd_gather"], [(op.result, 0), (idx, 0), (x, 0), idx.size, x.shape[0], row * isz,
                                            is64])]


def add_rows_instrs(sched, op):
    """scatter(-add) of float rows along axis 0, natively."""
    got = _rows_of(sched, op)
    if got is None or got[0].dtype not in ("float32", "float64"):
        return None
    x, idx, row, is64 = got
    isz = np.dtype(x.dtype).itemsize
    name = "spmd_scatter_f32" if x.dtype == "float32" else "spmd_scatter_f64"
    return [(sched.helpers[name], [(op.result, 0), (x, 0), (idx, 0), (op.operands[2], 0), idx.size, x.shape[0],
                                   row, is64, x.size * isz])]


def gemm_instrs(sched, op):
    """A dot as cblas calls reading its operands in place, or, for an operand BLAS cannot
    read as it is (a reshape of a transposed view), from a native copy into scratch."""
    b, helpers = sched.blas, sched.helpers
    dt = op.result.dtype
    if not b or dt not in ("float32", "float64") or any(o.dtype != dt for o in op.operands):
        return None
    pa, sa, pb, sb, so = sched.exe.prepared[op]
    _, m, n = so
    k = sa[2]
    lhs, rhs = op.operands
    bshape = [lhs.shape[d] for d in op.attrs["lhs_batch"]]
    if min([m, n, k] + bshape) == 0:
        return None
    isz = np.dtype(dt).itemsize
    da, db = sched.dummy(lhs), sched.dummy(rhs)
    bt = int(np.prod(bshape, dtype=np.int64))
    # in place with some split of the batch loops; else the operands that cannot be
    # read in place are copied, in the dot's order, to contiguous scratch
    for b1, b2, copy in [lv + (False,) for lv in native.batch_levels(bshape)] + [(1, bt, True)]:
        got, pre = [], []
        for (base, view, dbase), perm, rows, cols in ((da, pa, m, k), (db, pb, k, n)):
            lay = in_place_layout(view, dbase, perm, (b1, b2, rows, cols), isz)
            if lay is not None:
                got.append((base,) + lay)
                continue
            if not copy:
                break
            vt = view.transpose(perm)
            ext = native.copy_entries(vt, isz)
            if ext is None:
                return None
            sc = Scratch(vt.size * isz, len(pre))
            off = vt.__array_interface__["data"][0] - dbase.__array_interface__["data"][0]
            pre.append((helpers[f"spmd_copy{isz}"], [(sc, 0), (base, off)] + ext))
            got.append((sc, 0, 111, cols, bt * rows * cols * isz, rows * cols * isz))
        if len(got) < 2:
            continue
        (ba, offa, ta, lda, a1, a2), (bb, offb, tb, ldb, c1, c2) = got
        name = "spmd_dot_f32" if dt == "float32" else "spmd_dot_f64"
        entries = [b["gemm"][dt], (ba, offa), (bb, offb), (op.result, 0), m, n, k, lda, ldb, n, ta, tb,
                   b1, a1, c1, b2 * m * n * isz, b2, a2, c2, m * n * isz,
                   0 if sched.fixed_blas else native.set_threads_addr(),
                   1 if m * n * k < native.SMALL_DOT else sched.nthreads,
                   native.blas_threads_cell.ctypes.data]
        return pre + [(helpers[name], entries)]
    return None


def in_place_layout(view, dbase, perm, shape4, isz):
    """(offset, transpose flag, leading dim, outer and inner batch strides) for BLAS to read
    `view`, permuted and reshaped to (outer, inner, rows, cols), where it is; or None."""
    try:
        v4 = view.transpose(perm).reshape(shape4)
    except ValueError:
        return None
    if not np.may_share_memory(v4, dbase):
        return None
    lay = native.gemm_operand(v4.strides[2], v4.strides[3], isz, shape4[2], shape4[3])
    if lay is None:
        return None
    off = v4.__array_interface__["data"][0] - dbase.__array_interface__["data"][0]
    return (off,) + lay + (v4.strides[0], v4.strides[1])
