"""Layering of the runtime (issues #12, #16): runtime/ and collectives/ never import
launcher/ (imports point down: ir <- compiler <- sharding <- runtime/collectives <-
launcher); runtimes use tools/timeline only through its public functions; checkpoints
reach MPI only through the Runtime contract."""
import ast
import os

import pytest

PKG = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "spmd")


def _modules(sub):
    d = os.path.join(PKG, sub)
    return [os.path.join(d, f) for f in sorted(os.listdir(d)) if f.endswith(".py")]


def _imports(path):
    """Absolute dotted names this module imports (relative imports resolved)."""
    rel = os.path.relpath(path, os.path.dirname(PKG))[:-3].split(os.sep)
    pkg = rel[:-1]
    out = []
    for node in ast.walk(ast.parse(open(path).read())):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = pkg[:len(pkg) - node.level + 1] if node.level else []
            mod = ".".join(base + ([node.module] if node.module else []))
            out += [mod] + [f"{mod}.{a.name}" for a in node.names]
    return out


@pytest.mark.parametrize("path", _modules("runtime") + _modules("collectives"), ids=os.path.basename)
def test_runtime_and_collectives_do_not_import_the_launcher(path):
    bad = [m for m in _imports(path) if m == "spmd.launcher" or m.startswith("spmd.launcher.")]
    assert not bad, bad


@pytest.mark.parametrize("path", _modules("runtime") + _modules("collectives"), ids=os.path.basename)
def test_no_private_timeline_names(path):
    tree = ast.parse(open(path).read())
    bad = [n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
           and n.value.id == "timeline" and n.attr.startswith("_")]
    assert not bad, bad


def test_checkpoint_talks_to_mpi_only_through_the_runtime():
    for name in ("checkpoint.py", "checkpoint_index.py"):
        assert not [m for m in _imports(os.path.join(PKG, "runtime", name)) if m.startswith("mpi4py")]
