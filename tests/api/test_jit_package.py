"""The spmd/jit package (jit's stages) beside the user's spmd.jit function."""
import os
import subprocess
import sys

import spmd

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_spmd_jit_is_the_function_and_the_stages_import_by_name():
    from spmd.jit import arguments, compiling, graph_breaks, placing, running, tracing  # noqa: F401
    from spmd.jit.lowering import Lowered
    assert callable(spmd.jit) and spmd.jit.__module__ == "spmd.api"
    assert spmd.Lowered is Lowered


def test_importing_spmd_loads_no_compiler():
    """A Ray actor (or an eager-only process) imports spmd without the compiler, the
    backends or sharding/: jit loads them when it first traces a function."""
    code = ("import sys, spmd, numpy as np\n"
            "heavy = ('spmd.compiler', 'spmd.backends', 'spmd.sharding', 'llvmlite')\n"
            "print(sorted(m for m in sys.modules if m.startswith(heavy)))\n"
            "spmd.jit(lambda x: x + 1)(np.ones(2))\n"
            "print('spmd.compiler.pipeline' in sys.modules)\n")
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == ["[]", "True"], out.stdout
