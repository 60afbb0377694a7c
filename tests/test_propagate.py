"""Propagation golden tests (issue 3): the inferred sharding of every value that matters,
for the canonical parallelism patterns, plus properties over random programs."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import spmd
from partition_util import random_program, random_sharding
from spmd.errors import ShardingError
from spmd.sharding.propagate import propagate

MESH = spmd.Mesh((2, 2), ("data", "model"))


def sh(*spec, partial=()):
    return MESH.sharding(*spec, partial=partial)


def prop(f, args, in_shardings, out_shardings=None):
    return spmd.jit(f, in_shardings=in_shardings, out_shardings=out_shardings).lower(*args).stages["propagated"]


def ops(g, name):
    return [op for op in g.ops if op.name == name]


def f32(*shape):
    return spmd.ShapeDtype(shape, "float32")


def mlp_loss(p, x, y):
    h = np.maximum(x @ p["w1"], 0)
    return np.mean((h @ p["w2"] - y) ** 2)


def mlp_grads(p, x, y):
    return spmd.grad(mlp_loss)(p, x, y)


P = {"w1": f32(16, 32), "w2": f32(32, 8)}


def test_data_parallel():
    rep = sh()
    g = prop(mlp_grads, (P, f32(64, 16), f32(64, 8)), ({"w1": rep, "w2": rep}, sh("data", None), sh("data", None)))
    dots = ops(g, "dot_general")
    fwd = [d for d in dots if d.result.shape in ((64, 32), (64, 8))]
    assert fwd and all(d.result.sharding.spec == ("data", None) and not d.result.sharding.partial for d in fwd)
    # weight gradients: contractions over the batch -> partial over data, dims unsplit
    # (the VJP of x @ w contracts to w's transpose, then transposes)
    wgrads = [d for d in dots if d.result.shape in ((16, 32), (32, 8), (32, 16), (8, 32))]
    assert len(wgrads) == 2
    for d in wgrads:
        assert d.result.sharding.spec == (None, None) and d.result.sharding.partial == ("data",)
    assert all(v.sharding.spec == (None, None) for v in g.inputs[:2])
    # what the user gets back is never partial
    assert all(not v.sharding.partial for v in g.outputs)


def test_megatron_mlp():
    def fwd(p, x):
        h = np.maximum(x @ p["w1"], 0)
        return (h @ p["w2"]) * 2.0
    g = prop(fwd, (P, f32(64, 16)), ({"w1": sh(None, "model"), "w2": sh("model", None)}, sh()))
    first, second = ops(g, "dot_general")
    assert first.result.sharding == sh(None, "model")                 # hidden split on model
    assert ops(g, "maximum")[0].result.sharding == sh(None, "model")
    assert second.result.sharding == sh(None, None, partial="model")  # output pending a sum


def test_data_and_model_on_2x2():
    g = prop(mlp_grads, (P, f32(64, 16), f32(64, 8)),
             ({"w1": sh(None, "model"), "w2": sh("model", None)}, sh("data", None), sh("data", None)))
    dots = {d.result.shape: d.result.sharding for d in ops(g, "dot_general")}
    assert dots[(64, 32)] == sh("data", "model")
    assert dots[(64, 8)] == sh("data", None, partial="model")
    # weight gradients (computed transposed by the VJP, then transposed back)
    assert dots[(8, 32)] == sh(None, "model", partial="data")     # d w2^T
    assert dots[(32, 16)] == sh("model", None, partial="data")    # d w1^T
    assert g.outputs[0].sharding == sh(None, "model") and g.outputs[1].sharding == sh("model", None)


def test_layernorm_over_sharded_features():
    def ln(x):
        mu = x.mean(axis=-1, keepdims=True)
        var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
        return (x - mu) / np.sqrt(var + 1e-5)
    g = prop(ln, (f32(8, 32),), (sh("data", "model"),))
    sums = ops(g, "reduce")
    assert sums and all(r.result.sharding == sh("data", partial="model") for r in sums)
    assert g.outputs[0].sharding == sh("data", "model")
    for op in g.ops:
        if op.result.shape == (8, 32):
            assert op.result.sharding == sh("data", "model"), op


def test_reshape_merges_and_splits_a_sharded_batch():
    def f(x):
        y = x.reshape(8 * 4, 16) * 2.0            # merge (batch, seq) with batch split
        return y.reshape(8, 4, 16) + 1.0          # and back
    g = prop(f, (f32(8, 4, 16),), (sh("data", None, None),))
    merged, back = ops(g, "reshape")
    assert merged.result.sharding == sh("data", None)
    assert back.result.sharding == sh("data", None, None)
    # and backwards: an annotation on the merged value reaches the input
    g = prop(lambda x: spmd.shard(x.reshape(32, 16), sh("data", None)) * 2.0, (f32(8, 4, 16),), (None,))
    assert g.inputs[0].sharding == sh("data", None, None)


def test_transpose_chain():
    g = prop(lambda x: (x.T * 2.0).T + 1.0, (f32(8, 6),), (sh("data", "model"),))
    t1, t2 = ops(g, "transpose")
    assert t1.result.sharding == sh("model", "data")
    assert t2.result.sharding == sh("data", "model")
    assert g.outputs[0].sharding == sh("data", "model")


@pytest.mark.parametrize("big", ["lhs", "rhs"])
def test_conflicting_annotations_resolved_by_cost(big):
    """x's rows and y's rows both want `data`, but as different factors of the dot:
    the larger array keeps its split, the smaller one is resharded."""
    m, k, n = (4096, 8, 8) if big == "lhs" else (8, 8, 4096)
    f = lambda x, y: spmd.shard(x, sh("data", None)) @ spmd.shard(y, sh(None, "data"))  # noqa: E731
    g = prop(f, (f32(m, k), f32(k, n)), (None, None))
    out = ops(g, "dot_general")[0].result.sharding
    assert out == (sh("data", None) if big == "lhs" else sh(None, "data"))
    # deterministic
    assert prop(f, (f32(m, k), f32(k, n)), (None, None)).outputs[0].sharding == g.outputs[0].sharding


def test_replicate_factor_is_never_split():
    # gather's indexed dim must be whole on the operand
    g = prop(lambda t, i: t[i] * 2.0, (f32(16, 8), spmd.ShapeDtype((4,), "int64")), (None, None),
             out_shardings=sh("data", None))
    assert ops(g, "gather")[0].operands[0].sharding.dim_axes(0) == ()


def test_annotation_errors_are_clear():
    with pytest.raises(ShardingError, match="unknown mesh axis 'nope'"):
        MESH.sharding("nope")
    with pytest.raises(ShardingError, match="more than once"):
        MESH.sharding("data", "data")
    with pytest.raises(ShardingError, match="3 entries"):
        spmd.jit(lambda x: spmd.shard(x, sh("data", None, None)) + 1).lower(f32(4, 4))


# -- properties ------------------------------------------------------------------------------
MESHES = [spmd.Mesh((2,), ("x",)), spmd.Mesh((4,), ("x",)), spmd.Mesh((2, 2), ("a", "b"))]


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2 ** 31 - 1))
def test_random_programs_terminate_keep_annotations_and_are_deterministic(seed):
    rng = np.random.default_rng(seed)
    mesh = MESHES[seed % len(MESHES)]
    g, _ = random_program(rng, "float64", (4, 8, 6), int(rng.integers(5, 31)))
    ins = [random_sharding(rng, mesh, v, p_partial=0) if rng.random() < 0.5 else None for v in g.inputs]
    outs = [random_sharding(rng, mesh, v, p_partial=0) if rng.random() < 0.3 else None for v in g.outputs]
    for v in g.values():
        v.sharding = None
    a = propagate(g, mesh, ins, outs)
    b = propagate(g, mesh, ins, outs)
    for v, s in zip(a.inputs, ins):
        if s is not None:
            assert v.sharding == s.for_rank(v.ndim)
    for v, s in zip(a.outputs, outs):
        if s is not None and v.producer is not None:
            assert v.sharding == s.for_rank(v.ndim)
    for va, vb in zip(a.values(), b.values()):
        assert va.sharding is not None and len(va.sharding.spec) == va.ndim
        assert va.sharding == vb.sharding
