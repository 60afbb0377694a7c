"""Layering of the runtime (issues #12, #16), beyond the import direction that
test_layers.py checks for every module (runtime/ and transports/ never import
launcher/): runtimes use tools/timeline only through its public functions; checkpoints
reach MPI only through the Runtime contract."""
import ast
import os
import pathlib

import pytest

from test_layers import imports
from paths import ROOT

PKG = os.path.join(ROOT, "spmd")


def _modules(sub):
    d = os.path.join(PKG, sub)
    return [os.path.join(d, f) for f in sorted(os.listdir(d)) if f.endswith(".py")]


@pytest.mark.parametrize("path", _modules("runtime") + _modules("collectives"), ids=os.path.basename)
def test_no_private_timeline_names(path):
    tree = ast.parse(open(path).read())
    bad = [n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
           and n.value.id == "timeline" and n.attr.startswith("_")]
    assert not bad, bad


def test_checkpoint_talks_to_mpi_only_through_the_runtime():
    for name in ("checkpoint.py", "checkpoint_index.py"):
        path = pathlib.Path(PKG, "runtime", name)
        assert not [m for _, m in imports(path) if m.startswith("mpi4py")]
