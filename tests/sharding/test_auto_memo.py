"""spmd.AUTO's planning remembers what it works out, per what it is a function of: factor
rules and the op seconds of the search per op_key (an op's name, shapes, dtypes and
attributes), propagation's and the partitioner's choices per op_key and the shardings
they read. What must hold: a remembered answer is the one working it out again gives,
so the plan (its shardings, its modelled seconds, its partitioned program) is the same
with the memos bypassed, whatever the process planned before, and in a fresh process."""
import os
import subprocess
import sys

import numpy as np
import pytest

import gpt_programs
import spmd
from paths import TESTS
from spmd.ir import Graph
from spmd.ir.graph import Op, Value
from spmd.ir.mesh import AUTO
from spmd.sharding import rules
from spmd.sharding.auto import problem
from spmd.sharding.cost_model import Network

pytestmark = pytest.mark.filterwarnings("ignore::spmd.ReshardWarning")

MESH = spmd.Mesh((2, 2), ("data", "model"))
# (the modules, not the functions of the same names spmd.sharding gives)
PROPAGATE, PARTITION = sys.modules["spmd.sharding.propagate"], sys.modules["spmd.sharding.partition"]
NET = Network(within=spmd.Link(latency=2e-5, bandwidth=2e9))


def tiny_gpt(d=32, layers=2, seq=16, batch=8):
    return gpt_programs.tiny_gpt(MESH, d, layers, seq, batch)


def plan_text(step, args) -> str:
    """Everything a plan is: the shardings chosen, the plan kept, every plan's modelled
    seconds, the hints, the partitioned program."""
    low = spmd.jit(step, mesh=MESH, in_shardings=AUTO, network=NET).lower(*args)
    a = low.auto
    return "\n".join([low.shardings().code(), a.chosen, a.method, repr(sorted(a.seconds.items())),
                      repr(sorted(a.estimated)), repr(a.hints), low.as_text("partitioned")])


def test_memoised_answers_are_the_fresh_ones(tmp_path, monkeypatch):
    """With op_key giving no key every memo keyed by it is bypassed (each answer worked
    out where it is asked for): the plan is the same, after other programs filled the
    memos with the same ops in other places and shapes."""
    monkeypatch.setenv("SPMD_CACHE_DIR", str(tmp_path))
    for d, layers in ((32, 1), (16, 2)):
        plan_text(*tiny_gpt(d, layers))
    remembered = plan_text(*tiny_gpt())
    for mod in (rules, PROPAGATE, PARTITION, problem):
        monkeypatch.setattr(mod, "op_key", lambda op: None)
    fresh = plan_text(*tiny_gpt())
    assert fresh == remembered


def test_a_plan_is_the_same_in_a_fresh_process_whatever_was_planned_before(tmp_path, monkeypatch):
    monkeypatch.setenv("SPMD_CACHE_DIR", str(tmp_path))
    for d, layers, seq in ((32, 1, 16), (16, 2, 16), (32, 2, 8)):
        plan_text(*tiny_gpt(d, layers, seq))
    here = plan_text(*tiny_gpt())
    assert plan_text(*tiny_gpt()) == here
    script = (f"import sys; sys.path.insert(0, {TESTS!r}); sys.path.insert(0, {os.path.join(TESTS, 'sharding')!r}); "
              "from test_auto_memo import plan_text, tiny_gpt; print(plan_text(*tiny_gpt()))")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600,
                         env={**os.environ, "SPMD_CACHE_DIR": str(tmp_path), "PYTHONHASHSEED": "7"})
    assert out.returncode == 0, out.stderr
    assert out.stdout == here + "\n"


def test_op_key_holds_what_a_rule_reads():
    x, y = Value((4, 8), "float32"), Value((4, 8), "float32")

    def op(attrs, shape=(4, 8), dtype="float32", name="add"):
        o = Op(name, [x, y], attrs, [])
        o.results = (Value(shape, dtype, o, 0),)
        return o
    key = rules.op_key(op({"k": 1}))
    assert key == rules.op_key(op({"k": 1}))
    assert key != rules.op_key(op({"k": True}))          # equal as keys, not as attributes
    assert key != rules.op_key(op({"k": 1}, shape=(8, 4)))
    assert key != rules.op_key(op({"k": 1}, dtype="float64"))
    assert key != rules.op_key(op({"k": 1}, name="subtract"))
    arr = rules.op_key(op({"k": np.array([1, 2])}))                # an array by its dtype, shape, bytes
    assert arr == rules.op_key(op({"k": np.array([1, 2])}))
    assert arr != rules.op_key(op({"k": np.array([1, 3])}))
    assert arr != rules.op_key(op({"k": np.array([1, 2], dtype=np.int8)}))
    assert arr != rules.op_key(op({"k": np.array([[1, 2]])}))
    assert rules.op_key(op({"k": [1, 2]})) is None                   # not hashable
    assert rules.op_key(op({"body": Graph("body")})) is None      # a graph: its contents may change
