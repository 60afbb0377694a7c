"""explain's provenance: for every value, the annotation its sharding came from and the
ops it flowed through; lowered.as_text("propagated") shows every value's sharding."""
import inspect
import io

import numpy as np

import spmd
from spmd.ir.text import type_str
from spmd.sharding.explain import provenance

MESH = spmd.Mesh((2, 2), ("data", "model"))


def f32(*shape):
    return spmd.ShapeDtype(shape, "float32")


def chain(x, w):
    h = spmd.shard(x, MESH.sharding("data", None))
    y = np.tanh(h).T
    return (y * 2.0).T @ w


L0 = inspect.getsourcelines(chain)[1]


def lowered():
    return spmd.jit(chain, in_shardings=(None, MESH.sharding(None, "model"))).lower(f32(8, 4), f32(4, 6))


def test_every_value_says_where_its_split_came_from():
    g = lowered().stages["propagated"]
    rows = provenance(g)
    assert len(rows) == len(list(g.values()))
    by_op = {}
    for v, (name, typ, shs, expl) in zip(g.values(), rows):
        assert typ == type_str(v) and shs == v.sharding.text() and expl, (name, expl)
        by_op.setdefault(v.producer.name if v.producer else "input", []).append(expl)
    here = f"test_propagate_explain.py:{L0 + 1}"
    assert by_op["sharding_constraint"] == [f"annotation: spmd.shard at {here}"]
    x, w = by_op["input"]
    # x got its split backwards through the constraint; w is annotated
    assert x.startswith(f"dim 0 on data: from spmd.shard at {here}") and "via sharding_constraint" in x
    assert w == "annotation: in_shardings for w"
    # the output: dim 0 through the whole chain of ops, dim 1 from w through the dot
    (out,) = by_op["dot_general"]
    d0, d1 = out.split("; ")
    hops = [h.split(" (")[0] for h in d0.split(" via ")[1].split(" -> ")]
    assert hops == ["tanh", "transpose", "multiply", "transpose", "dot_general"]
    assert d1 == f"dim 1 on model: from in_shardings for w %1 via dot_general (test_propagate_explain.py:{L0 + 3})"
    assert by_op["constant"] == ["replicated: nothing splits it"]


def test_pending_sums_are_explained():
    f = spmd.jit(lambda x, w: x @ w * 2.0, in_shardings=(MESH.sharding(None, "model"), MESH.sharding("model", None)))
    text = f.lower(f32(8, 4), f32(4, 6)).explain(file=io.StringIO(), verbose=True)
    (line,) = [ln for ln in text.splitlines() if "partial(model)" in ln]
    assert "f32[8,6]" in line and "partial over model: a contraction over a split dim" in line


def test_propagated_text_shows_every_sharding_and_round_trips():
    from spmd.ir.text_parse import parse_graph
    text = lowered().as_text("propagated")
    body = [ln for ln in text.splitlines()[1:-2]]
    assert body and all("{" in ln.split(" : ")[-1] for ln in body)       # every op's result has one
    assert "mesh<data=2, model=2>" in text.splitlines()[0]
    assert parse_graph(text).__str__() == text
