"""ir/verify.py: the invariants every stage keeps, and what each stage promises about the
kind of program it leaves. Each check is shown to catch a planted violation, alone and
inside the pipeline (where the stage that broke it is named)."""
import numpy as np
import pytest

from spmd.compiler import pipeline
from spmd.ir import Graph, Mesh
from spmd.ir.ops.names import (
    ADD, ALL_REDUCE, ALL_REDUCE_DONE, ALL_REDUCE_START, AXIS_INDEX, EXP, REDUCE
)
from spmd.ir.verify import VerifyError, verify

MESH = Mesh((2,), ("x",))
REAL_STAGES = pipeline.stages


def _global_program():
    g = Graph("f")
    x = g.add_input((4, 3), "float64")
    g.outputs = [g.emit(REDUCE, g.emit(EXP, x), axes=(0,), kind="sum")]
    return g


def _async_program(drop=None):
    """A per-device program: all_reduce_start, work, all_reduce_done; with drop="done"
    the done is missing, with drop="start" the handle comes from outside (no start)."""
    g = Graph("f")
    x = g.add_input((4,), "float64")
    attrs = dict(axes=("x",), reduction="sum", group_size=2)
    h = g.add_input((), "int64") if drop == "start" else g.emit(ALL_REDUCE_START, x, **attrs)
    y = g.emit(EXP, x)
    if drop == "done":
        g.outputs = [y]
        return g
    g.outputs = [g.emit(ADD, g.emit(ALL_REDUCE_DONE, h, x, **attrs), y)]
    return g


def test_a_well_formed_program_passes_every_kind():
    g = _global_program()
    for kind in (None, "global", "per_device"):
        assert verify(g, "traced", kind) is g
    assert verify(_async_program(), "schedule", "per_device")


def test_a_collective_before_partitioning_is_caught():
    g = _global_program()
    g.outputs = [g.emit(ALL_REDUCE, g.outputs[0], axes=("x",), reduction="sum", group_size=2)]
    verify(g, "partitioned", "per_device")                 # fine in a per-device program
    with pytest.raises(VerifyError, match="only in per-device programs.*all_reduce"):
        verify(g, "traced", "global")


def test_axis_index_before_partitioning_is_caught():
    g = _global_program()
    g.emit(AXIS_INDEX, axes=("x",))
    with pytest.raises(VerifyError, match="only in per-device programs.*axis_index"):
        verify(g, "dce", "global")


def test_a_value_without_a_sharding_after_propagation_is_caught():
    g = _global_program()
    with pytest.raises(VerifyError, match="has no sharding after propagation"):
        verify(g, "propagated", "sharded")
    for v in list(g.inputs) + [r for op in g.ops for r in op.results]:
        v.sharding = MESH.sharding(*([None] * v.ndim))
    verify(g, "propagated", "sharded")
    g.ops[0].results[0].sharding = None
    with pytest.raises(VerifyError, match="has no sharding after propagation.*exp"):
        verify(g, "propagated", "sharded")


@pytest.mark.parametrize("drop, message", [("done", "never finished"), ("start", "no started collective")])
def test_a_start_without_its_done_and_a_done_without_its_start_are_caught(drop, message):
    with pytest.raises(VerifyError, match=message):
        verify(_async_program(drop), "schedule")


def test_a_done_used_twice_is_caught():
    g = _async_program()
    done = [op for op in g.ops if op.name == "all_reduce_done"][0]
    again = g.emit(ALL_REDUCE_DONE, done.operands[0], done.operands[1], **done.attrs)
    g.outputs.append(again)
    with pytest.raises(VerifyError, match="already finished"):
        verify(g, "schedule")


def _run_jit_stages(monkeypatch, **broken):
    """Lower a small sharded program through the pipeline with some stages replaced."""
    import spmd
    monkeypatch.setenv("SPMD_VERIFY", "1")
    monkeypatch.setenv("SPMD_PROGRAM_CACHE", "0")
    real = REAL_STAGES

    def stages(mesh, ins, outs, hints=None):
        return [pipeline.Stage(s.name, broken.get(s.name, s.run), s.makes) for s in real(mesh, ins, outs, hints)]
    monkeypatch.setattr(pipeline, "stages", stages)
    mesh = Mesh((2,), ("x",))
    f = spmd.jit(lambda a: (a * 2).sum(0), in_shardings=(mesh.sharding("x", None),))
    return f.lower(np.ones((4, 3)))


def test_the_pipeline_names_the_stage_that_broke_an_invariant(monkeypatch):
    _run_jit_stages(monkeypatch)                            # the real stages pass

    def early_collective(g):
        g.outputs = [g.emit(ALL_REDUCE, g.outputs[0], axes=("x",), reduction="sum", group_size=2)]
        return g

    def unfinished(g):
        x = g.inputs[0]
        g.emit(ALL_REDUCE_START, x, axes=("x",), reduction="sum", group_size=2)
        return g

    with pytest.raises(VerifyError, match="after stage 'dce'.*only in per-device programs"):
        _run_jit_stages(monkeypatch, dce=early_collective)
    with pytest.raises(VerifyError, match="after stage 'schedule'.*never finished"):
        _run_jit_stages(monkeypatch, schedule=unfinished)
    real_propagate = pipeline.propagate

    def drop_one(g, *a):
        out = real_propagate(g, *a)
        out.ops[-1].results[0].sharding = None
        return out
    monkeypatch.setattr(pipeline, "propagate", drop_one)
    with pytest.raises(VerifyError, match="after stage 'propagated'.*no sharding after propagation"):
        _run_jit_stages(monkeypatch)



@pytest.mark.parametrize("change", ["result shape", "operand dtype", "attribute"])
def test_an_op_checked_once_and_then_changed_in_place_is_caught_again(change):
    """verify skips the shape rule of an op it checked unchanged (passes keep the ops they
    do not touch); one changed in place since (a pass breaking immutability) is checked again."""
    g = _global_program()
    verify(g)
    red = g.ops[-1]
    if change == "result shape":
        red.results[0].shape = (4,)
    elif change == "operand dtype":
        g.inputs[0].dtype = "int64"
        g.ops[0].results[0].dtype = "int64"
    else:
        red.attrs = dict(red.attrs, axes=(1,))
    with pytest.raises(VerifyError):
        verify(g)
