"""Ops are named by the constants of spmd/ir/ops/names.py, never by string literals: a
misspelled constant fails when its module is imported, where a misspelled string failed only
when its line ran. And OpDef takes only the name positionally: its rules are keywords."""
import ast
import functools
import pathlib

import pytest

import spmd
from spmd.ir import REGISTRY
from spmd.ir.ops import names
from spmd.ir.ops.registry import names_mismatch

# Op-building calls: the callee (its last dotted part, or its whole dotted text) -> the
# argument positions that may hold an op's name. Registration (OpDef and the families'
# helpers unary, binary, _linalg, _leaf, _part) defines a name and keeps its literal.
BUILDERS = {
    "emit": (0, 1),          # Graph / trace / builders' .emit(name, ...); frontend core.emit(t, name, ...)
    "E": (1,),               # ir/ops/elementwise.py: E(g, name, ...)
    "producer_is": (1,),
    "Op": (0,),
    "core.binary": (0,),
    "_op": (0,),             # frontend/numpy_lib/linalg.py
    "_unary_float": (0,),    # frontend/elementwise.py: factories of op-building functions
    "_logical": (0,),
    "_bitwise": (0,),
    "_shift": (0,),
}
# keywords whose value names other ops (a collective's halves)
NAMING_KEYWORDS = ("async_pair", "async_of")
EXEMPT = ("ir/ops/registry.py", "ir/ops/names.py")


def callee(func) -> str:
    """A call's callee as written: its dotted name (read off the tree: ast.unparse of
    every call in the project is most of this module's time), else its source text."""
    parts = []
    while isinstance(func, ast.Attribute):
        parts.append(func.attr)
        func = func.value
    if isinstance(func, ast.Name):
        return ".".join([func.id] + parts[::-1])
    return ast.unparse(func) + "".join("." + p for p in parts[::-1])


def positions(func):
    text = callee(func)
    if text in BUILDERS:
        return BUILDERS[text]
    last = text.rsplit(".", 1)[-1]
    if last in ("emit", "producer_is") or (last in BUILDERS and "." not in text):
        return BUILDERS[last]
    return ()


def is_opdef(call):
    return callee(call.func).rsplit(".", 1)[-1] == "OpDef"


def literal_op_names(tree, ops):
    """(line, form) for each op built, or named in an OpDef, by a string literal."""
    def literal(node):
        return isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in ops

    tables = {}                  # module-level T = {...} / (...): the values an emit(T[k]) takes
    for n in tree.body:
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name):
            v = n.value
            tables[n.targets[0].id] = (n.lineno, v.values if isinstance(v, ast.Dict) else
                                       v.elts if isinstance(v, (ast.Tuple, ast.List)) else [])
    found = []
    for n in ast.walk(tree):
        if not isinstance(n, ast.Call):
            continue
        for i in positions(n.func):
            if i < len(n.args) and literal(n.args[i]):
                found.append((n.lineno, f"{ast.unparse(n.func)}({n.args[i].value!r})"))
            elif i < len(n.args) and isinstance(n.args[i], ast.Subscript) and isinstance(n.args[i].value, ast.Name):
                line, values = tables.get(n.args[i].value.id, (0, []))
                found += [(line, f"{n.args[i].value.id} = {{... {v.value!r}}} read by {ast.unparse(n.func)}")
                          for v in values if literal(v)]
        if is_opdef(n) or callee(n.func).rsplit(".", 1)[-1] == "Collective":
            for k in n.keywords:
                if k.arg in NAMING_KEYWORDS:
                    found += [(n.lineno, f"{k.arg}={s.value!r}") for s in ast.walk(k.value) if literal(s)]
    return found


def positional_opdef_args(tree):
    return [(n.lineno, f"OpDef with {len(n.args)} positional arguments") for n in ast.walk(tree)
            if isinstance(n, ast.Call) and is_opdef(n) and len(n.args) > 1]


@functools.lru_cache(maxsize=None)
def parsed(path):
    return ast.parse(path.read_text())


def scan(root, check):
    out = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel.endswith(EXEMPT):
            continue
        out += [f"{root.name}/{rel}:{line}: {what}" for line, what in check(parsed(path))]
    return out


SPMD = pathlib.Path(spmd.__file__).parent
TESTS = pathlib.Path(__file__).parent.parent


def test_no_op_is_built_from_a_string_literal():
    found = scan(SPMD, lambda t: literal_op_names(t, set(REGISTRY))) + \
        scan(TESTS, lambda t: literal_op_names(t, set(REGISTRY)))
    assert not found, "ops built from string literals (use spmd/ir/ops/names.py):\n" + "\n".join(found)


def test_no_opdef_call_passes_a_rule_positionally():
    found = scan(SPMD, positional_opdef_args) + scan(TESTS, positional_opdef_args)
    assert not found, "\n".join(found)


PLANTED = '''
from spmd.ir.ops.names import ADD

COMBINE = {"sum": "add", "max": "maximum"}
KINDS = {"sum": "add"}


def build(g, t, core, x, rb):
    g.emit("add", x, x)
    t.graph.emit("negate", x)
    core.emit(t, "exp", x)
    rb.emit(ADD, x, x)
    E(g, "real", x)
    producer_is(x, "constant")
    core.binary("multiply", x, x)
    core.normalize_axis(x, 0, "sum")
    check_dim("reduce", x)
    g.emit(name, x)
    g.emit(COMBINE[kind], x, x)
    np_name = KINDS[kind]
    register(OpDef("newop", family="f", infer=f, ref=f, collective=Collective(async_of="all_reduce")))
    register(OpDef("other", "f", f, f))
'''


def test_the_guards_see_each_form(tmp_path):
    """On a planted module: the literal op names passed to op-building calls (Graph and
    builders' emit, core.emit, E, producer_is, core.binary), in a table such a call reads
    and in naming keywords are found, and nothing else (a constant, a variable, numpy's names in messages, the defining name
    of an OpDef); an OpDef with its rules passed positionally is found."""
    (tmp_path / "planted.py").write_text(PLANTED)
    ops = set(REGISTRY)
    found = scan(tmp_path, lambda t: literal_op_names(t, ops))
    assert sorted(f.split(": ", 1)[1] for f in found) == sorted([
        "g.emit('add')", "t.graph.emit('negate')", "core.emit('exp')", "E('real')", "producer_is('constant')",
        "core.binary('multiply')", "async_of='all_reduce'", "COMBINE = {... 'add'} read by g.emit",
        "COMBINE = {... 'maximum'} read by g.emit"]), found
    assert [f.split(": ", 1)[1] for f in scan(tmp_path, positional_opdef_args)] == [
        "OpDef with 4 positional arguments"]


def test_names_are_the_registry():
    assert names.ALL == frozenset(REGISTRY)
    for name in REGISTRY:
        assert getattr(names, name.upper()) == name


def test_a_stale_names_module_is_named():
    """The import-time check (spmd/ir/ops/__init__.py) names what is missing and what is left."""
    msg = names_mismatch((names.ALL - {"add"}) | {"addd"})
    assert msg is not None and "['add']" in msg and "['addd']" in msg
    assert names_mismatch(names.ALL) is None


def test_a_misspelled_name_fails_at_import():
    with pytest.raises(ImportError, match="ADDD"):
        exec("from spmd.ir.ops.names import ADDD", {})
