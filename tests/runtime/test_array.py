"""spmd.Array and spmd.device_put on the local runtime.

Shard contents are checked against an independent statement of the layout (ceil-sized
blocks, the last ones short or empty, zeros as padding), and the assembled global value
against the input, for even and uneven shapes on 1-d and 2-d meshes and every spec:
None, one axis, and tuples of axes in either order.
"""
from __future__ import annotations

import copy
import itertools

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import spmd
from spmd.errors import ShardingError
from spmd.runtime.array import split_buffers
from spmd.transports.local.local_runtime import LocalRuntime
from spmd.sharding import Mesh

MESHES = [Mesh((2,), ("x",)), Mesh((4,), ("x",)), Mesh((2, 2), ("x", "y")), Mesh((2, 3), ("x", "y")),
          Mesh((2, 2), ("x", "y"), devices=[[2, 0], [3, 1]])]


def entries(mesh):
    out = [None] + list(mesh.axis_names)
    out += [tuple(p) for r in range(2, mesh.ndim + 1) for p in itertools.permutations(mesh.axis_names, r)]
    return out


def specs(mesh, ndim):
    """Every spec of rank ndim that names each mesh axis at most once."""
    for combo in itertools.product(entries(mesh), repeat=ndim):
        used = [a for e in combo if e for a in ((e,) if isinstance(e, str) else e)]
        if len(used) == len(set(used)):
            yield combo


def expected_shard(x, mesh, spec, device):
    """Independent of Sharding.shard_box: the padded block `device` must hold."""
    where = {int(dev): c for c, dev in np.ndenumerate(mesh.devices)}
    coords = dict(zip(mesh.axis_names, where[device]))
    block, pads = [], []
    for n, e in zip(x.shape, spec):
        axes = () if e is None else (e,) if isinstance(e, str) else e
        k, i = 1, 0
        for a in axes:
            k *= mesh.axis_size(a)
            i = i * mesh.axis_size(a) + coords[a]
        c = -(-n // k)
        lo, hi = min(i * c, n), min((i + 1) * c, n)
        block.append(slice(lo, hi))
        pads.append((0, c - (hi - lo)))
    return np.pad(x[tuple(block)], pads) if pads else x.copy()


@pytest.mark.parametrize("mesh", MESHES, ids=lambda m: "x".join(map(str, m.shape)) + ("p" if not m._default_devices else ""))
@settings(max_examples=20, deadline=None)
@given(data=st.data())
def test_device_put_round_trip(mesh, data):
    ndim = data.draw(st.integers(0, 3), "ndim")
    shape = tuple(data.draw(st.integers(0, 7), f"n{k}") for k in range(ndim))
    spec = data.draw(st.sampled_from(list(specs(mesh, ndim))), "spec")
    dtype = data.draw(st.sampled_from(["float32", "float64", "int32", "int64", "bool"]), "dtype")
    rng = np.random.default_rng(data.draw(st.integers(0, 1000), "seed"))
    x = (rng.standard_normal(shape) * 10).astype(dtype) if dtype != "bool" else rng.random(shape) < 0.5
    sh = mesh.sharding(*spec)
    a = spmd.device_put(x, sh)
    assert (a.shape, a.dtype, a.ndim, a.size, a.sharding) == (x.shape, x.dtype, x.ndim, x.size, sh)
    got = a.numpy()
    assert got.dtype == x.dtype and np.array_equal(got, x)
    assert np.array_equal(np.asarray(a), x)
    # into a given array (a written numpy argument's new value: numpy's layout, any strides)
    into = np.zeros(shape[::-1], x.dtype).T if ndim else np.zeros((), x.dtype)
    assert a.numpy(out=into) is into and np.array_equal(into, x)
    shards = {s.device: s for s in a.shards}
    assert sorted(shards) == list(range(mesh.size))
    for d in range(mesh.size):
        want = expected_shard(x, mesh, spec, d)
        h = a._handles[d]
        assert h.shape == a.local_shape and np.array_equal(h, want), (d, spec)
        assert np.array_equal(x[shards[d].index], shards[d].data)


def test_numpy_into_a_given_array_copies_each_shard_once_and_nothing_else():
    """Array.numpy(out=): each shard goes straight into its place in `out` (jit writes a
    numpy argument's new value back so): no global array is made between, and an `out`
    of another shape is refused."""
    import tracemalloc
    mesh = Mesh((2, 2), ("x", "y"))
    x = np.random.default_rng(0).standard_normal((301, 257))
    for spec in (("x", "y"), ("y", None), (None, None), (("x", "y"), None)):
        a = spmd.device_put(x, mesh.sharding(*spec))
        out = np.zeros_like(x)
        tracemalloc.start()
        a.numpy(out=out)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert np.array_equal(out, x), spec
        assert peak < x.nbytes // 8, (spec, peak)
    with pytest.raises(ValueError, match=r"out has shape \(257, 301\), the array \(301, 257\)"):
        a.numpy(out=np.zeros((257, 301)))


def test_device_put_split_cached_per_sharding_shape_and_devices():
    """device_put works a split out once per (sharding, shape, devices): a put of the same
    shape on a mesh of other device order, or of another shape, is split its own way."""
    from spmd.runtime import array as array_mod
    plain, perm = Mesh((2, 2), ("x", "y")), Mesh((2, 2), ("x", "y"), devices=[[2, 0], [3, 1]])
    array_mod._SPLITS.clear()
    for _ in range(2):                                  # the second round hits the cache
        for mesh in (plain, perm):
            for shape in ((5, 3), (4, 4)):
                x = np.arange(np.prod(shape), dtype=np.float64).reshape(shape)
                a = spmd.device_put(x, mesh.sharding("x", "y"))
                for d in range(4):
                    assert np.array_equal(a._handles[d], expected_shard(x, mesh, ("x", "y"), d)), (mesh, shape, d)
                assert np.array_equal(a.numpy(), x)
    assert len(array_mod._SPLITS) == 4                               # 2 meshes x 2 shapes, each split once
    array_mod._SPLITS.update({(i,): None for i in range(2000)})
    spmd.device_put(np.zeros(3), plain.sharding("x"))   # a full cache starts over, not grows
    assert len(array_mod._SPLITS) == 1


def test_uneven_shards_are_zero_padded_and_may_be_empty():
    mesh = Mesh((4,), ("x",))
    a = spmd.device_put(np.arange(1, 6, dtype=np.int32), mesh.sharding("x"))   # 5 over 4: 2,2,1,0
    assert a.local_shape == (2,)
    assert [a._handles[d].tolist() for d in range(4)] == [[1, 2], [3, 4], [5, 0], [0, 0]]
    assert [s.data.tolist() for s in a.shards] == [[1, 2], [3, 4], [5], []]
    assert a.numpy().tolist() == [1, 2, 3, 4, 5]


def test_replicas_share_a_buffer_and_shards_are_read_only():
    mesh = Mesh((2, 2), ("x", "y"))
    x = np.arange(8.0).reshape(4, 2)
    a = spmd.device_put(x, mesh.sharding("x", None))
    assert a._handles[0] is a._handles[1] and a._handles[2] is a._handles[3]
    assert a._handles[0] is not a._handles[2]
    x[...] = -1                                    # the caller's array is not kept
    assert np.array_equal(a.numpy(), np.arange(8.0).reshape(4, 2))
    with pytest.raises(ValueError):
        a.local[0, 0] = 5
    assert np.array_equal(a.local, [[0, 1], [2, 3]])


def test_a_jitted_calls_numpy_argument_is_copied_for_a_runtime_that_keeps_its_puts():
    """A jitted call hands a numpy argument to the run as the caller's memory only on a
    device whose put sends the bytes away (Runtime.put_sends: a Ray actor); the local
    runtime keeps what it is given, so it gets copies (a shard's replicas one), which
    the caller's later writes do not reach."""
    mesh = Mesh((2, 2), ("x", "y"))
    rt = LocalRuntime(4)
    x = np.arange(8.0).reshape(4, 2)
    bufs = split_buffers(x, mesh.sharding("x", None), rt, sent=True)
    assert not any(np.shares_memory(b, x) for b in bufs.values())
    assert bufs[0] is bufs[1] and bufs[2] is bufs[3] and bufs[0] is not bufs[2]
    x[...] = -1
    assert bufs[0].tolist() == [[0, 1], [2, 3]] and bufs[2].tolist() == [[4, 5], [6, 7]]


def test_reshard_through_device_put():
    mesh = Mesh((2, 2), ("x", "y"))
    x = np.arange(35.0).reshape(5, 7)
    a = spmd.device_put(x, mesh.sharding("x", "y"))
    assert spmd.device_put(a, mesh.sharding("x", "y")) is a
    r = spmd.device_put(x, mesh.sharding("x", None))
    assert spmd.device_put(r, mesh.sharding("x")) is r         # the spec is padded with None
    for spec in [("y", "x"), (None, ("x", "y")), (None, None)]:
        b = spmd.device_put(a, mesh.sharding(*spec))
        assert b.sharding.spec == spec and np.array_equal(b.numpy(), x)
    other = Mesh((4,), ("z",))
    c = spmd.device_put(a, other.sharding("z"))
    assert c.mesh == other and np.array_equal(c.numpy(), x)


def test_python_protocols():
    mesh = Mesh((2,), ("x",))
    a = spmd.device_put(np.array([1.5, -2.0, 3.0], np.float32), mesh.sharding("x"))
    s = spmd.device_put(np.float32(2.5), mesh.sharding())
    i = spmd.device_put(np.int64(7), mesh.sharding())
    assert float(s) == 2.5 and int(i) == 7 and [10, 20, 30, 40, 50, 60, 70, 80][i] == 80
    assert f"{s:.3f}" == "2.500" and str(s) == "2.5"
    assert len(a) == 3 and list(a) == [1.5, -2.0, 3.0] and a[1] == -2.0
    with pytest.raises(TypeError):
        len(s)
    with pytest.raises(TypeError):
        float(a)
    assert bool(s) and not bool(spmd.device_put(np.zeros(()), mesh.sharding()))
    assert str(a) == str(np.array([1.5, -2.0, 3.0], np.float32))
    assert repr(a) == "Array([ 1.5, -2. ,  3. ], dtype=float32, sharding={x})"
    big = spmd.device_put(np.arange(6.0).reshape(2, 3), mesh.sharding(None, "x"))
    assert repr(big) == "Array([[0., 1., 2.],\n       [3., 4., 5.]], sharding={_, x})"
    # operators run eagerly, sharded (spmd/eager/), and return spmd.Arrays
    x = np.array([1.5, -2.0, 3.0], np.float32)
    for got, want in [(a + 1, x + 1), (1 - a, 1 - x), (a * a, x * x), (a / 2, x / 2), (2 ** a, 2 ** x),
                      (-a, -x), (abs(a), abs(x)), (a @ a, x @ x), (a > 0, x > 0), (a == x, x == x),
                      (np.ones(3, np.float32) + a, 1 + x), (a.sum(), x.sum()), (a.T, x)]:
        assert type(got) is spmd.Array and got.dtype == want.dtype and np.array_equal(got.numpy(), want)
    assert np.sin(a).dtype == np.float32          # numpy functions take it as an array
    assert a.tolist() == x.tolist() and a.astype(np.int32).tolist() == [1, -2, 3]
    with pytest.raises(AttributeError):
        a.no_such_attribute
    b = copy.deepcopy(a)
    assert isinstance(b, spmd.Array) and b.sharding == a.sharding and np.array_equal(b.numpy(), x)


def test_device_put_errors():
    mesh = Mesh((2,), ("x",))
    with pytest.raises(ShardingError, match="takes a Sharding"):
        spmd.device_put(np.ones(2), ("x",))
    with pytest.raises(ShardingError, match="partial"):
        spmd.device_put(np.ones(2), mesh.sharding(None, partial="x"))
    with pytest.raises(ShardingError, match="has 2 entries but the array of shape \\[3\\] has rank 1"):
        spmd.device_put(np.ones(3), mesh.sharding("x", None))


def test_device_put_on_a_given_runtime_with_more_devices_than_the_default():
    rt = LocalRuntime(num_devices=2)
    mesh = Mesh((8,), ("x",))                       # local runs any mesh size
    a = spmd.device_put(np.arange(10), mesh.sharding("x"), runtime=rt)
    assert len(a.shards) == 8 and a._runtime is rt and np.array_equal(a.numpy(), np.arange(10))
