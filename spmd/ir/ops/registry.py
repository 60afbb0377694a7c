"""The op registry: one OpDef per op, holding every rule the system needs of it.

Adding an op is one `register(OpDef(...))` call in the file of its family and its constant
in names.py (everything outside this file builds and names ops by those constants, so a
misspelling fails at import), plus one line in the numpy-API table (frontend/numpy_api.py)
if numpy users reach it; its `lowering`
names the row of each backend's lowering table that runs it (an op of a new kind adds
that row). The registry says what an op is; how an op is split over a mesh, where the
generic factor-driven partitioning does not fit, is not here but in
sharding/partition_rules/ (tables keyed by op name, checked against this registry).
No other file keys anything on an op's name: propagation, the partitioner, the
simplifier, fusion and the code generators read the fields below. Tests walk the
registry so that no op can miss a rule, and parse every module for op-name dispatch.

Rules are data or small functions in the IR's own terms, so `ir/` imports nothing above
it. Rules that build IR (VJP, simplification) receive the builder they emit into as an
argument: a Graph, or the simplifier's rebuild.
"""
from __future__ import annotations

from dataclasses import KW_ONLY, dataclass

import numpy as np
from typing import Callable, Optional

from ...errors import ShapeError


@dataclass(frozen=True)
class Collective:
    """What only a collective has (OpDef.collective); an op that is none has the defaults."""
    # a collective the partitioner inserts where shardings meet: the change of sharding it
    # makes, in the words of spmd.explain (lowered.report() lists these ops)
    reshards: Optional[str] = None
    # a collective that acts on each element on its own: independent instances with equal
    # attributes may run as one on the concatenation of their operands (passes/combine.py)
    combinable: bool = False
    # a collective that may run as two halves, so that computation overlaps it: the names of
    # its start op (operands -> a handle) and done op ((handle, operands) -> its results),
    # which passes/schedule_async.py places as early and as late as it can
    async_pair: Optional[tuple] = None
    # a collective in which each member sends one block and receives one (collective_permute,
    # a halo exchange): passes/exchanges_late.py moves it down to its first use, so that
    # the exchanges of a step stand together and a backend may send all of them before it
    # waits for any
    exchange: bool = False
    # on those halves: "start" or "done", and `async_of` the collective they are halves of
    phase: Optional[str] = None
    async_of: Optional[str] = None
    # the operand whose buffer `out` may be (the result written over it: all_reduce reads
    # each block of its operand before it writes that block), or None
    out_may_be_operand: Optional[int] = None
    # a collective whose result is the blocks it receives laid side by side along a dim
    # other than the first: attrs -> (the attrs of the same op that lays them along the
    # first, where its receive buffer is its result; that other dim; the number of
    # blocks), or None. passes/blocks_late.py makes it so and concatenates the blocks where
    # they are read (a fused kernel reads them from the receive buffer: no copy).
    blocks_along: Optional[Callable] = None
    # what a rank copies to line up the blocks where the collective is a call from Python
    # (MPI's communicator: the library takes each member's block as one contiguous run;
    # each copy read and written once): attrs -> (copies of the operand, copies of the
    # result), or None where it copies nothing
    repacked: Optional[Callable] = None


@dataclass(frozen=True)
class Reindex:
    """What only an op that moves elements without computing has (fusion "reindex": OpDef.reindex);
    other ops have the defaults."""
    # "reindex" ops whose element at an index reads operand 0 at an affine function of it:
    # (out_index, operand_shape, attrs) -> operand_index, each index one (terms, const) per
    # dim with terms ((loop variable, coefficient), ...). The LLVM code generator follows it
    # through fused kernels, so the op costs no memory traffic.
    index_map: Optional[Callable] = None
    # "reindex" ops whose element at an index is one of several operands (or a fill) at an
    # affine function of it, picked by range tests on the index (pad, concatenate,
    # dynamic_slice): (out_index, operand_shapes, attrs, offset) -> (pieces, fill) or None
    # (not expressible: the op runs on its own). `pieces` is a list of (operand position,
    # guard, operand index), disjoint and in order; a guard is a tuple of range tests
    # (index expression, lo, hi), all of which must hold (lo <= expression < hi); `fill`
    # is the position of the scalar operand read where no piece holds, or None (the pieces
    # cover every index). `offset(j, lo, hi)` is a loop-invariant index variable holding
    # scalar operand j clamped to [lo, hi] (the code generator reads it once per kernel).
    index_pieces: Optional[Callable] = None
    # only re-indexes its first operand: `ref` returns a view of it where numpy can (a
    # backend may then read the operand in place, with strides, instead of a copy)
    view: bool = False
    # the result is its operands laid side by side along a dimension: attrs -> that
    # dimension (concatenate). A memory plan may compute each operand in its place in the
    # result's buffer, so that joining them copies nothing.
    joins: Optional[Callable] = None


NOT_COLLECTIVE = Collective()
NOT_REINDEX = Reindex()


@dataclass(frozen=True)
class OpDef:
    """Every rule of one op. Only the name is positional: the rest are keywords, the
    collective-only ones grouped in `collective`, the reindex-only ones in `reindex`."""
    name: str
    _: KW_ONLY
    family: str
    # (*avals, **attrs) -> Aval (or a list of Avals); raises ShapeError with a reason
    infer: Callable
    # (*ndarrays, **attrs) -> ndarray: the numpy reference semantics
    ref: Callable
    # (graph, op, ct) -> tuple, one cotangent Value or None per operand; None if not differentiable
    vjp: Optional[Callable] = None
    # (avals_in, avals_out, attrs) -> FactorRule: how shardings flow through the op (Shardy)
    factors: Optional[Callable] = None
    # elementwise ops: (builder, *scalar_args) -> scalar, for fused native kernels
    scalar: Optional[Callable] = None
    # (avals_in, aval_out, attrs) -> number of floating-point operations
    flops: Optional[Callable] = None
    # its element-ops run on the divide unit (a divide, a square root), which works beside
    # the vector units: the cost model overlaps them with a kernel's other ops and bytes
    divider: bool = False
    # the dtypes the OpInfo tests feed it
    dtypes: tuple = ("float32", "float64", "int32", "int64", "bool")
    # collectives get the communicator from the runtime
    needs_comm: bool = False
    # the op is run for what it does besides computing its results (spmd.debug.print
    # prints): dead-code elimination keeps it, and it stays in its loop body
    effect: bool = False
    # the attributes that hold sub-graphs (the bodies of control-flow ops). Such an op's
    # vjp is (graph, op, cts: one per result or None, differentiate) -> per operand, where
    # differentiate(graph, start, inputs, outputs, cts, ops=None) is reverse mode over
    # graph.ops[start:] (or over `ops`)
    subgraphs: tuple = ()
    # the result is this operand itself: an annotation for the passes (optimization_barrier),
    # which the optimiser's last pass drops
    identity_of: Optional[int] = None
    # an op that stands for one of its sub-graphs (the attribute named): the compiler
    # replaces it by that body's ops before propagation (spmd.checkpoint, whose VJP alone
    # differs from its body's)
    inlined: Optional[str] = None
    # loops: attrs -> the position of the first captured operand; operands from there on
    # are the same every iteration. Every sub-graph takes the op's operands as its inputs,
    # and the one named "body" is run each iteration.
    captured_from: Optional[Callable] = None
    # (attrs, sub-graph attribute) -> how many times that sub-graph runs per run of the op
    # (a scan's body `length` times); None (the field unset) when the data decides: a
    # while's trip count, a cond's branch
    runs: Optional[Callable] = None

    # -- sharding -------------------------------------------------------------------------
    # propagation priority: 0 pass-through (elementwise, transpose, reshape...), 1
    # contractions and reductions, 2 the rest, 3 broadcasts and leaves (decided last)
    priority: int = 2
    # operand index sets the op is jointly linear in: if every operand of one set carries
    # a pending sum over axes P, so can the result. A tuple of tuples, or op -> that.
    linear: object = ()
    # what a split reduction factor leaves in the result: "sum" (a pending sum that
    # propagation may keep partial), "max"/"min"/"prod" (reduced at once), or None (the
    # op has no reduction a split leaves pending). attrs -> str | None
    reduction_kind: Callable = lambda attrs: None  # noqa: E731
    # how the partitioner may keep a `replicate` factor split: None (it may not),
    # "partial" (each device looks up what it holds, zeros elsewhere: a pending sum), or
    # "local" (each device updates what it holds: no communication)
    split_replicate: Optional[str] = None
    # the operand the op accumulates into (scatter-add): with a split reduction factor,
    # only one device of the group may add it, so it is fed as a pending sum
    accumulates_into: Optional[int] = None
    # why the op needs its `replicate` dims whole (e.g. "it needs whole matrices"): when
    # set, the partitioner warns (ReshardWarning, naming the op and user line) whenever it
    # gathers such a dim that arrived split, so the gather is never silent
    needs_whole: Optional[str] = None

    # -- optimisation and code generation ---------------------------------------------------
    # how fusion treats the op: "elementwise" (a scalar function per element), "reindex"
    # (only moves elements: copied into every kernel that reads it), "reduction", or None
    # (runs on its own: dots, collectives, indexing)
    fusion: Optional[str] = None
    # the row of each backend's lowering table that runs the op (backends/llvm/lowering_table.py
    # LOWERINGS; a test checks every op names one): ops that run alike share a row, so a
    # new op of a kind the backends know needs no backend change
    lowering: Optional[str] = None
    # the native code generator computes the op on complex values too (as a pair of
    # floats); without it, an op with complex operands or results runs through `ref`
    lowers_complex: bool = False
    # how the compact text (ir/text.py, as_text(compact=True)) writes the op: the symbol
    # between its two operands, or before its one ("+", "-"); a str, or attrs -> str
    infix: object = None
    # algebraic simplification: (rb, op, operands, uses) -> a simpler Value or None. `rb`
    # emits into the new graph, `operands` are op's operands there, `uses` counts uses
    simplify: Optional[Callable] = None
    # how the op computes on *positions*, integers affine in a kernel's loop indices (iota,
    # axis_index, constants, and + - * of them) and range tests of them (compare; and, or,
    # not): (*operand positions, **attrs) -> position, with the positions' own operators
    # (+, -, *, unary -, &, |, ~, .compare(other, direction), .convert(dtype)). The code
    # generator resolves range tests over regions of the index space (a stencil's masks).
    position: Optional[Callable] = None
    # the operand that picks between the next two (select's predicate): where it is known
    # over a region of the index space, the code generator computes only the operand picked
    picks: Optional[int] = None
    # an op whose value differs per device only by the device's place in the mesh
    # (axis_index): (mesh, **attrs) -> int64 array of its value on each device, in rank order
    device_values: Optional[Callable] = None
    # the ref can write its result into an array it is given (`ref(..., out=array)`, of
    # the result's shape and dtype), so a backend can place the result in its memory plan
    takes_out: bool = False
    # ops that are one op per numpy result, picked by a `part` attribute (svd's u / s / vh),
    # where numpy computes the results in one call: (*ndarrays, wanted: the part names,
    # **the other attrs) -> {part: ndarray}. The executors compute the parts a program
    # takes of one operand in one call (backends/executor.part_groups), not once per part.
    parts: Optional[Callable] = None

    # the fields only a collective has (Collective above)
    collective: Collective = NOT_COLLECTIVE
    # the fields only a re-indexing op has (Reindex above)
    reindex: Reindex = NOT_REINDEX

    def __post_init__(self):
        if self.collective != NOT_COLLECTIVE and self.family != "collective":
            raise ValueError(f"op {self.name}: collective fields on an op of family {self.family}")
        if self.reindex != NOT_REINDEX and self.fusion != "reindex":
            raise ValueError(f"op {self.name}: reindex fields on an op fused as {self.fusion}")

    @property
    def differentiable(self):
        return self.vjp is not None


REGISTRY: dict[str, OpDef] = {}


def register(opdef: OpDef) -> OpDef:
    if opdef.name in REGISTRY:
        raise ValueError(f"op {opdef.name} registered twice")
    REGISTRY[opdef.name] = opdef
    return opdef


def names_mismatch(declared) -> Optional[str]:
    """What is wrong with `declared`, the op names that names.py holds as constants, against
    the registry (None: they are its names)."""
    missing, extra = sorted(set(REGISTRY) - set(declared)), sorted(set(declared) - set(REGISTRY))
    if not missing and not extra:
        return None
    return (f"spmd/ir/ops/names.py does not match the registry: ops without a constant {missing}, "
            f"constants of no op {extra} (names.py holds one line NAME = \"name\" per registered op)")


def get_op(name: str) -> OpDef:
    try:
        return REGISTRY[name]
    except KeyError:
        raise ShapeError(f"unknown op {name!r}") from None


def check(cond, msg):
    """Shape rules state their requirements with check(); the message names the problem."""
    if not cond:
        raise ShapeError(msg)


def zero_of(dtype):
    """The additive zero of dtype, as the emitters' scalar fill takes it: the filler of the
    elements a device does not hold in a partial sum. For floats it is -0.0, the one zero
    with x + z == x for every x (-0.0 + 0.0 is +0.0, so a +0.0 filler would turn a looked-up
    -0.0 into +0.0 once the partial sum is reduced)."""
    if dtype == "bool":
        return False
    return -0.0 if dtype.startswith("float") or dtype == "bfloat16" else 0


def op_flops(op) -> float:
    """An op's flops (OpDef.flops: a matrix product's, element-ops for any other op), its
    rule given the op's operand Values (their shape and dtype, and their producers: a
    power's rule reads a constant exponent) and its result; 0 where it has no rule."""
    f = op.opdef.flops
    if f is None or not op.results:
        return 0.0
    return float(f(op.operands, op.results[0], op.attrs))


def graph_flops(graph) -> int:
    """The flops of a run of `graph`'s ops (op_flops), each sub-graph as its op's rule says."""
    return int(sum(op_flops(op) for op in graph.ops))


def splat(v, depth=4):
    """The one value every element of v has, if v is a constant (or a broadcast, reshape,
    slice... of one) whose elements are all equal, or an elementwise op of such values (an exponent's
    `y - 1` in a VJP); else None."""
    op = v.producer
    # broadcasts, reshapes... (not a pad or concatenation: their other operands count too)
    while op is not None and op.opdef.fusion == "reindex" and op.operands and op.opdef.reindex.index_pieces is None:
        op = op.operands[0].producer
    if op is not None and op.name != "constant" and depth > 0 and op.operands and len(op.results) == 1 \
            and op.opdef.family == "elementwise" and not op.opdef.needs_comm:
        cs = []
        for o in op.operands:
            c = splat(o, depth - 1)
            if c is None:
                return None
            cs.append(c)
        try:
            with np.errstate(all="ignore"):
                r = np.asarray(op.opdef.ref(*[np.asarray(c) for c in cs], **op.attrs))
        except Exception:      # noqa: BLE001 - then it is simply not a splat
            return None
        if r.size != 1:
            return None
        return r.reshape(-1)[0].astype(op.results[0].dtype)
    if op is None or op.name != "constant":
        return None
    c = op.attrs["value"]
    if c.size == 0:
        return c.dtype.type(0)          # no elements: any value will do
    first = c.reshape(-1)[0]
    if c.size == 1 or (np.all(c == first) and not (c.dtype.kind == "f" and np.isnan(first))
                       and not (c.dtype.kind == "f" and first == 0 and np.any(np.signbit(c) != np.signbit(first)))):
        return first                    # (zeros of both signs are not one value: -0.0 + 0.0 is 0.0)
    return None


def is_const(v, c) -> bool:
    """Is every element of Value v the constant c? (Simplification rules ask this.)"""
    s = splat(v)
    if s is None:
        return False
    with np.errstate(all="ignore"):
        return bool(s == c)


def producer_is(v, name):
    return v.producer is not None and v.producer.name == name
