"""Mesh, Sharding, the annotations (spmd.shard, jit in/out_shardings) and the
communication cost model (issue 3)."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import spmd
from spmd.errors import ShardingError
from spmd.sharding.cost import reshard_bytes

MESH = spmd.Mesh((2, 2), ("data", "model"))


def f32(*shape):
    return spmd.ShapeDtype(shape, "float32")


# -- Mesh and Sharding ---------------------------------------------------------------------
def test_mesh_is_row_major_by_default_and_takes_devices():
    assert MESH.devices.tolist() == [[0, 1], [2, 3]] and MESH.size == 4
    assert MESH.group(3, ("data",)) == [1, 3] and MESH.group(3, ("model",)) == [2, 3]
    m = spmd.Mesh((2, 2), ("data", "model"), devices=[[3, 2], [1, 0]])
    assert m.group(0, ("model",)) == [1, 0] and m != MESH
    with pytest.raises(ShardingError, match="each of the ranks"):
        spmd.Mesh((2, 2), ("a", "b"), devices=[[0, 0], [1, 2]])
    with pytest.raises(ShardingError, match="names"):
        spmd.Mesh((2, 2), ("a",))


def test_sharding_text_equality_and_validation():
    s = MESH.sharding(("data", "model"), None, partial=())
    same = spmd.Sharding(MESH, (("data", "model"), None))
    assert s == same and hash(s) == hash(same)
    assert s.text() == "{(data,model), _}"
    p = MESH.sharding("data", None, partial="model")
    assert p.text() == "{data, _} partial(model)" and p != MESH.sharding("data", None)
    assert MESH.sharding(("data",), None) == MESH.sharding("data", None)      # a 1-tuple is the axis
    for bad, msg in [((("data", "nope"),), "unknown mesh axis 'nope'"), (("data", "data"), "more than once"),
                     ((5,), "must be None, an axis name")]:
        with pytest.raises(ShardingError, match=msg):
            MESH.sharding(*bad)
    with pytest.raises(ShardingError, match="more than once"):
        MESH.sharding("data", partial="data")
    with pytest.raises(ShardingError, match="3 entries but the value has rank 2"):
        MESH.sharding("data", None, None).for_rank(2)


SPECS = st.lists(st.sampled_from([None, "data", "model", ("data", "model"), ("model", "data")]), max_size=3)


@settings(max_examples=60, deadline=None)
@given(SPECS, st.sampled_from([(), ("data",), ("model",)]))
def test_sharding_text_round_trips(spec, partial):
    used = [a for e in spec if e for a in ((e,) if isinstance(e, str) else e)] + list(partial)
    if len(used) != len(set(used)):
        with pytest.raises(ShardingError):
            spmd.Sharding(MESH, spec, partial)
        return
    s = spmd.Sharding(MESH, spec, partial)
    assert spmd.Sharding.from_text(s.text(), MESH) == s


def test_shard_boxes_cover_an_uneven_array_once():
    s = MESH.sharding(("data", "model"), None)
    boxes = [s.shard_box((10, 3), d) for d in range(4)]
    assert s.local_shape((10, 3)) == (3, 3)
    assert [b[0] for b in boxes] == [(0, 3), (3, 6), (6, 9), (9, 10)]


# -- spmd.shard ------------------------------------------------------------------------------
def test_shard_records_a_constraint_with_plain_attributes():
    low = spmd.jit(lambda x: spmd.shard(np.tanh(x), MESH.sharding(None, ("data", "model"))) * 2).lower(f32(4, 8))
    g = low.stages["traced"]
    (c,) = [op for op in g.ops if op.name == "sharding_constraint"]
    assert c.attrs == {"spec": (None, ("data", "model")), "partial": ()} and g.mesh == MESH
    assert c.loc and c.loc.startswith("test_sharding.py:")
    # the annotation is kept, and propagates to everything elementwise around it
    pg = low.stages["propagated"]
    assert all(v.sharding == MESH.sharding(None, ("data", "model")) for v in pg.values() if v.ndim == 2)


def test_shard_with_a_bare_spec_needs_the_jit_mesh():
    f = lambda x: spmd.shard(x, ("data",)) + spmd.shard(x, "data")  # noqa: E731
    g = spmd.jit(f, mesh=MESH).lower(f32(4, 8)).stages["propagated"]
    assert [op.attrs["spec"] for op in g.ops if op.name == "sharding_constraint"] == [("data",), ("data",)]
    assert g.outputs[0].sharding == MESH.sharding("data", None)
    with pytest.raises(ShardingError, match=r"bare spec .* needs spmd.jit\(..., mesh=...\)"):
        spmd.jit(f).lower(f32(4, 8))
    with pytest.raises(ShardingError, match="unknown mesh axis 'rows'"):
        spmd.jit(lambda x: spmd.shard(x, ("rows",)), mesh=MESH).lower(f32(4, 8))


def test_shard_on_two_meshes_is_an_error():
    other = spmd.Mesh((4,), ("data",))
    f = lambda x: spmd.shard(spmd.shard(x, MESH.sharding("data")), other.sharding("data"))  # noqa: E731
    with pytest.raises(ShardingError, match="one jit function uses one mesh"):
        spmd.jit(f).lower(f32(4, 8))


def test_shard_cotangent_gets_the_same_constraint():
    def loss(w, x):
        return (spmd.shard(x @ w, MESH.sharding("data", None)) ** 2).sum()
    g = spmd.jit(spmd.grad(loss)).lower(f32(3, 2), f32(4, 3)).stages["traced"]
    cons = [op for op in g.ops if op.name == "sharding_constraint"]
    assert len(cons) == 2 and all(op.attrs["spec"] == ("data", None) for op in cons)


def test_shard_outside_jit_places_the_array():
    x = np.arange(12.0).reshape(4, 3)
    a = spmd.shard(x, MESH.sharding("data"))
    assert a.sharding == MESH.sharding("data", None) and np.array_equal(a.numpy(), x)


def test_shard_is_identity_in_value():
    f = spmd.jit(lambda x: spmd.shard(x * 2, MESH.sharding("model", "data")) + 1)
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    np.testing.assert_array_equal(f(x).numpy(), x * 2 + 1)


# -- jit(in_shardings=, out_shardings=) -------------------------------------------------------
def ins_of(low):
    return [v.sharding for v in low.stages["propagated"].inputs]


def test_in_shardings_are_pytree_prefixes_with_none_to_infer():
    p = {"a": f32(4, 8), "b": f32(8, 8)}
    f = spmd.jit(lambda p, x: (x @ p["a"]) @ p["b"], in_shardings=(MESH.sharding(None, "model"), None))
    low = f.lower(p, f32(2, 4))
    # one sharding stands for the whole dict; x is inferred (nothing splits it: replicated)
    assert ins_of(low) == [MESH.sharding(None, "model")] * 2 + [MESH.sharding(None, None)]
    low = spmd.jit(lambda p, x: x @ p["a"], in_shardings=({"a": None, "b": MESH.sharding("data")}, ("data", None)),
                   mesh=MESH).lower(p, f32(2, 4))
    assert ins_of(low) == [MESH.sharding(None, None)] + [MESH.sharding("data", None)] * 2
    assert low.out_shardings == [MESH.sharding("data", None)]


def test_one_argument_without_the_outer_tuple():
    for spec in (MESH.sharding("data", None), ("data", None), (("data", "model"), None)):
        low = spmd.jit(lambda x: x + 1, in_shardings=spec, mesh=MESH).lower(f32(8, 4))
        want = spec if isinstance(spec, spmd.Sharding) else MESH.sharding(*spec)
        assert ins_of(low) == [want]


def test_in_sharding_errors_name_the_argument():
    with pytest.raises(ShardingError, match="in_shardings has 1 entries for 2 arguments"):
        spmd.jit(lambda x, y: x + y, in_shardings=(None,)).lower(f32(4), f32(4))
    with pytest.raises(ShardingError, match=r"3 entries for 2 arguments \(the arguments not in static_argnums=\(1,\)"):
        spmd.jit(lambda x, k, y: x + y * k, in_shardings=(None, None, None), static_argnums=(1,)).lower(f32(4), 2, f32(4))
    with pytest.raises(ShardingError, match=r"in_shardings: sharding tree .* does not match"):
        spmd.jit(lambda p: p["a"], in_shardings=({"b": None},)).lower({"a": f32(4)})
    with pytest.raises(ShardingError, match=r"in_shardings for p\['a'\]: .* 2 entries .* shape \[4\]"):
        spmd.jit(lambda p: p["a"], in_shardings=({"a": MESH.sharding("data", None)},)).lower({"a": f32(4)})
    with pytest.raises(ShardingError, match="bare spec"):
        spmd.jit(lambda x: x, in_shardings=("data", None)).lower(f32(4, 4))
    with pytest.raises(ShardingError, match="two different meshes"):
        spmd.jit(lambda x, y: x + y, in_shardings=(MESH.sharding("data"), spmd.Mesh((4,), ("data",)).sharding("data"))
                 ).lower(f32(4), f32(4))


def test_out_shardings_pin_the_results():
    f = spmd.jit(lambda x: (np.tanh(x), x.sum(axis=0)), in_shardings=MESH.sharding("data", None),
                 out_shardings=(MESH.sharding(None, "model"), MESH.sharding("model")))
    x = np.arange(32, dtype=np.float32).reshape(8, 4)
    low = f.lower(x)
    assert low.out_shardings == [MESH.sharding(None, "model"), MESH.sharding("model")]
    a, b = f(x)
    assert a.sharding == MESH.sharding(None, "model")
    np.testing.assert_allclose(a.numpy(), np.tanh(x), rtol=1e-6)
    np.testing.assert_allclose(b.numpy(), x.sum(axis=0))


def test_explain_names_the_argument_an_annotation_came_from():
    args = (lambda params, x: x @ params["w"], {"w": f32(4, 8)}, f32(6, 4))
    shardings = ({"w": MESH.sharding(None, "model")}, MESH.sharding("data", None))
    text = spmd.explain(*args, in_shardings=shardings)
    notes = text.split("annotations (2):\n")[1].splitlines()
    assert notes[0].split()[:3] == ["in_shardings", "for", "params['w']"]
    assert notes[1].split()[:3] == ["in_shardings", "for", "x"]
    text = spmd.explain(*args, in_shardings=shardings, verbose=True)
    assert "annotation: in_shardings for params['w']" in text
    assert "annotation: in_shardings for x" in text


# -- the cost model --------------------------------------------------------------------------
def S(*spec, partial=()):
    return MESH.sharding(*spec, partial=partial)


@pytest.mark.parametrize("src,dst,want", [
    (S("data", None), S("data", None), 0),                          # nothing to do
    (S(None, None), S("data", "model"), 0),                         # a local slice
    (S("data", None), S(None, None), 32 * 8 * 4 // 2 * 1),          # all_gather over 2: (G-1) x local
    (S(("data", "model"), None), S(None, None), 32 * 8 * 4 // 4 * 3),
    (S("data", None), S(None, "data"), 32 * 8 * 4 // 2 / 2),        # all_to_all: (G-1)/G x local
    (S(None, None, partial="data"), S(None, None), 2 * 32 * 8 * 4 / 2),   # all_reduce: 2(G-1)/G x local
    (S(None, None, partial="data"), S("data", None), 32 * 8 * 4 / 2),     # reduce_scatter: (G-1)/G x local
    (S("data", None), S("data", "model"), 0),                       # refine: a slice
    (S("data", "model"), S("model", "data"), 2 * (32 * 8 * 4 / 4) / 2),  # two axes move dims
])
def test_reshard_bytes(src, dst, want):
    assert reshard_bytes(src, dst, (32, 8), "float32") == pytest.approx(want)


def test_reshard_bytes_counts_padding_of_uneven_shards():
    # 5 rows over 2: shards of 3 (padded); a gather receives one padded shard
    assert reshard_bytes(S("data"), S(None), (5,), "float64") == 3 * 8


def test_cost_orders_the_moves():
    # slicing on model first halves what the gather over data then carries
    got = reshard_bytes(S("data", None), S(None, "model"), (32, 8), "float32")
    assert got == pytest.approx(32 * 8 * 4 / 4 * 1)
