"""The LLVM backend's lowering table: for each kind of op (the row an OpDef names in its
`lowering` field), how this backend runs it.

An op is lowered natively in one or both of two ways: fused into loop kernels (`emit`:
the code generator computes an element of it, emitters.py), or as a step of its own in a
native segment (`native`, steps.py). A row with neither runs its ops through their numpy
reference, and says why (`numpy`). tests/backends/test_lowering.py checks the table
against the registry: every op names a row, every row is used, and every row is native or
gives its reason.

Adding an op of a kind that is here is its registry entry alone; a new kind is one row.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

from .emitters import emit_accumulate, emit_elementwise, emit_index_map, emit_literal, emit_pieces, emit_position, \
    emit_row_major, position_elementwise, position_index_map, position_of_index, position_row_major
from .exchange import device_value_instrs, permute_instrs
from .exchange_reduce import (all_gather_instrs, all_reduce_done_instrs, all_reduce_instrs, all_reduce_start_instrs,
                              all_to_all_instrs, reduce_scatter_instrs)
from .fuse import splat
from .loops import run_scan, scan_instrs, scan_overwrites
from .memory import operand_written_over
from .scalar import SV, ScalarBuilder, Unsupported, compute_dtype, is_complex
from .steps import (add_rows_instrs, column_sum_instrs, copy_instrs, dot_plan, gemm_instrs, join_instrs,
                    literal_instrs, reindexed_constant_instrs, run_copied_into, run_matmul, run_reference,
                    run_update, take_rows_instrs, update_instrs)


def _always(op):
    return True


@dataclass(frozen=True)
class Lowering:
    # fused into loop kernels: (codegen, op, value, index map) -> (SV, scope) (emitters.py)
    emit: Optional[Callable] = None
    # op -> may this op join a kernel (beyond having `emit`)?
    fuses: Callable = _always
    # (codegen, op, value, index map) -> the value as a position (emitters.py, index_sets.py)
    position: Optional[Callable] = None
    # a step on its own in a native segment: (schedule, op) -> instructions | FREE | None
    # (None: this step runs from Python), steps.py
    native: Optional[Callable] = None
    # a step on its own from Python: (executable, op, env, comm, arena, threads)
    run: Callable = run_reference
    # op -> what `native` and `run` need worked out once, at build time (exe.prepared[op])
    prepare: Optional[Callable] = None
    # the step writes its result into a buffer it is given, which the memory plan places
    # like a kernel's (ops whose OpDef `takes_out` do too)
    writes_into: bool = False
    # run as a view, its result is its operand's bytes in the same order (memory.py)
    same_bytes: bool = False
    # op -> (result, operand) positions whose result the step may write over that operand,
    # when the operand dies there (memory.py in place)
    overwrites: Optional[Callable] = None
    # why ops of this kind run through their numpy reference (rows with no native lowering)
    numpy: Optional[str] = None


# a reduction over leading axes that keeps the last one (a bias's gradient, summing the
# rows of a batch) is not fused from this size on: the kernel would read its operand
# column by column; on its own it runs row by row (natively, or numpy's sum)
COLUMN_REDUCE = 1 << 16


def column_reduce(op) -> bool:
    x = op.operands[0]
    axes = op.attrs["axes"]
    return bool(axes) and x.ndim - 1 not in axes and x.size >= COLUMN_REDUCE


def scalar_lowers(op) -> bool:
    """Does the op's scalar rule lower it for these dtypes? (A dry run of the builder.)"""
    d = op.opdef
    if d.scalar is None:
        return False
    try:
        b = ScalarBuilder(lambda line: None, lambda: "%x", lambda line: None)
        d.scalar(b, *[SV("%a", compute_dtype(o.dtype)) for o in op.operands], **op.attrs)
    except Unsupported:
        return False
    return True


MAX_PIECES = 8           # a concatenation of more operands is copied on its own (memcpy)


def pieces_lower(op) -> bool:
    """Is the op's OpDef.index_pieces defined for these attributes (a pad with interior
    padding is not), with few enough pieces?"""
    index = tuple(((("%d", 1),), 0) for _ in op.result.shape)
    got = op.opdef.reindex.index_pieces(index, [o.shape for o in op.operands], op.attrs, lambda j, lo, hi: "%o")
    return got is not None and len(got[0]) <= MAX_PIECES


LOWERINGS = {
    "elementwise": Lowering(emit=emit_elementwise, fuses=scalar_lowers, position=position_elementwise),
    "index_map": Lowering(emit=emit_index_map, native=reindexed_constant_instrs, position=position_index_map),
    "row_major": Lowering(emit=emit_row_major, native=copy_instrs, same_bytes=True, position=position_row_major),
    "position": Lowering(emit=emit_position, fuses=lambda op: all(v.dtype != "bool" for v in op.results),
                         position=position_of_index),
    "pieces": Lowering(emit=emit_pieces, fuses=pieces_lower, native=join_instrs),
    "literal": Lowering(emit=emit_literal, fuses=lambda op: splat(op.result) is not None, native=literal_instrs),
    "accumulate": Lowering(emit=emit_accumulate, fuses=lambda op: not column_reduce(op), native=column_sum_instrs),
    "matmul": Lowering(native=gemm_instrs, run=run_matmul, prepare=dot_plan, writes_into=True),
    "take_rows": Lowering(native=take_rows_instrs),
    "add_rows": Lowering(native=add_rows_instrs),
    # the memory plan places the result and may write it over the operand, which dies
    # there: a loop of one-element writes (m[i, i] = v) updates one buffer, not a copy each
    "block_copy": Lowering(native=update_instrs, run=run_update, writes_into=True, overwrites=lambda op: ((0, 0),)),
    "prefix_scan": Lowering(numpy="a running reduction along an axis: no native kernel for it yet"),
    "sorting": Lowering(numpy="numpy's stable sort"),
    "lapack": Lowering(numpy="factorizations and solves are LAPACK's, through numpy"),
    "spectral": Lowering(numpy="numpy's FFT (pocketfft)"),
    # all-reduces, all-gathers, reduce-scatters and all-to-alls: natively between the
    # ranks that share memory (exchange_reduce.py), else through the communicator (MPI,
    # Ray across hosts, what the native code does not cover). Their results, a
    # start's handle and a done's result are written into the memory plan's buffers (the
    # done's over its operand, which dies there)
    "group_reduce": Lowering(native=all_reduce_instrs),
    "group_gather": Lowering(native=all_gather_instrs),
    "group_reduce_scatter": Lowering(native=reduce_scatter_instrs),
    "group_all_to_all": Lowering(native=all_to_all_instrs),
    "group_reduce_start": Lowering(native=all_reduce_start_instrs, run=run_copied_into, writes_into=True),
    "group_reduce_done": Lowering(native=all_reduce_done_instrs, run=run_copied_into, writes_into=True,
                                  overwrites=lambda op: ((0, 1),)),
    "permute": Lowering(native=permute_instrs, run=run_copied_into, writes_into=True),
    "device_value": Lowering(native=device_value_instrs, run=run_copied_into, writes_into=True),
    "subprogram": Lowering(numpy="the loop or branch steps in Python; its bodies are LLVM executables"),
    "scan_loop": Lowering(native=scan_instrs, run=run_scan, writes_into=True, overwrites=scan_overwrites),
    "annotation": Lowering(numpy="an identity: removed before code generation (the partitioner, the last "
                                 "optimisation pass)"),
    "host": Lowering(numpy="it acts in Python (spmd.debug.print prints): nothing to compute natively"),
}


def lowering_of(op) -> Lowering:
    return LOWERINGS[op.opdef.lowering]


def fusible(op) -> bool:
    """Can the code generator compute op inside a fused kernel?"""
    row = lowering_of(op)
    if row.emit is None:
        return False
    if not op.opdef.lowers_complex and any(is_complex(v.dtype) for v in (*op.operands, *op.results)):
        return False        # the op runs through its numpy reference
    return row.fuses(op)


def overwrites(op):
    """(result, operand) positions whose result the step may write over the operand: the
    OpDef's `out_may_be_operand`, or the row's."""
    row = lowering_of(op)
    return row.overwrites(op) if row.overwrites is not None else operand_written_over(op)


def writes_into(op) -> bool:
    """Ops the backend runs into a buffer it is given (BLAS's output, `out=` of an OpDef
    that takes one): the memory plan places their results like a kernel's."""
    return lowering_of(op).writes_into or op.opdef.takes_out


def same_bytes(op) -> bool:
    return lowering_of(op).same_bytes
