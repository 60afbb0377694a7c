"""Propagation golden tests (issue 3): for the canonical parallelism patterns, the
inferred sharding of EVERY value of the program is asserted (each value is classified
by its role; a value no rule covers fails the test), plus properties over random
programs and annotations."""
import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import spmd
from partition_util import random_program, random_sharding
from paths import TESTS
from spmd.errors import ShardingError
from spmd.ir import Graph
from spmd.ir.ops.names import TANH
from spmd.sharding.propagate import _State, propagate

MESH = spmd.Mesh((2, 2), ("data", "model"))
# lowering runs the partitioner too; its notes on costly reshards are not what is tested here
pytestmark = pytest.mark.filterwarnings("ignore::spmd.sharding.reshard.ReshardWarning")


def sh(*spec, partial=()):
    return MESH.sharding(*spec, partial=partial)


REP2 = sh(None, None)


def prop(f, args, in_shardings, out_shardings=None, **kw):
    low = spmd.jit(f, in_shardings=in_shardings, out_shardings=out_shardings, **kw).lower(*args)
    return low.stages["propagated"]


def ops(g, name):
    return [op for op in g.ops if op.name == name]


def f32(*shape):
    return spmd.ShapeDtype(shape, "float32")


def check_every_value(g, expect):
    """expect(v) -> the Sharding v must have; every value of g is checked."""
    bad = []
    for v in g.values():
        want = expect(v)
        what = v.producer.name if v.producer is not None else "input"
        if want is None:
            bad.append(f"unclassified: {what} {list(v.shape)} {v.sharding.text()}")
        elif v.sharding != want.for_rank(v.ndim):
            bad.append(f"{what} {list(v.shape)}: got {v.sharding.text()}, want {want.text()}")
    assert not bad, "\n".join(bad) + "\n" + str(g)


def producer(v):
    return v.producer.name if v.producer is not None else None


def mlp_loss(p, x, y):
    h = np.maximum(x @ p["w1"], 0)
    return np.mean((h @ p["w2"] - y) ** 2)


def train_step(p, x, y):
    loss, g = spmd.value_and_grad(mlp_loss)(p, x, y)
    return loss, {k: p[k] - 0.1 * g[k] for k in p}


P = {"w1": f32(16, 32), "w2": f32(32, 8)}
B = 64
WEIGHT_SHAPES = {(16, 32), (32, 16), (32, 8), (8, 32)}


def test_data_parallel():
    """Batch split on data: activations batch-split, weights (and their updates)
    replicated, weight gradients and the loss partial over data until used."""
    g = prop(train_step, (P, f32(B, 16), f32(B, 8)), ({"w1": REP2, "w2": REP2}, sh("data", None), sh("data", None)))

    def expect(v):
        if v.ndim == 2 and v.shape[0] == B:
            return sh("data", None)                       # activations and their cotangents
        if v.shape in WEIGHT_SHAPES:
            return sh(None, None, partial="data") if producer(v) == "dot_general" else REP2
        if v.shape == ():
            return sh(partial="data") if producer(v) == "reduce" else sh()
    check_every_value(g, expect)
    assert len([v for v in g.values() if v.sharding.partial]) == 3      # loss sum, d w1, d w2
    assert all(not v.sharding.partial for v in g.outputs)


def test_megatron_mlp():
    """w1 columns and w2 rows on model: the hidden layer is split on model, the output
    of the second matmul is a pending sum over model; the batch is whole."""
    g = prop(train_step, (P, f32(B, 16), f32(B, 8)), ({"w1": sh(None, "model"), "w2": sh("model", None)},
                                                       REP2, REP2))

    def expect(v):
        if v.shape == (B, 32):
            return sh(None, "model")                      # hidden activations, their cotangents, masks
        if v.shape == (B, 8):
            return sh(None, None, partial="model") if producer(v) == "dot_general" else REP2
        if v.shape == (B, 16) or v.shape == ():
            return sh()
        if v.shape in ((16, 32), (8, 32)):
            return sh(None, "model")                      # w1 and its update; d w2 (transposed)
        if v.shape in ((32, 8), (32, 16)):
            return sh("model", None)                      # w2 and its update; d w1 (transposed)
    check_every_value(g, expect)
    fwd = [op for op in ops(g, "dot_general") if op.result.shape == (B, 8)]
    assert len(fwd) == 1 and fwd[0].result.sharding.partial == ("model",)


def test_data_and_model_on_2x2():
    """Both at once: batch on data, hidden on model."""
    g = prop(train_step, (P, f32(B, 16), f32(B, 8)),
             ({"w1": sh(None, "model"), "w2": sh("model", None)}, sh("data", None), sh("data", None)))

    def expect(v):
        dot = producer(v) == "dot_general"
        if v.shape == (B, 32):
            return sh("data", "model")
        if v.shape == (B, 8):
            return sh("data", None, partial="model") if dot else sh("data", None)
        if v.shape == (B, 16):
            return sh("data", None)
        if v.shape in ((16, 32), (8, 32)):
            return sh(None, "model", partial="data") if dot else sh(None, "model")
        if v.shape in ((32, 8), (32, 16)):
            return sh("model", None, partial="data") if dot else sh("model", None)
        if v.shape == ():
            return sh(partial="data") if producer(v) == "reduce" else sh()
    check_every_value(g, expect)


def layernorm(x, gamma, beta):
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + 1e-5) * gamma + beta


def test_layernorm_over_a_sharded_feature_dim():
    """Rows on data, features on model: the feature sums are partial over model, the
    per-row statistics are split on data only, gamma and beta follow the features."""
    g = prop(layernorm, (f32(8, 32), f32(32), f32(32)), (sh("data", "model"), None, None))

    def expect(v):
        if v.shape == (8, 32):
            return sh("data", "model")
        if v.shape == (8,):
            return sh("data", partial="model")            # the sums over features
        if v.shape == (8, 1):
            return sh("data", None)
        if v.shape == (32,):
            return sh("model")
        if v.shape == ():
            return sh()
    check_every_value(g, expect)
    assert len(ops(g, "reduce")) == 2


def merge_and_split(x):
    n, s, d = x.shape
    y = x.reshape(n * s, d) * 2.0            # merge (batch, seq) while the batch is split
    return y.reshape(n, s, d) + 1.0          # and split it back


@pytest.mark.parametrize("n,spec,merged", [
    (8, ("data", None, None), ("data", None)),
    (8, (("data", "model"), None, None), (("data", "model"), None)),
    # seq split too: the merged dim cannot hold both contiguously, it keeps the batch split
    (8, ("data", "model", None), ("data", None)),
    # 6 rows over 4 devices are uneven: merged, only a split dividing the batch stays contiguous
    (6, (("data", "model"), None, None), ("data", None)),
])
def test_reshape_merges_a_sharded_batch_with_the_sequence_and_back(n, spec, merged):
    g = prop(merge_and_split, (f32(n, 4, 16),), (sh(*spec),))
    back = (merged[0], None, None)

    def expect(v):
        if v.ndim == 3:
            return sh(*spec) if v.producer is None else sh(*back)
        if v.ndim == 2:
            return sh(*merged)
        if v.shape == ():
            return sh()
    check_every_value(g, expect)


def test_reshape_propagates_backwards_from_the_merged_value():
    g = prop(lambda x: spmd.shard(x.reshape(32, 16), sh(("data", "model"), None)) * 2.0, (f32(8, 4, 16),), (None,))
    check_every_value(g, lambda v: {3: sh(("data", "model"), None, None), 2: sh(("data", "model"), None),
                                    0: sh()}[v.ndim])


def test_transpose_chain():
    g = prop(lambda x: np.transpose((x.T * 2.0).T + 1.0, (1, 0)).reshape(6, 8) - 1.0, (f32(8, 6),),
             (sh("data", "model"),))

    def expect(v):
        if v.shape == (8, 6):
            return sh("data", "model")
        if v.shape == (6, 8):
            return sh("model", "data")
        if v.shape == ():
            return sh()
    check_every_value(g, expect)
    assert len(ops(g, "transpose")) == 3


@pytest.mark.parametrize("big", ["lhs", "rhs"])
def test_conflicting_annotations_on_a_matmul_resolved_by_cost(big):
    """x's rows and y's columns both want `data` (different factors of the dot, one
    result): the split whose loss would move more bytes is kept, the smaller operand
    is the one resharded. Both annotations stay as they are."""
    m, k, n = (4096, 8, 8) if big == "lhs" else (8, 8, 4096)
    f = lambda x, y: spmd.shard(x, sh("data", None)) @ spmd.shard(y, sh(None, "data"))  # noqa: E731
    g = prop(f, (f32(m, k), f32(k, n)), (None, None))
    out = sh("data", None) if big == "lhs" else sh(None, "data")

    def expect(v):
        if v.shape == (m, k):
            return sh("data", None)
        if v.shape == (k, n):
            return sh(None, "data")
        if v.shape == (m, n):
            return out
    check_every_value(g, expect)
    assert prop(f, (f32(m, k), f32(k, n)), (None, None)).outputs[0].sharding == out     # deterministic


def test_conflicting_annotations_on_an_elementwise_op_resolved_by_cost():
    """y is split 2 ways, x 4 ways over (data, model): both want `data`, on different
    dims. Undoing x's split would move 3/4 of x to every device, undoing y's 1/2: x
    wins, whatever the operand order."""
    for f in (lambda x, y: x + y, lambda x, y: y + x):
        g = prop(f, (f32(64, 64), f32(64, 64)), (sh(("data", "model"), None), sh(None, "data")))
        assert g.outputs[0].sharding == sh(("data", "model"), None)
        assert [v.sharding for v in g.inputs] == [sh(("data", "model"), None), sh(None, "data")]


def test_a_split_grows_to_more_axes():
    """A dim split on data meets a value split on (data, model): it is refined to
    (data, model), not left as is (Shardy's longest compatible split)."""
    g = prop(lambda x, y: np.tanh(x) + y, (f32(16, 4), f32(16, 4)), (sh("data", None), sh(("data", "model"), None)))
    assert ops(g, "tanh")[0].result.sharding == sh(("data", "model"), None)
    assert g.inputs[0].sharding == sh("data", None)


def test_priority_pass_through_before_broadcast():
    """v (split on model) is broadcast along dim 1 and added to x (split on model along
    dim 1). Both want `model` on different dims of the sum; the add is settled before
    the broadcast, so the sum follows x and the small v is the one resharded."""
    g = prop(lambda v, x: v[:, None] + x, (f32(8), f32(8, 8)), (sh("model"), sh(None, "model")))

    def expect(v):
        if v.shape == (8,):
            return sh("model")
        if v.shape == (8, 1):
            return sh("model", None)
        if v.shape == (8, 8):
            return sh(None, "model")
    check_every_value(g, expect)
    # bias add after a matmul: the bias follows the activation it is added to
    g = prop(lambda x, w, b: x @ w + b, (f32(8, 16), f32(16, 32), f32(32)), (sh("data", None), sh(None, "model"), None))
    assert g.outputs[0].sharding == sh("data", "model") and g.inputs[2].sharding == sh("model")


def test_replicate_factor_is_never_split():
    """A reshape whose sides share no factor needs its operand whole on those dims:
    propagation never splits them, even when the result and another use are split."""
    def f(x):
        return spmd.shard(x.reshape(4, 3) * 3.0, sh("data", None)), spmd.shard(x * 2.0, sh("data", None))
    g = prop(f, (f32(3, 4),), (None,))
    assert g.inputs[0].sharding == sh(None, None)
    assert ops(g, "multiply")[1].result.sharding == sh("data", None)
    # the result side holds no factor: it may be split (a local slice after the reshape)
    assert ops(g, "reshape")[0].result.sharding == sh("data", None)


def test_gather_does_not_pull_a_split_onto_the_table():
    g = prop(lambda t, i: t[i] * 2.0, (f32(16, 8), spmd.ShapeDtype((4,), "int64")), (None, None),
             out_shardings=sh("data", None))
    gather = ops(g, "gather")[0]
    assert gather.operands[0].sharding == sh(None, None) and gather.operands[1].sharding == sh("data")


def test_out_shardings_on_an_input_returned_as_is():
    """An output that is an (annotated) input still gets its own out_sharding: a
    sharding_constraint makes it a value of its own."""
    g = prop(lambda x: (x, x), (f32(8, 4),), (sh("data", None),), out_shardings=(sh(None, "model"), None))
    assert [v.sharding for v in g.outputs] == [sh(None, "model"), sh("data", None)]
    assert [op.name for op in g.ops] == ["sharding_constraint"]


def test_annotation_errors_are_clear():
    with pytest.raises(ShardingError, match="unknown mesh axis 'nope'"):
        MESH.sharding("nope")
    with pytest.raises(ShardingError, match="more than once"):
        MESH.sharding("data", "data")
    with pytest.raises(ShardingError, match="3 entries"):
        spmd.jit(lambda x: spmd.shard(x, sh("data", None, None)) + 1).lower(f32(4, 4))
    with pytest.raises(ShardingError, match=r"in_shardings for x: .* 3 entries .* shape \[4, 4\]"):
        spmd.jit(lambda x: x + 1, in_shardings=sh("data", None, None)).lower(f32(4, 4))
    with pytest.raises(ShardingError, match=r"out_shardings\[0\].*3 entries"):
        spmd.jit(lambda x: x + 1, out_shardings=sh("data", None, None)).lower(f32(4, 4))


# -- properties ------------------------------------------------------------------------------
MESHES = [spmd.Mesh((2,), ("x",)), spmd.Mesh((4,), ("x",)), spmd.Mesh((2, 2), ("a", "b")),
          spmd.Mesh((2, 3), ("a", "b"))]


def random_case(seed):
    rng = np.random.default_rng(seed)
    mesh = MESHES[seed % len(MESHES)]

    def constrain(v):
        return random_sharding(rng, mesh, v, p_partial=0).spec if rng.random() < 0.15 else None

    dims = (4, 8, 6) if seed % 2 else (3, 5, 8)
    g, _ = random_program(rng, "float64", dims, int(rng.integers(5, 31)), constrain)
    ins = [random_sharding(rng, mesh, v, p_partial=0) if rng.random() < 0.5 else None for v in g.inputs]
    outs = [random_sharding(rng, mesh, v, p_partial=0) if rng.random() < 0.3 else None for v in g.outputs]
    return g, mesh, ins, outs


def unsettled(g):
    """What one more propagation step would still change (the fixpoint check): a split
    propagation could add anywhere is a split it left out."""
    st = _State(g.mesh)
    for v in g.values():
        st.dims[v] = [v.sharding.dim_axes(d) for d in range(v.ndim)]
    for v in g.annotations:
        st.fixed[v] = v.sharding
    ops_ = [op for op in g.ops if op.opdef.factors is not None]
    for op in ops_:
        st.add_caps(op)
    return [op for op in ops_ if st.step(op)]


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2 ** 31 - 1))
def test_random_programs(seed):
    """Terminates; deterministic; every annotation kept; every value a Sharding of its
    rank on the mesh; pending sums only on contraction results; at a fixpoint."""
    g, mesh, ins, outs = random_case(seed)
    a = propagate(g, mesh, ins, outs)
    b = propagate(g, mesh, ins, outs)
    for va, vb in zip(a.values(), b.values()):
        assert va.sharding is not None and va.sharding.mesh == mesh and len(va.sharding.spec) == va.ndim
        assert va.sharding == vb.sharding
    for v, s in zip(a.inputs, ins):
        if s is not None:
            assert v.sharding == s.for_rank(v.ndim)
    for v, s in zip(a.outputs, outs):
        assert not v.sharding.partial
        if s is not None:
            assert v.sharding == s.for_rank(v.ndim)
    for op in a.ops:
        if op.name == "sharding_constraint":
            want = spmd.Sharding(mesh, op.attrs["spec"], op.attrs["partial"]).for_rank(op.result.ndim)
            assert op.result.sharding == want
        elif op.result.sharding.partial:
            # only ops whose split reduction leaves a pending reduction may be partial
            assert op.opdef.reduction_kind(op.attrs) is not None, op
    assert set(a.annotations) >= {op.result for op in a.ops if op.name == "sharding_constraint"}
    assert not unsettled(a)


def test_random_programs_fixed_seeds():
    for seed in range(12):
        g, mesh, ins, outs = random_case(seed)
        a = propagate(g, mesh, ins, outs)
        assert not unsettled(a) and all(v.sharding is not None for v in a.values())


SCRIPT = """
import sys
sys.path[:0] = {paths!r}
from test_propagate import random_case
from spmd.sharding.propagate import propagate
for seed in range(8):
    g, mesh, ins, outs = random_case(seed)
    print(propagate(g, mesh, ins, outs))
"""


def test_deterministic_across_processes():
    """Every rank of an MPI job propagates on its own: the result must not depend on
    the process (Python's string hashing is salted per process)."""
    paths = [TESTS, os.path.dirname(os.path.abspath(__file__))]
    outs = []
    for salt in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=salt)
        r = subprocess.run([sys.executable, "-c", SCRIPT.format(paths=paths)], env=env, capture_output=True,
                           text=True, timeout=120, check=True)
        outs.append(r.stdout)
    assert outs[0] == outs[1] and outs[0].count("func @") == 8


def test_propagate_leaves_its_input_graph_alone():
    g = Graph("g")
    x = g.add_input((8, 4), "float32")
    g.outputs = [g.emit(TANH, x)]
    out = propagate(g, MESH, [sh("data", None)], [None])
    assert all(v.sharding is None for v in g.values())
    assert out.outputs[0].sharding == sh("data", None)
