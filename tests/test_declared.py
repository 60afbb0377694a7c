"""What passes between the parts is declared (issue #32): graph metadata is read as the
Graph's fields, never by getattr with a default that hides a missing or misspelled one;
below spmd.jit (and the user API and eager mode that call it) no module is handed a
Lowered or a Jitted, nor writes `_spmd_...` attributes onto objects it is given (the
runtime takes a declared Program, sharding/ plain values)."""
import ast
import pathlib

import spmd
from spmd.ir import Graph

ROOT = pathlib.Path(spmd.__file__).parent
# the Graph's own fields whose names other objects carry too (an Op has a loc, a
# Sharding a mesh): a getattr of those is not taken for graph metadata
SHARED_NAMES = {"name", "loc", "mesh"}
# where a Lowered or Jitted may be held: the jit package, the user API and eager mode
ABOVE_JIT = {"jit", "api.py", "eager", "__init__.py"}
HANDLE_NAMES = {"lowered", "jitted", "jit_fn"}


def _files(root):
    return sorted(root.rglob("*.py"))


def getattr_on_graph_metadata(root=None):
    """`getattr(x, "<a Graph field>", default)` anywhere in spmd."""
    root = root or ROOT
    fields = set(vars(Graph())) - SHARED_NAMES
    found = []
    for path in _files(root):
        rel = path.relative_to(root.parent).as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr" \
                    and len(node.args) == 3 and isinstance(node.args[1], ast.Constant) \
                    and node.args[1].value in fields:
                found.append(f"{rel}:{node.lineno} getattr(..., {node.args[1].value!r}, default)")
    return found


def lowered_or_jitted_below_jit(root=None):
    """Below the jit package: a parameter or variable named for a Lowered or Jitted, or
    an `_spmd_...` attribute set or read (state stored on another module's object)."""
    root = root or ROOT
    found = []
    for path in _files(root):
        rel_in = path.relative_to(root).as_posix()
        if rel_in.split("/")[0] in ABOVE_JIT:
            continue
        rel = path.relative_to(root.parent).as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.arg) and node.arg in HANDLE_NAMES:
                found.append(f"{rel}:{node.lineno} takes {node.arg}")
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and node.id in HANDLE_NAMES:
                found.append(f"{rel}:{node.lineno} holds {node.id}")
            elif isinstance(node, ast.Attribute) and node.attr.startswith("_spmd_") \
                    and not rel_in.startswith("frontend/random_guard.py"):
                found.append(f"{rel}:{node.lineno} uses .{node.attr}")
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                    and node.func.id in ("getattr", "setattr") and len(node.args) >= 2 \
                    and isinstance(node.args[1], ast.Constant) and str(node.args[1].value).startswith("_spmd_") \
                    and not rel_in.startswith("frontend/random_guard.py"):
                found.append(f"{rel}:{node.lineno} {node.func.id}(..., {node.args[1].value!r})")
    return found


def test_no_getattr_with_a_default_on_graph_metadata():
    found = getattr_on_graph_metadata()
    assert not found, "graph metadata is the Graph's declared fields: read them as fields\n" + "\n".join(found)


def test_nothing_below_jit_holds_a_lowered_or_a_jitted():
    found = lowered_or_jitted_below_jit()
    assert not found, ("the runtime takes a declared Program and sharding/ plain values, not jit's "
                       "objects:\n" + "\n".join(found))


def test_the_checks_see_each_form(tmp_path):
    fake = tmp_path / "spmd"
    (fake / "runtime").mkdir(parents=True)
    (fake / "jit").mkdir()
    (fake / "runtime" / "bad.py").write_text(
        "def run(lowered, g):\n"
        "    why = getattr(g, 'why', {})\n"
        "    lowered._spmd_layout = 1\n"
        "    jitted = setattr(g, '_spmd_seen', True)\n"
        "    return getattr(g, 'name', 'main'), getattr(g, 'updates')\n")
    (fake / "jit" / "ok.py").write_text("def compile(lowered):\n    lowered._spmd_x = getattr(lowered, 'x', 0)\n")
    assert getattr_on_graph_metadata(fake) == ["spmd/runtime/bad.py:2 getattr(..., 'why', default)"]
    assert sorted(lowered_or_jitted_below_jit(fake)) == sorted([
        "spmd/runtime/bad.py:1 takes lowered",
        "spmd/runtime/bad.py:3 uses ._spmd_layout",
        "spmd/runtime/bad.py:4 holds jitted",
        "spmd/runtime/bad.py:4 setattr(..., '_spmd_seen')",
    ])
