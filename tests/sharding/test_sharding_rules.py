"""Factor rules (issue 3): every op of the registry has one, every rule is well formed on
every OpInfo sample, and the rules mean what Shardy's do (reshape's compound factors,
dot_general's batch / contracting / free factors, reduce's reduction factors...)."""
import numpy as np
import pytest

import spmd
from opinfo import TABLE, is_per_device, ops_to_test, samples
from spmd.ir import REGISTRY, Graph
from spmd.ir.factors import reshape_rule
from spmd.ir.ops.names import DYNAMIC_SLICE, DYNAMIC_UPDATE_SLICE, GATHER, SHARDING_CONSTRAINT
from spmd.sharding.rules import check_rule, dim_cap, dim_to_factors, factors_to_dim, rule_of

MESH = spmd.Mesh((2, 2, 3), ("a", "b", "c"))


def test_every_op_has_a_factor_rule():
    missing = [n for n, op in REGISTRY.items() if not callable(op.factors) and not is_per_device(n)]
    assert not missing, f"ops without a sharding factor rule: {missing}"
    # collectives exist only in per-device programs (the partitioner makes them); the
    # global program never holds one, so they need no rule; nor do the other per-device
    # ops (a distributed selection's steps)
    assert all(REGISTRY[n].family == "collective" or is_per_device(n)
               for n, op in REGISTRY.items() if op.factors is None)
    assert callable(REGISTRY["sharding_constraint"].factors)


def one_op(name, operands, attrs):
    g = Graph(name)
    ins = [g.add_input(np.shape(x), np.asarray(x).dtype) for x in operands]
    out = g.emit(name, *ins, **attrs)
    return g.ops[-1] if not isinstance(out, tuple) else out[0].producer


@pytest.mark.parametrize("name", [n for n in ops_to_test() if n in TABLE])
def test_rule_is_well_formed_on_every_sample(name):
    rng = np.random.default_rng(0)
    for operands, attrs in samples(name, rng):
        op = one_op(name, operands, attrs)
        rule = rule_of(op)
        bad = check_rule(rule, [o.aval for o in op.operands], [r.aval for r in op.results])
        assert not bad, f"{name} {[list(np.shape(x)) for x in operands]} {attrs}: {bad}"


def test_sharding_constraint_rule_is_identity():
    g = Graph("c")
    x = g.add_input((4, 6), "float32")
    g.emit(SHARDING_CONSTRAINT, x, spec=("a", None), partial=())
    r = rule_of(g.ops[0])
    assert r.operands == r.results and not (r.reduction | r.replicate | r.permute)


def rule_for(name, shapes, **attrs):
    return rule_of(one_op(name, [np.zeros(s, np.float32) for s in shapes], attrs))


def test_elementwise_shares_every_factor():
    r = rule_for("add", [(4, 6), (4, 6)])
    assert r.operands[0] == r.operands[1] == r.results[0] and len(r.sizes) == 2


def test_dot_general_batch_contracting_free():
    r = rule_for("dot_general", [(3, 4, 5), (3, 5, 6)], lhs_batch=(0,), rhs_batch=(0,),
                 lhs_contract=(2,), rhs_contract=(1,))
    (b,), (m,), (k,) = r.operands[0]
    (b2,), (k2,), (n,) = r.operands[1]
    assert b == b2 and k == k2 and r.results[0] == ((b,), (m,), (n,))
    assert r.reduction == {k} and r.sizes[b] == 3 and r.sizes[k] == 5


def test_reduce_drops_a_reduction_factor():
    r = rule_for("reduce", [(4, 6, 8)], kind="sum", axes=(1,))
    (a,), (k,), (c,) = r.operands[0]
    assert r.results[0] == ((a,), (c,)) and r.reduction == {k}


def test_transpose_permutes_and_broadcast_maps_dims():
    r = rule_for("transpose", [(2, 3, 4)], permutation=(2, 0, 1))
    assert r.results[0] == (r.operands[0][2], r.operands[0][0], r.operands[0][1])
    r = rule_for("broadcast_in_dim", [(1, 5)], shape=(3, 4, 5), broadcast_dimensions=(1, 2))
    # the size-1 dim is broadcast: no factor to share; dim 2 shares its factor
    assert r.operands[0][0] == () and r.operands[0][1] == r.results[0][2]


def test_slice_pad_concat_keep_dims_and_mark_the_changed_ones_permute():
    r = rule_for("slice", [(8, 6)], start=(1, 0), limit=(8, 6), stride=(1, 1))
    assert r.operands[0] == r.results[0] and r.permute == set(r.operands[0][0])
    r = rule_for("concatenate", [(2, 6), (3, 6)], dimension=0)
    assert r.operands[0] == r.operands[1] == r.results[0] and r.permute == set(r.results[0][0])


def test_dynamic_slice_keeps_whole_dims_and_reads_sliced_ones_where_they_are():
    g = Graph("ds")
    x = g.add_input((8, 6), "float32")
    i = g.add_input((), "int32")
    g.emit(DYNAMIC_SLICE, x, i, i, slice_sizes=(2, 6))
    r = rule_of(g.ops[0])
    # the window dim has no factor on the result; on the operand it is a reduction (a
    # masked local read per device, summed), so a split never flows into it from the result
    assert r.results[0] == ((), r.operands[0][1]) and r.reduction == set(r.operands[0][0])
    g.emit(DYNAMIC_UPDATE_SLICE, x, g.add_input((2, 6), "float32"), i, i)
    r = rule_of(g.ops[1])
    assert r.operands[0] == r.results[0] and r.operands[1] == ((), r.results[0][1])


def test_gather_looks_up_the_indexed_dim_where_it_is():
    g = Graph("take")
    t = g.add_input((10, 4), "float32")
    i = g.add_input((3, 2), "int32")
    g.emit(GATHER, t, i, axis=0)
    r = rule_of(g.ops[0])
    assert r.reduction == set(r.operands[0][0]) and r.results[0] == r.operands[1] + (r.operands[0][1],)


@pytest.mark.parametrize("src,dst,want_in,want_out", [
    # Shardy's examples: merge (i,j,k) -> ((ij),k), split back, and a shared major part
    ((2, 4, 32), (8, 32), [[2], [4], [32]], [[2, 4], [32]]),
    ((8, 32), (2, 4, 32), [[2, 4], [32]], [[2], [4], [32]]),
    ((8, 4), (2, 16), [[2, 4], [4]], [[2], [4, 4]]),
    ((6,), (2, 3), [[2, 3]], [[2], [3]]),
    ((1, 6, 1), (6,), [[], [6], []], [[6]]),
])
def test_reshape_compound_factors(src, dst, want_in, want_out):
    r = reshape_rule(src, dst)
    sizes = lambda fmap: [[r.sizes[f] for f in fs] for fs in fmap]  # noqa: E731
    assert sizes(r.operands[0]) == want_in and sizes(r.results[0]) == want_out
    assert not r.replicate


def test_reshape_without_a_common_factor_is_replicate():
    r = reshape_rule((3, 4), (4, 3))
    assert r.replicate and r.results[0] == ((), ())
    assert dim_cap(r.operands[0][0], r) == 1
    # (6, 4) -> (4, 6): a common major factor of 2, then nothing in common
    r = reshape_rule((6, 4), (4, 6))
    assert [r.sizes[f] for f in r.operands[0][0]] == [2, 3] and dim_cap(r.operands[0][0], r) == 2


def test_projection_between_dims_and_factors():
    sizes = {"i": 2, "j": 4, "k": 6}
    # a merged dim (i, j) split over a then b: a splits i whole, b the major half of j
    assert dim_to_factors(("a", "b"), ("i", "j"), sizes, MESH) == [("i", ("a",)), ("j", ("b",))]
    assert factors_to_dim(("i", "j"), {"i": ("a",), "j": ("b",)}, sizes, MESH) == ("a", "b")
    # a minor factor only counts once the major one is split all the way
    assert factors_to_dim(("j", "i"), {"j": ("a",), "i": ("b",)}, sizes, MESH) == ("a",)
    # an uneven split stays on the last factor (the partitioner pads)
    assert dim_to_factors(("c", "a"), ("k",), sizes, MESH) == [("k", ("c", "a"))]
    # a split that does not fit the major factor is not expressible in these factors
    assert dim_to_factors(("c",), ("j", "k"), sizes, MESH) == [("j", ())]
