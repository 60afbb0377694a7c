"""Imports point one way, down the path of a program (docs/design.md, Layers): a module may
import its own layer and the layers below it, never one above; no two modules import each
other, however indirectly; and no module reaches for another module's private (`_name`)
helpers. Every import counts, including the ones inside functions (a lazy import is still
a dependency)."""
import ast
import pathlib

import spmd

ROOT = pathlib.Path(spmd.__file__).parent

# low to high; a module belongs to the layer of its longest matching prefix
LAYERS = (
    # utilities every layer may use; they import no other part of spmd
    ("base", ("spmd.errors", "spmd.tracebacks", "spmd.tree", "spmd.tools.timeline")),
    ("ir", ("spmd.ir",)),                      # Graph, ops, Mesh, Sharding
    ("frontend", ("spmd.frontend",)),          # numpy in: tracing, the API table, writes, autodiff
    ("sharding", ("spmd.sharding",)),          # propagation, partitioning, resharding
    ("compiler", ("spmd.compiler",)),          # the pipeline, passes, program caches
    ("backends", ("spmd.backends",)),          # executor, numpy, llvm
    # the runtime and the transports (spmd/transports/: the Communicator base, then one package
    # per transport: its communicator, its runtime, its liveness)
    ("runtime", ("spmd.runtime", "spmd.transports", "spmd.tools")),
    # the launcher, and each transport's own way of starting the ranks
    ("launcher", ("spmd.launcher", "spmd.transports.mpi.mpi_launch", "spmd.transports.ray.ray_hosts",
                  "spmd.transports.ray.ray_node")),
    ("testing", ("spmd.testing",)),            # test beds (hosts, SLURM) that tests and benchmarks share
    # the user API and eager mode, above them all; spmd.random and spmd.numpy re-export
    # the front-end's public functions under their public names
    ("api", ("spmd.api", "spmd.jit", "spmd.eager", "spmd.random", "spmd.numpy", "spmd.debug")),
)
TOP = "spmd"            # the package itself (spmd/__init__.py): the public API, re-exported


def layer_of(module):
    if module == TOP:
        return len(LAYERS) - 1
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


def test_every_module_has_a_layer():
    """A module no layer names (a new top-level file) would escape the checks above."""
    missing = [module_name(p) for p in sorted(ROOT.rglob("*.py")) if layer_of(module_name(p)) is None]
    assert not missing, f"modules in no layer (add them to LAYERS): {missing}"


def import_graph(root=None):
    """module -> the set of spmd modules it imports (itself excluded)."""
    root = root or ROOT
    graph = {}
    for path in sorted(root.rglob("*.py")):
        mod = module_name(path)
        graph[mod] = {t for _, t in imports(path) if t.startswith("spmd") and t != mod and _is_module(t)}
    return graph


def cycles(graph):
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def test_no_import_circles():
    found = cycles(import_graph())
    assert not found, "modules that import each other (directly or around a circle):\n" + \
        "\n".join(" <-> ".join(c) for c in found)


def test_the_check_sees_an_import_circle(tmp_path, monkeypatch):
    fake = tmp_path / "spmd"
    (fake / "ir").mkdir(parents=True)
    for f in ("__init__.py", "ir/__init__.py"):
        (fake / f).write_text("")
    (fake / "ir" / "a.py").write_text("from . import b\n")
    (fake / "ir" / "b.py").write_text("def f():\n    from .c import g\n")
    (fake / "ir" / "c.py").write_text("from .a import x\n")
    monkeypatch.setattr(__import__(__name__), "ROOT", fake)
    assert cycles(import_graph(fake)) == [["spmd.ir.a", "spmd.ir.b", "spmd.ir.c"]]


def private_imports(root=None):
    """`from spmd.x import _helper` and `module._helper` across spmd modules."""
    root = root or ROOT
    found = []
    for path in sorted(root.rglob("*.py")):
        mod = module_name(path)
        tree = ast.parse(path.read_text())
        aliases = {}                      # local name -> the spmd module it is bound to
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                targets = dict(imports_of(path, node))
                for alias in node.names:
                    target = targets[alias.name]
                    if target == mod or not target.startswith("spmd"):
                        continue
                    if target.endswith("." + alias.name):
                        aliases[alias.asname or alias.name] = target
                    elif alias.name.startswith("_") and not alias.name.startswith("__"):
                        found.append(f"{mod}:{node.lineno} imports {alias.name} from {target}")
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                    and node.value.id in aliases and node.attr.startswith("_") and not node.attr.startswith("__"):
                found.append(f"{mod}:{node.lineno} uses {aliases[node.value.id]}.{node.attr}")
    return found


def imports_of(path, node):
    """(imported name, the module it comes from or is) for one `from ... import` node."""
    mod = module_name(path)
    pkg = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
    if node.level:
        base = pkg.split(".")[:len(pkg.split(".")) - (node.level - 1)]
        target = ".".join(base + ([node.module] if node.module else []))
    else:
        target = node.module or ""
    for alias in node.names:
        sub = f"{target}.{alias.name}"
        yield alias.name, sub if _is_module(sub) else target


def test_no_module_uses_another_modules_private_helpers():
    found = private_imports()
    assert not found, "private helpers used across modules (make them public where they are shared):\n" + \
        "\n".join(found)


def test_the_check_sees_private_helpers(tmp_path, monkeypatch):
    fake = tmp_path / "spmd"
    (fake / "ir").mkdir(parents=True)
    for f in ("__init__.py", "ir/__init__.py"):
        (fake / f).write_text("")
    (fake / "ir" / "a.py").write_text("def _h():\n    pass\n")
    (fake / "ir" / "b.py").write_text("from .a import _h\nfrom . import a as A\nA._h()\n")
    monkeypatch.setattr(__import__(__name__), "ROOT", fake)
    assert private_imports(fake) == ["spmd.ir.b:1 imports _h from spmd.ir.a", "spmd.ir.b:3 uses spmd.ir.a._h"]


# -- sharding/ sits on the IR alone; the IR says what an op is, never how it is split ----------
def sharding_imports_above_ir():
    """Imports in spmd/sharding/ of anything but the base utilities, the IR and sharding
    itself (the front-end is below sharding in the layer order, but sharding needs none
    of it: partitioning is about the IR alone)."""
    bad = []
    for path in sorted((ROOT / "sharding").rglob("*.py")):
        for line, target in imports(path):
            if target.startswith("spmd") and LAYERS[layer_of(target)][0] not in ("base", "ir", "sharding"):
                bad.append(f"{module_name(path)}:{line} imports {target}")
    return bad


def test_sharding_depends_on_the_ir_only():
    bad = sharding_imports_above_ir()
    assert not bad, "sharding/ imports beyond ir/ (and the base utilities):\n" + "\n".join(bad)


def partition_handlers_in_ir(root=None):
    """Anything under spmd/ir/ that defines or refers to a partition handler: a function
    named for partitioning, a `partition...=` keyword (an OpDef field), an attribute read
    `.partition...`, or a parameter `ctx` / `P` (the partitioner's context). Those live in
    sharding/partition_rules/."""
    root = root or ROOT
    found = []
    for path in sorted((root / "ir").rglob("*.py")):
        rel = path.relative_to(root.parent).as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if "partition" in node.name.lower():
                    found.append(f"{rel}:{node.lineno} defines {node.name}")
                for a in node.args.args[:1]:
                    if a.arg in ("ctx", "P"):
                        found.append(f"{rel}:{node.lineno} {node.name} takes the partitioner's context ({a.arg})")
            elif isinstance(node, ast.keyword) and node.arg and node.arg.startswith("partition"):
                found.append(f"{rel}:{node.value.lineno} passes {node.arg}=")
            elif isinstance(node, ast.Attribute) and node.attr.startswith("partition"):
                found.append(f"{rel}:{node.lineno} reads .{node.attr}")
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) \
                    and node.target.id.startswith("partition"):
                found.append(f"{rel}:{node.lineno} declares {node.target.id}")
    return sorted(found, key=lambda f: (f.split(" ")[0].rsplit(":", 1)[0], int(f.split(" ")[0].rsplit(":", 1)[1]), f))


def test_the_ir_holds_no_partition_handler():
    import dataclasses
    from spmd.ir import OpDef
    assert not [f.name for f in dataclasses.fields(OpDef) if f.name.startswith("partition")]
    found = partition_handlers_in_ir()
    assert not found, "partition handlers belong in sharding/partition_rules/, not the IR:\n" + "\n".join(found)


def test_the_check_sees_sharding_importing_the_front_end(tmp_path, monkeypatch):
    fake = tmp_path / "spmd"
    for d in ("sharding", "ir", "frontend"):
        (fake / d).mkdir(parents=True)
        (fake / d / "__init__.py").write_text("")
    (fake / "__init__.py").write_text("")
    (fake / "sharding" / "a.py").write_text("from ..ir import Graph\nfrom ..frontend import trace\n")
    (fake / "frontend" / "trace.py").write_text("")
    monkeypatch.setattr(__import__(__name__), "ROOT", fake)
    assert sharding_imports_above_ir() == ["spmd.sharding.a:2 imports spmd.frontend.trace"]


def test_the_check_sees_a_partition_handler_in_the_ir(tmp_path):
    fake = tmp_path / "spmd"
    (fake / "ir" / "ops").mkdir(parents=True)
    (fake / "ir" / "ops" / "bad.py").write_text(
        "def _partition_x(P, op):\n    pass\n\n\n"
        "def rule(ctx, op):\n    return op.opdef.partition_local\n\n\n"
        "register(OpDef('x', partition=rule))\n\n\n"
        "class OpDef:\n    partition: object = None\n")
    assert partition_handlers_in_ir(fake) == [
        "spmd/ir/ops/bad.py:1 _partition_x takes the partitioner's context (P)",
        "spmd/ir/ops/bad.py:1 defines _partition_x",
        "spmd/ir/ops/bad.py:5 rule takes the partitioner's context (ctx)",
        "spmd/ir/ops/bad.py:6 reads .partition_local",
        "spmd/ir/ops/bad.py:9 passes partition=",
        "spmd/ir/ops/bad.py:13 declares partition",
    ]


# -- distinct names for distinct things -----------------------------------------------------------
# A file name may repeat only where it is one thing seen at several layers: an op family's
# numpy functions (frontend/, frontend/numpy_lib/), its ops (ir/ops/), its partition rules
# (sharding/partition_rules/), its eager form (eager/), or a public module (spmd/x.py)
# re-exporting the front-end's. Other repeats are listed here with why they are one thing.
MIRRORS = ("spmd", "spmd/frontend", "spmd/frontend/numpy_lib", "spmd/ir/ops", "spmd/sharding/partition_rules",
           "spmd/eager")
SAME_THING = {"spmd/compiler/passes/remat.py": "recomputes values, as spmd.checkpoint (frontend/remat.py) does"}


def repeated_names(root=None):
    """Files (not __init__.py) whose name another file of spmd has, outside the mirrors."""
    root = root or ROOT
    by_name = {}
    for path in sorted(root.rglob("*.py")):
        if path.name != "__init__.py":
            by_name.setdefault(path.name, []).append(path.relative_to(root.parent).as_posix())
    return [p for paths in by_name.values() if len(paths) > 1 for p in paths
            if p.rsplit("/", 1)[0] not in MIRRORS and p not in SAME_THING]


def test_files_of_one_name_are_one_thing():
    found = repeated_names()
    assert not found, "files named like another file of spmd that means something else " \
        "(name them after their job):\n" + "\n".join(found)


def test_the_check_sees_a_repeated_name(tmp_path):
    fake = tmp_path / "spmd"
    for d in ("runtime", "sharding/partition_rules", "ir/ops"):
        (fake / d).mkdir(parents=True)
    for f in ("runtime/context.py", "sharding/partition_rules/context.py", "ir/ops/shape.py",
              "sharding/partition_rules/shape.py", "runtime/__init__.py", "ir/ops/__init__.py"):
        (fake / f).write_text("")
    assert repeated_names(fake) == ["spmd/runtime/context.py"]
