"""Layering of the runtime (issues #12, #16, #32), beyond the import direction that
test_layers.py checks for every module (runtime/ and transports/ never import
launcher/): runtimes use tools/timeline only through its public functions; checkpoints
reach MPI only through the Runtime contract; each transport's code is in its package
(spmd/transports/local, mpi, ray), which the rest of spmd reaches only where it picks a
transport's runtime or launching."""
import ast
import os
import pathlib

import pytest

from test_layers import imports
from paths import ROOT

PKG = os.path.join(ROOT, "spmd")


def _modules(sub):
    return sorted(str(p) for p in pathlib.Path(PKG, sub).rglob("*.py"))


@pytest.mark.parametrize("path", _modules("runtime") + _modules("transports"), ids=os.path.basename)
def test_no_private_timeline_names(path):
    tree = ast.parse(open(path).read())
    bad = [n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
           and n.value.id == "timeline" and n.attr.startswith("_")]
    assert not bad, bad


def test_checkpoint_talks_to_mpi_only_through_the_runtime():
    for name in ("checkpoint.py", "checkpoint_index.py"):
        path = pathlib.Path(PKG, "runtime", name)
        assert not [m for _, m in imports(path) if m.startswith("mpi4py")]


# the modules outside spmd/transports/ that may name a transport's package: where the
# runtime of a backend is picked, and where `spmd run` / `spmd doctor` launch one
PICKS_A_TRANSPORT = {"runtime/current_runtime.py", "launcher/cli.py", "launcher/doctor.py"}
LIBRARY_OF = {"mpi": "mpi4py", "ray": "ray"}


def transport_imports_outside(root):
    """(module path, line, what it imports) for every import of a transport's package or
    its library (mpi4py, ray) from outside that package, save PICKS_A_TRANSPORT's imports
    of the packages."""
    bad = []
    for path in sorted(pathlib.Path(root).rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        for line, m in imports(path):
            for name, lib in LIBRARY_OF.items():
                inside = rel.startswith(f"transports/{name}/")
                if (m == lib or m.startswith(lib + ".")) and not inside:
                    bad.append((rel, line, m))
            for name in ("local", "mpi", "ray"):
                if m.startswith(f"spmd.transports.{name}") and not rel.startswith("transports/") \
                        and rel not in PICKS_A_TRANSPORT:
                    bad.append((rel, line, m))
    return bad


def test_each_transport_is_its_package():
    bad = transport_imports_outside(PKG)
    assert not bad, f"a transport's code or library reached from outside its package: {bad}"


def test_the_check_sees_a_transport_outside_its_package(tmp_path, monkeypatch):
    import test_layers
    fake = tmp_path / "spmd"
    (fake / "backends").mkdir(parents=True)
    (fake / "transports" / "ray").mkdir(parents=True)
    (fake / "backends" / "x.py").write_text("import ray\nfrom spmd.transports.mpi import mpi_library\n")
    (fake / "transports" / "ray" / "ok.py").write_text("import ray\n")
    (fake / "transports" / "ray" / "bad.py").write_text("from mpi4py import MPI\n")
    monkeypatch.setattr(test_layers, "ROOT", fake)
    assert transport_imports_outside(fake) == [
        ("backends/x.py", 1, "ray"), ("backends/x.py", 2, "spmd.transports.mpi"),
        ("transports/ray/bad.py", 1, "mpi4py")]
