"""Each backend's lowering table against the registry: the numpy backend lowers every op by
its numpy reference; the LLVM backend's table (backends/llvm/lowering_table.py) has a row for
every op, each row lowers its ops natively or says why they run through numpy, and the
fused rows are the ops fusion treats as kernel members."""
from spmd.backends.llvm.emitters import emit_elementwise
from spmd.backends.llvm.lowering_table import LOWERINGS, fusible, lowering_of
from spmd.backends.llvm.steps import run_reference
from spmd.ir import REGISTRY, Graph
from spmd.ir.ops.names import ADD, DIVIDE


def test_the_numpy_backend_lowers_every_op_by_its_reference():
    assert all(callable(op.ref) for op in REGISTRY.values())


def test_every_op_names_a_row_and_every_row_is_used():
    missing = sorted(f"{n} (lowering={op.lowering!r})" for n, op in REGISTRY.items() if op.lowering not in LOWERINGS)
    assert not missing, f"ops with no row in the LLVM lowering table: {missing}"
    unused = set(LOWERINGS) - {op.lowering for op in REGISTRY.values()}
    assert not unused, f"rows no op names: {unused}"


def test_each_row_is_native_or_says_why_not():
    for kind, row in LOWERINGS.items():
        native = row.emit is not None or row.native is not None
        assert native != bool(row.numpy), f"{kind}: native={native}, numpy reason={row.numpy!r}"
        assert row.numpy is None or (isinstance(row.numpy, str) and row.numpy.strip()), kind
        # a step's own way to run from Python, or what it prepares, is for native rows, or
        # for loops whose bodies are compiled (the row calls their executables itself)
        loops = all(op.subgraphs for op in REGISTRY.values() if op.lowering == kind)
        assert native or loops or (row.run is run_reference and row.prepare is None and not row.writes_into), kind


def test_fused_rows_are_the_fusion_classes():
    """fuse.py groups ops by OpDef.fusion; the code generator computes them by their row's
    `emit`: the two must agree, and only ops the code generator computes can claim to
    compute complex values natively."""
    for name, op in REGISTRY.items():
        row = LOWERINGS[op.lowering]
        assert (row.emit is not None) == (op.fusion is not None), name
        assert (row.emit is emit_elementwise) == (op.fusion == "elementwise"), name
        assert not op.lowers_complex or row.emit is not None, name


def test_complex_values_fuse_only_where_lowered():
    """add lowers complex values natively, divide does not (numpy's scaled algorithm):
    the complex divide runs through its reference, the float one is fused."""
    g = Graph("c")
    x, y = g.add_input((3,), "complex64"), g.add_input((3,), "complex64")
    a, b = g.add_input((3,), "float32"), g.add_input((3,), "float32")
    ops = [g.emit(ADD, x, y).producer, g.emit(DIVIDE, x, y).producer, g.emit(DIVIDE, a, b).producer]
    assert [fusible(op) for op in ops] == [True, False, True]
    assert lowering_of(ops[1]) is LOWERINGS["elementwise"]
