"""Imports point one way, down the path of a program (docs/design.md, Layers): a module may
import its own layer and the layers below it, never one above. Every import counts,
including the ones inside functions (a lazy import is still a dependency)."""
import ast
import pathlib

import spmd

ROOT = pathlib.Path(spmd.__file__).parent

# low to high; a module belongs to the layer of its longest matching prefix
LAYERS = (
    # utilities every layer may use; they import no other part of spmd
    ("base", ("spmd.errors", "spmd.tree", "spmd.tools.timeline")),
    ("ir", ("spmd.ir",)),                      # Graph, ops, Mesh, Sharding
    ("frontend", ("spmd.frontend",)),          # numpy in: tracing, the API table, writes, autodiff
    ("sharding", ("spmd.sharding",)),          # propagation, partitioning, resharding
    ("compiler", ("spmd.compiler",)),          # the pipeline, passes, program caches
    ("backends", ("spmd.backends",)),          # executor, numpy, llvm
    ("runtime", ("spmd.runtime", "spmd.collectives", "spmd.tools")),
    ("launcher", ("spmd.launcher",)),
    ("api", ("spmd.api", "spmd.eager", "spmd")),   # the user API and eager mode, above them all
)


def layer_of(module):
    best, best_len = None, -1
    for i, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and len(p) > best_len:
                best, best_len = i, len(p)
    return best


def module_name(path):
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(name):
    rel = pathlib.Path(*name.split("."))
    return (ROOT.parent / rel.with_suffix(".py")).exists() or (ROOT.parent / rel / "__init__.py").exists()


def imports(path):
    """(line, imported module) for every import of spmd in the file."""
    mod = module_name(path)
    pkg = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")[:len(pkg.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            # `from . import x` names a submodule: judge by it, not by the package
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                yield node.lineno, sub if _is_module(sub) else target
        elif isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name


def upward_imports():
    bad = []
    for path in sorted(ROOT.rglob("*.py")):
        mod = module_name(path)
        src = layer_of(mod)
        for line, target in imports(path):
            if not target.startswith("spmd"):
                continue
            dst = layer_of(target)
            if dst is not None and dst > src and not any(f"imports {target} " in b and f":{line}" in b for b in bad):
                bad.append(f"{mod} ({LAYERS[src][0]}) imports {target} ({LAYERS[dst][0]}) "
                           f"at {path.relative_to(ROOT.parent)}:{line}")
    return bad


def test_imports_point_down():
    bad = upward_imports()
    assert not bad, "imports that point up a layer:\n" + "\n".join(bad)


def test_base_utilities_import_no_other_layer():
    for path in sorted(ROOT.rglob("*.py")):
        mod = module_name(path)
        if layer_of(mod) != 0:
            continue
        for line, target in imports(path):
            assert not target.startswith("spmd") or layer_of(target) == 0, f"{mod}:{line} imports {target}"


def test_the_check_sees_an_upward_import(tmp_path, monkeypatch):
    """The test itself: a planted upward import (ir -> runtime) is reported with the
    module and the import."""
    fake = tmp_path / "spmd"
    (fake / "ir").mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "ir" / "__init__.py").write_text("")
    (fake / "ir" / "bad.py").write_text("def f():\n    from ..runtime import device_put\n")
    monkeypatch.setattr(__import__(__name__), "ROOT", fake)
    bad = upward_imports()
    assert bad == ["spmd.ir.bad (ir) imports spmd.runtime (runtime) at spmd/ir/bad.py:2"], bad
