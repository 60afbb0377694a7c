"""Every registry op, on every sample of the OpInfo table, run by the numpy backend and
compared with the table's own numpy expression; plus the registry's completeness and the
errors bad operands get."""
import ast
import pathlib

import numpy as np
import pytest

import spmd
from opinfo import TABLE, expected, is_per_device, samples, seed_of, ops_to_test, tolerance
from spmd.backends.numpy_backend import compile_numpy
from spmd.ir import REGISTRY, Graph
from spmd.ir.dtypes import FLOATS
from spmd.ir.ops.names import CONSTANT, RESHAPE


def run_op(name, operands, attrs):
    """Build a one-op Graph with graph.emit and run it: (result Value, result array)."""
    g = Graph(name)
    ins = [g.add_input(x.shape, x.dtype) for x in operands]
    out = g.emit(name, *ins, **attrs)
    g.outputs = [out]
    (res,) = compile_numpy(g)([np.asarray(x) for x in operands])
    return out, res


def describe(operands, attrs):
    ops = ", ".join(f"{x.dtype}{list(x.shape)}" for x in operands)
    at = {k: (f"array{list(v.shape)}" if isinstance(v, np.ndarray) else v) for k, v in attrs.items()}
    return f"operands ({ops}) attrs {at}"


def assert_matches(got, want, what):
    assert got.shape == want.shape, f"{what}: shape {got.shape} != expected {want.shape}"
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != expected {want.dtype}"
    rtol, atol = tolerance(got.dtype)
    if rtol == 0:
        assert np.array_equal(got, want), f"{what}:\n got {got}\nwant {want}"
    else:
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, equal_nan=True, err_msg=what)


# ----------------------------------------------------------------------- the registry
def test_registry_has_every_rule():
    missing = []
    for name, op in REGISTRY.items():
        for rule in ("infer", "ref", "factors"):
            # collectives exist only in per-device programs: no sharding factor rule
            if not callable(getattr(op, rule)) and not (rule == "factors" and is_per_device(name)):
                missing.append(f"{name}.{rule}")
        if is_per_device(name):
            continue
        if name not in TABLE:
            missing.append(f"{name}: no OpInfo table entry")
            continue
        takes_floats = any(d in FLOATS for d in op.dtypes)
        if takes_floats and TABLE[name].nondiff is None and op.vjp is None:
            missing.append(f"{name}.vjp")
        assert op.dtypes and all(d in spmd.ir.dtypes.DTYPES for d in op.dtypes), name
    stale = [n for n in TABLE if n not in REGISTRY]
    assert not missing, f"ops missing rules: {missing}"
    assert not stale, f"table entries for ops that do not exist: {stale}"


@pytest.mark.parametrize("name", ops_to_test())
def test_registry_rules_are_well_formed(name):
    """Every OpDef field holds a rule of the right form, checked on every OpInfo sample:
    linearity names real operands, a reduction kind is one the partitioner can settle,
    fusion classes have what the code generator needs."""
    op = REGISTRY[name]
    assert op.priority in (0, 1, 2, 3), op.priority
    assert op.split_replicate in (None, "partial", "local")
    assert op.fusion in (None, "elementwise", "reindex", "reduction")
    if op.fusion == "elementwise":
        assert op.scalar is not None and op.priority == 0, "elementwise ops lower a scalar and pass shardings through"
    assert op.reindex.index_map is None or op.fusion == "reindex", "only re-indexing ops have an index map"
    for what, rule in (("simplify", op.simplify), ("index_map", op.reindex.index_map)):
        assert rule is None or callable(rule), what
    assert callable(op.flops) and callable(op.reduction_kind)
    rng = np.random.default_rng(0)
    for operands, attrs in samples(name, rng)[:8]:
        out, _ = run_op(name, operands, attrs)
        o = out.producer
        sets = op.linear(o) if callable(op.linear) else op.linear
        for s in sets:
            assert s and all(0 <= i < len(operands) for i in s), f"linear set {s} of {len(operands)} operands"
        kind = op.reduction_kind(o.attrs)
        assert kind in (None, "sum", "max", "min", "prod"), kind
        if op.accumulates_into is not None:
            assert 0 <= op.accumulates_into < len(operands) and kind == "sum"
        assert op.flops([v.aval for v in o.operands], out.aval, o.attrs) >= 0


# ----------------------------------------------------------------------- no op-name tables
# Per-op facts live on the OpDef (and a backend's lowering table rows): outside the
# registry, the numpy-API table and the partition rules (sharding/partition_rules/, tables
# keyed by op name that tests/sharding/test_partition_rules.py checks against the
# registry), no module compares an op's name with a literal or keeps a table of op names
# to look one up in. The IR's structure may be named: constants
# are literals, broadcasts of them splats, and sharding_constraint is how annotations
# enter the graph; slice and pad are the windows a pass reads by their own attributes
# (start, stride, low, interior: an element read, a window written back in place). (Strings
# that merely spell like an op -- numpy's method names, a plan's step kinds -- are not an
# op's name and are not dispatch.)
STRUCTURE = {"constant", "broadcast_in_dim", "sharding_constraint", "slice", "pad"}
EXEMPT = ("ir/ops/", "frontend/numpy_api.py", "frontend/numpy_lib/", "sharding/partition_rules/")
COMPARE = (ast.Eq, ast.NotEq, ast.In, ast.NotIn)


def op_name_uses(tree, names):
    """(line, form, names) for each dispatch on an op's name in a parsed module. An op's
    name is `<anything>.name` (op.name, v.producer.name), or a variable bound to one in
    the same function. Dispatch is: comparing it (==, !=, in, not in) with an op-name
    literal, alone or in a tuple / list / set, or with a table of them (a module- or
    function-level tuple, list, set or dict of op-name literals); looking it up in such a
    table (`T[op.name]`, `T.get(op.name)`); and a match on it with op-name cases."""
    constants = {n.upper(): n for n in names}

    def op_name(node):
        """The op a literal or a constant of names.py (ADD, names.ADD) names, or None."""
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names:
            return node.value
        if isinstance(node, ast.Name) and node.id in constants:
            return constants[node.id]
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.attr in constants \
                and node.value.id in ("names", "opnames"):
            return constants[node.attr]
        return None

    def literal(node):
        return op_name(node) is not None

    def listed(node):
        if isinstance(node, ast.Dict):
            return [op_name(k) for k in node.keys if k is not None and literal(k)]
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return [op_name(e) for e in node.elts if literal(e)]
        return []

    tables = {}                          # name -> (line, op names) of literal containers
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and listed(node.value):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    tables[t.id] = (node.lineno, listed(node.value))

    def scopes():
        yield tree
        yield from (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    def names_of(scope):
        """Variables bound to an op's name in this scope (`name = op.name`)."""
        bound = set()
        for n in ast.walk(scope):
            if isinstance(n, ast.Assign) and is_name(n.value, set()):
                bound |= {t.id for t in n.targets if isinstance(t, ast.Name)}
        return bound

    def is_name(node, bound):
        return (isinstance(node, ast.Attribute) and node.attr == "name") or \
            (isinstance(node, ast.Name) and node.id in bound)

    def hit(node):
        if literal(node):
            return [op_name(node)]
        if listed(node):
            return listed(node)
        if isinstance(node, ast.Name) and node.id in tables:
            return tables[node.id][1]
        return []

    found = set()
    for scope in scopes():
        bound = names_of(scope)
        for node in ast.walk(scope):
            if isinstance(node, ast.Compare) and any(isinstance(o, COMPARE) for o in node.ops):
                sides = [node.left, *node.comparators]
                if any(is_name(s, bound) for s in sides):
                    for s in sides:
                        if hit(s):
                            found.add((node.lineno, "comparison", tuple(hit(s))))
            elif isinstance(node, ast.Subscript) and is_name(node.slice, bound) and hit(node.value):
                found.add((node.lineno, "lookup", tuple(hit(node.value))))
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" \
                    and node.args and is_name(node.args[0], bound) and hit(node.func.value):
                found.add((node.lineno, "lookup", tuple(hit(node.func.value))))
            elif isinstance(node, ast.Match) and is_name(node.subject, bound):
                for case in node.cases:
                    if isinstance(case.pattern, ast.MatchValue) and literal(case.pattern.value):
                        found.add((case.pattern.lineno, "match case", (op_name(case.pattern.value),)))
    return sorted((line, form, list(h)) for line, form, h in found)


def op_name_tables(root):
    names = set(REGISTRY) - STRUCTURE
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith(EXEMPT):
            continue
        for line, form, hit in op_name_uses(ast.parse(path.read_text()), names):
            found.append(f"{root.name}/{rel}:{line}: {form} of {', '.join(hit)}")
    return found


def test_no_module_dispatches_on_op_names():
    found = op_name_tables(pathlib.Path(spmd.__file__).parent)
    assert not found, "op names used as dispatch outside the registry:\n" + "\n".join(found)


PLANTED = """
import numpy as np
COMPLEX_LOWERED = ("add", "subtract")
NATIVE = {"exp", "log"}
WHY = {"all_reduce": "sums", "broadcast_in_dim": "fine"}
METHODS = ("sort", "reshape")
__all__ = ["cond", "scan"]


def lower(op, g, t, method):
    if op.name == "dot_general":
        pass
    if op.name == DOT_GENERAL or op.name in (names.TANH,):
        pass
    if "reduce" != op.name:
        pass
    if op.name in ("tanh", "sqrt"):
        pass
    if op.name not in ["sort"]:
        pass
    if v.producer.name in {"iota"}:
        pass
    match op.name:
        case "fft":
            pass
    if op.name in COMPLEX_LOWERED or op.name in NATIVE:
        pass
    why = WHY[op.name] + WHY.get(op.name)
    name = op.opdef.name
    if name == "gather":
        pass
    if op.name == "constant" or op.name in ("broadcast_in_dim", "sharding_constraint"):
        pass
    if method == "reduce" or method in METHODS:
        pass
    g.emit("add", t)
    t.emit("multiply", t, t)
    _emit(t, "negate", t)
    key = ("slice", op.start, op.stop)
    return np.add, key
"""


def test_the_guard_sees_each_form(tmp_path):
    """The guard itself, on a planted module: it reports every form of dispatch on an op's
    name (comparisons with a literal or a constant of names.py alone or in a tuple, list or set, or with a table of
    names; lookups in a table; match cases; through a variable bound to the name), and
    nothing for IR-structure names, calls that build IR, records that merely start with a
    name, strings compared with something that is not an op's name, or __all__."""
    (tmp_path / "bad.py").write_text(PLANTED)
    (tmp_path / "ir" / "ops").mkdir(parents=True)
    (tmp_path / "ir" / "ops" / "exempt.py").write_text('T = ("add", "exp")\nif op.name in T:\n    pass\n')
    found = [f.split("/", 1)[1] for f in op_name_tables(tmp_path)]
    assert found == [
        "bad.py:11: comparison of dot_general",
        "bad.py:13: comparison of dot_general",
        "bad.py:13: comparison of tanh",
        "bad.py:15: comparison of reduce",
        "bad.py:17: comparison of tanh, sqrt",
        "bad.py:19: comparison of sort",
        "bad.py:21: comparison of iota",
        "bad.py:24: match case of fft",
        "bad.py:26: comparison of add, subtract",
        "bad.py:26: comparison of exp, log",
        "bad.py:28: lookup of all_reduce",
        "bad.py:30: comparison of gather",
    ], found


@pytest.mark.parametrize("name", ops_to_test())
def test_table_covers_edge_shapes(name):
    """Each op is tried on empty and size-1 dims, on 0-d values, and on every dtype it takes."""
    rng = np.random.default_rng(0)
    shapes, dts = [], set()
    for operands, attrs in samples(name, rng):
        out = expected(name, operands, attrs)
        shapes += [x.shape for x in operands] + [out.shape]
        dts |= {np.asarray(x).dtype.name for x in operands} | {out.dtype.name}
    assert any(0 in s for s in shapes), f"{name}: no sample with an empty dim"
    assert any(1 in s for s in shapes), f"{name}: no sample with a size-1 dim"
    # these cannot make a 0-d value (matrices, sorted, scanned, rolled and transformed axes are at least 1-d)
    if name not in ("concatenate", "iota", "cumulative", "inv", "solve", "slogdet", "cholesky", "eig", "eigh", "svd",
                    "qr", "sort", "argsort", "order_statistic", "fft", "roll"):
        assert any(s == () for s in shapes), f"{name}: no 0-d sample"
    assert set(REGISTRY[name].dtypes) <= dts, f"{name}: dtypes not sampled: {set(REGISTRY[name].dtypes) - dts}"


# ----------------------------------------------------------------------- op semantics
@pytest.mark.parametrize("name", ops_to_test())
def test_op_matches_numpy(name):
    rng = np.random.default_rng(seed_of(name))
    ss = samples(name, rng)
    assert ss, name
    opdef = REGISTRY[name]
    for operands, attrs in ss:
        what = f"{name}: {describe(operands, attrs)}"
        value, got = run_op(name, operands, attrs)
        want = expected(name, operands, attrs)
        # inference agrees with what the op computes, by its reference and through the backend
        assert (value.shape, value.dtype) == (got.shape, got.dtype.name), what
        raw = np.asarray(opdef.ref(*operands, **attrs))
        assert (raw.shape, raw.dtype.name) == (value.shape, value.dtype), f"{what}: ref gives {raw.dtype}{raw.shape}"
        assert_matches(got, want, what)


def test_backend_outputs_do_not_alias():
    """Outputs are fresh arrays: not the caller's input, not a constant the graph keeps."""
    g = Graph()
    x = g.add_input((3,), "float64")
    c = g.emit(CONSTANT, value=np.arange(3.0))
    g.outputs = [x, c, g.emit(RESHAPE, x, shape=(3, 1))]
    exe = compile_numpy(g)
    a = np.ones(3)
    r1 = exe([a])
    for r in r1:
        r[...] = 7
    assert np.array_equal(a, np.ones(3))
    r2 = exe([a])
    assert np.array_equal(r2[1], np.arange(3.0)) and np.array_equal(r2[0], np.ones(3))


def test_backend_checks_ref_against_inference():
    """A ref that disagrees with its op's inferred type is caught, not silently cast."""
    from spmd.ir.ops.registry import OpDef, REGISTRY as R
    bad = OpDef("test_bad_ref", family="test", infer=lambda x: x, ref=lambda x: x.astype(np.int32),
                dtypes=("float32",))
    R[bad.name] = bad
    try:
        g = Graph()
        x = g.add_input((2,), "float32")
        g.outputs = [g.emit("test_bad_ref", x)]
        with pytest.raises(spmd.SpmdError, match="test_bad_ref"):
            compile_numpy(g)([np.ones(2, np.float32)])
    finally:
        del R[bad.name]


# ----------------------------------------------------------------------- bad input
F32, F64, I32, B = "float32", "float64", "int32", "bool"
BAD = [
    ("add", [((2, 3), F32), ((3, 2), F32)], {}),
    ("add", [((2,), F32), ((2,), F64)], {}),
    ("add", [((2,), B), ((2,), B)], {}),
    ("exp", [((2,), I32)], {}),
    ("select", [((2,), F32), ((2,), F32), ((2,), F32)], {}),
    ("select", [((2,), B), ((3,), F32), ((3,), F32)], {}),
    ("compare", [((2,), F32), ((2,), F32)], {"direction": "XX"}),
    ("broadcast_in_dim", [((3,), F32)], {"shape": (2, 4), "broadcast_dimensions": (1,)}),
    ("broadcast_in_dim", [((3,), F32)], {"shape": (3, 3), "broadcast_dimensions": (0, 1)}),
    ("reshape", [((2, 3), F32)], {"shape": (4, 2)}),
    ("transpose", [((2, 3), F32)], {"permutation": (0, 0)}),
    ("slice", [((4,), F32)], {"start": (1,), "limit": (5,), "stride": (1,)}),
    ("slice", [((4,), F32)], {"start": (3,), "limit": (1,), "stride": (1,)}),
    ("pad", [((4,), F32), ((), F64)], {"low": (1,), "high": (1,), "interior": (0,)}),
    ("concatenate", [((2, 3), F32), ((2, 4), F32)], {"dimension": 0}),
    ("concatenate", [((2, 3), F32)], {"dimension": 2}),
    ("reduce", [((2, 3), F32)], {"kind": "sum", "axes": (2,)}),
    ("reduce", [((2, 3), F32)], {"kind": "mean", "axes": (0,)}),
    ("reduce", [((2, 3), B)], {"kind": "sum", "axes": (0,)}),
    ("dot_general", [((2, 3), F32), ((4, 5), F32)], {"lhs_batch": (), "rhs_batch": (), "lhs_contract": (1,),
                                                      "rhs_contract": (0,)}),
    ("dot_general", [((2, 3), F32), ((3, 5), F64)], {"lhs_batch": (), "rhs_batch": (), "lhs_contract": (1,),
                                                      "rhs_contract": (0,)}),
    ("dynamic_slice", [((4,), F32), ((), F32)], {"slice_sizes": (2,)}),
    ("dynamic_slice", [((4,), F32), ((), I32)], {"slice_sizes": (5,)}),
    ("gather", [((4,), F32), ((2,), F32)], {"axis": 0}),
    ("scatter", [((4,), F32), ((2,), I32), ((3,), F32)], {"axis": 0}),
    ("iota", [], {"shape": (3,), "dtype": "float32", "dimension": 1}),
    ("reduce", [((2, 3), F32)], {"kind": "sum"}),                      # a missing attribute
]


@pytest.mark.parametrize("name,avals,attrs", BAD, ids=[f"{b[0]}-{i}" for i, b in enumerate(BAD)])
def test_bad_operands_raise_shape_error(name, avals, attrs):
    g = Graph()
    ins = [g.add_input(s, d) for s, d in avals]
    with pytest.raises(spmd.ShapeError) as e:
        g.emit(name, *ins, loc="user_model.py:42", **attrs)
    msg = str(e.value)
    assert name in msg and "user_model.py:42" in msg, msg
    for s, _ in avals:
        assert str(list(s)) in msg, msg


# each program on one line, so the error must name exactly that line
BAD_PROGRAMS = {
    "add": (lambda a, b: a + b, "add", True),
    "matmul": (lambda a, b: a @ b, "matmul", True),
    "concatenate": (lambda a, b: np.concatenate([a, b], 1), "concatenate", True),
    "einsum": (lambda a, b: np.einsum("ij,jk->ik", a, b), "einsum", True),
    "where": (lambda a, b: np.where(a > 0, a, b), "where", True),
    "stack": (lambda a, b: np.stack([a, b]), "stack", True),
    "broadcast_to": (lambda a, b: np.broadcast_to(a, b.shape), "broadcast_to", True),
    "dot": (lambda a, b: np.dot(a, b), "dot", True),
    "reshape": (lambda a, b: a.reshape(b.shape), "reshape", True),
    "maximum": (lambda a, b: np.maximum(a, b), "maximum", True),
    "compare": (lambda a, b: a < b, "compare", True),
    "sum": (lambda a, b: a.sum(axis=2), "sum", False),
    "mean": (lambda a, b: np.mean(b, axis=(0, 0)), "mean", False),
    "transpose": (lambda a, b: np.transpose(a, (0, 2)), "transpose", False),
    "max_empty": (lambda a, b: a[:0].max(), "max", False),
}


@pytest.mark.parametrize("case", sorted(BAD_PROGRAMS))
def test_traced_shape_errors_name_op_shapes_and_line(case):
    fn, op, both_shapes = BAD_PROGRAMS[case]
    a, b = np.ones((2, 3), np.float32), np.ones((4, 5), np.float32)
    with pytest.raises(spmd.ShapeError) as e:
        spmd.jit(fn)(a, b)
    msg = str(e.value)
    assert op in msg, msg
    assert f"test_ops.py:{fn.__code__.co_firstlineno}" in msg, msg
    if both_shapes:
        assert "[2, 3]" in msg and "[4, 5]" in msg, msg
