"""What a jitted call does every time, made cheap for a training step's many leaves (an MPI
rank does all of it itself): the signature of plain spmd.Array leaves, the pytree's
shared leaf nodes, an argument placed with an equal Sharding taking the program's own,
outputs built from their Placement, the result-type check of a step run from Python."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import spmd
from spmd.backends.executor import checked
from spmd.errors import SpmdError
from spmd.frontend import functionalize as fz
from spmd.frontend.trace import leaf_aval
from spmd.jit.arguments import signature
from spmd.transports.local.local_runtime import LocalRuntime
from spmd.tree import LEAF, NONE, tree_flatten, tree_unflatten

RT = LocalRuntime()
MESH = spmd.Mesh((2,), ("x",))


def _put(x, spec=("x",)):
    return spmd.device_put(x, MESH.sharding(*spec), runtime=RT)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["float32", "int32", "float64", "bool"]),
                          st.lists(st.integers(1, 4), min_size=1, max_size=3)), min_size=1, max_size=5),
       st.booleans())
def test_plain_array_leaves_key_as_the_general_path_does(leaves, with_numpy):
    """The key of a tree of plain Arrays holds what leaf_aval and layout_key say of each
    (the fast path only skips their look-ups); a numpy leaf among them keys as before."""
    xs = [_put(np.zeros([2 * shape[0]] + shape[1:], dt)) for dt, shape in leaves]
    tree = {"p": {f"w{i}": x for i, x in enumerate(xs)}}
    if with_numpy:
        tree["n"] = np.arange(6, dtype=np.float32).reshape(2, 3)
    key, flat = signature((tree, 3.0), ())
    want_leaves, want_tree = tree_flatten([tree, 3.0])
    assert flat == want_leaves or all(a is b for a, b in zip(flat, want_leaves))
    assert key == (want_tree, tuple(leaf_aval(x) for x in want_leaves), (),
                   tuple(fz.layout_key(x) for x in want_leaves))
    # a different dtype or shape of one leaf is a different key
    other = dict(tree["p"], w0=_put(np.zeros((2, 5), np.int64)))
    assert signature(({**tree, "p": other}, 3.0), ())[0] != key


def test_tree_leaves_and_nones_share_one_node_and_round_trip():
    leaves, td = tree_flatten({"a": [1, None, (2, 3)], "b": np.ones(2)})
    a_node = td.children[0]
    assert a_node.children[0] is LEAF and a_node.children[1] is NONE
    assert a_node.children[2].children == (LEAF, LEAF)
    assert td == tree_flatten({"b": 0, "a": [5, None, (6, 7)]})[1]
    assert hash(td) == hash(tree_flatten({"a": [0, None, (0, 0)], "b": 0})[1])
    assert td != tree_flatten({"a": [1, 2, (2, 3)], "b": 0})[1]          # None is not a leaf
    back = tree_unflatten(td, leaves)
    assert back["a"][:2] == [1, None] and back["a"][2] == (2, 3) and back["b"] is leaves[-1]


def test_an_argument_with_an_equal_sharding_takes_the_programs_object():
    """device_put with the user's own Sharding object: equal to the program's, not the
    same; after a call the Array holds the program's (the next call sees it placed by
    identity), its values untouched."""
    own = MESH.sharding("x")
    x = spmd.device_put(np.arange(8, dtype=np.float32), own)       # (the runtime jit runs on)
    f = spmd.jit(lambda a: a * 2, in_shardings=(MESH.sharding("x"),))
    out = f(x)
    assert x.sharding == own
    assert x.sharding is out.sharding          # the program's object (outputs hold the input's)
    np.testing.assert_array_equal(x.numpy(), np.arange(8, dtype=np.float32))
    out2 = f(x)
    np.testing.assert_array_equal(out2.numpy(), 2 * np.arange(8, dtype=np.float32))


def test_outputs_have_python_int_shapes_and_numpy_dtypes():
    f = spmd.jit(lambda a, b: (a.sum(axis=0), (a * b).astype(np.int64)),
                 in_shardings=(MESH.sharding("x", None), MESH.sharding("x", None)))
    a = np.arange(12, dtype=np.float32).reshape(4, 3)
    s, p = f(a, a)
    for out, want in ((s, a.sum(axis=0)), (p, (a * a).astype(np.int64))):
        assert out.shape == want.shape and all(type(n) is int for n in out.shape)
        assert isinstance(out.dtype, np.dtype) and out.dtype == want.dtype
        np.testing.assert_array_equal(out.numpy(), want)


class _V:
    def __init__(self, shape, dtype):
        self.shape, self.dtype = shape, dtype


class _Op:
    name, loc = "test_op", "here"


@pytest.mark.parametrize("dtype", ["float32", "int64", "bool", "float16"])
def test_a_result_of_another_dtype_or_shape_is_an_internal_error(dtype):
    v = _V((2, 3), dtype)
    good = np.zeros((2, 3), dtype)
    assert checked(_Op, v, good) is good
    other = "float64" if dtype != "float64" else "float32"
    with pytest.raises(SpmdError, match=f"computed {other}\\[2, 3\\] but its shape rule says {dtype}"):
        checked(_Op, v, np.zeros((2, 3), other))
    with pytest.raises(SpmdError, match="shape rule"):
        checked(_Op, v, np.zeros((3, 2), dtype))
    # the same dtype in the other byte order is the same type by name
    swapped = good.astype(good.dtype.newbyteorder())
    assert checked(_Op, v, swapped) is swapped
