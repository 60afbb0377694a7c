"""spmd.AUTO's realized plan and the work of making it: the search's interior layouts
kept where propagation from the arguments alone diverges (the "followed" plan), the
global stages run once, the kept plan's program handed on to lowering, plans realized
alike made once, explain's runner-up priced as a whole re-total would."""
import sys

import numpy as np
import pytest

import spmd
from spmd.compiler import pipeline
from spmd.ir.mesh import AUTO
from spmd.sharding.auto.choose import diverging, searched_layouts
from spmd.sharding.auto.problem import build
from spmd.sharding.auto.solve import solve, total
from spmd.sharding.cost_model import Machine, Network
from spmd.sharding.propagate import propagate
from gpt_programs import tiny_gpt
from test_auto import mlp_args, mlp_step

pytestmark = pytest.mark.filterwarnings("ignore::spmd.ReshardWarning")

MESH = spmd.Mesh((2, 2), ("data", "model"))
CHOOSE = sys.modules["spmd.sharding.auto.choose"]


def _tiny_gpt(d=32, layers=1, seq=16, batch=4):
    return tiny_gpt(MESH, d, layers, seq, batch)


def test_followed_program_lays_out_every_searched_value_as_the_search_chose():
    step, args = _tiny_gpt()
    traced = spmd.jit(step, mesh=MESH, in_shardings=AUTO).lower(*args).stages["traced"]
    g = pipeline.global_program(traced, MESH)
    pb = build(g, MESH, [AUTO] * len(g.inputs), [None] * len(g.outputs), Machine(), Network())
    some = False
    for _, choice in solve(pb):
        ins = [pb.inputs[i].makes[choice[id(pb.inputs[i])]][v] for i, v in enumerate(g.inputs)]
        some |= bool(diverging(g, pb, choice, propagate(g, MESH, ins, [])))
        hints = searched_layouts(g, pb, choice)
        followed = propagate(g, MESH, ins, [], hints)
        assert diverging(g, pb, choice, followed) == {}
        for (oi, ri), s in hints.items():
            assert followed.ops[oi].results[ri].sharding.replace(partial=()) == s
            assert followed.annotations[followed.ops[oi].results[ri]].startswith("spmd.AUTO's choice")
    assert some           # (else this test tests nothing: propagation diverges on this program)


def _count_stages(monkeypatch):
    monkeypatch.setenv("SPMD_PROGRAM_CACHE", "0")
    ran, real = [], pipeline.run

    def run(plan, graph, *a, **k):
        ran.extend(pipeline.Stage(*st).name for st in plan)
        return real(plan, graph, *a, **k)
    monkeypatch.setattr(pipeline, "run", run)
    return ran


def test_global_stages_run_once_and_the_kept_program_is_not_made_again(monkeypatch):
    ran = _count_stages(monkeypatch)
    p, x, y = mlp_args()
    f = spmd.jit(mlp_step, mesh=MESH, in_shardings=AUTO)
    low = f.lower(p, x, y)
    assert ran.count("inline") == 1 and ran.count("dce") == 2     # (dce: once global, once per device)
    assert "propagated" not in ran and "partitioned" not in ran
    assert low.stages["propagated"] is low.auto.programs[0]
    assert low.stages["partitioned"] is low.auto.programs[1]
    lv, new = f(p, x, y)
    want_lv, want_new = spmd.jit(mlp_step)(p, x, y)
    np.testing.assert_allclose(float(lv), float(want_lv), rtol=1e-5)
    for k in p:
        np.testing.assert_allclose(np.asarray(new[k]), np.asarray(want_new[k]), rtol=1e-5, atol=1e-6)


def test_plans_realized_alike_are_made_once(monkeypatch):
    calls = []
    real = CHOOSE.propagate
    monkeypatch.setattr(CHOOSE, "propagate", lambda *a, **k: calls.append(a[2:4]) or real(*a, **k))

    def f(x):                   # the search's plan, the baseline's and (maybe) the replicated one
        return np.sin(x) * 2.0
    low = spmd.jit(f, mesh=spmd.Mesh((4,), ("x",)), in_shardings=AUTO).lower(np.ones(64))
    assert low.in_shardings[0] == spmd.Mesh((4,), ("x",)).sharding("x")     # = the baseline
    plans = len(low.auto.seconds) - len(low.auto.estimated)
    keys = [tuple(map(tuple, c)) for c in calls]
    assert len(set(keys)) == len(keys)          # no layout made twice
    assert 2 <= len(calls) < plans              # the search's plan is the baseline's: made once


def test_explain_runner_up_is_the_whole_totals_difference():
    step, args = _tiny_gpt()
    low = spmd.jit(step, mesh=MESH, in_shardings=AUTO).lower(*args)
    traced = low.stages["traced"]
    g = pipeline.global_program(traced, MESH)
    from spmd.sharding.auto.choose import choose
    names = [f"a{i}" for i in range(len(g.inputs))]
    plan = choose(g, MESH, [AUTO] * len(g.inputs), [None] * len(g.outputs), Machine(), Network(), None, names)
    pb = build(g, MESH, [AUTO] * len(g.inputs), [None] * len(g.outputs), Machine(), Network(), names)
    choice = dict(solve(pb))[plan.method.split(",")[0]]
    base = total(pb, choice)
    checked = 0
    for i, w in enumerate(plan.why):
        if w["runner_up"] is None:
            continue
        node = pb.inputs[i]
        j = next(j for j, m in enumerate(node.makes) if m[g.inputs[i]].text() == w["runner_up"])
        alt = dict(choice)
        alt[id(node)] = j
        assert w["delta"] == pytest.approx(total(pb, alt) - base, rel=1e-9, abs=1e-15)
        checked += 1
    assert checked > 3


@pytest.mark.slow
def test_a_followed_plan_gives_the_same_step(monkeypatch):
    # make the followed plan the kept one, whatever the model says, and run it
    real_p, real_part, real_s = CHOOSE.propagate, CHOOSE.partition, CHOOSE.program_seconds
    followed = set()

    def prop(g, mesh, ins, outs, hints=None):
        out = real_p(g, mesh, ins, outs, hints)
        if hints:
            followed.add(id(out))
        return out

    def part(g):
        out = real_part(g)
        if id(g) in followed:
            followed.add(id(out))
        return out

    def seconds(p, *a, **k):
        out = dict(real_s(p, *a, **k))
        if id(p) in followed:
            out["seconds"] = 0.0
        return out
    monkeypatch.setattr(CHOOSE, "propagate", prop)
    monkeypatch.setattr(CHOOSE, "partition", part)
    monkeypatch.setattr(CHOOSE, "program_seconds", seconds)
    step, args = _tiny_gpt()
    f = spmd.jit(step, mesh=MESH, in_shardings=AUTO)
    low = f.lower(*args)
    assert low.auto.chosen.endswith("followed") and low.auto.hints
    for (oi, ri), s in low.auto.hints.items():
        assert low.stages["propagated"].ops[oi].results[ri].sharding.replace(partial=()) == s
    got = f(*args)
    want = spmd.jit(step)(*args)
    np.testing.assert_allclose(float(got[0]), float(want[0]), rtol=1e-4)
