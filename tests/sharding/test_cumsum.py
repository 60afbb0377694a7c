"""np.cumsum / cumprod / ufunc.accumulate along a sharded axis: a local scan per shard
plus an exclusive scan of the shard totals -- one all_gather of one value per shard and
row, never a gather of the array -- equal to numpy on even and uneven shapes."""
import warnings

import numpy as np
import pytest

import spmd

MESH = spmd.Mesh((2, 2), ("a", "b"))


@pytest.fixture(autouse=True, scope="module")
def _devices():
    spmd.init(num_devices=4)


@pytest.mark.parametrize("shape", [(8, 6), (7, 9), (3, 5)])
@pytest.mark.parametrize("spec", [("a", None), (None, "b"), ("a", "b"), (("a", "b"), None), (None, ("b", "a"))])
@pytest.mark.parametrize("axis", [0, 1])
def test_scan_along_a_sharded_axis_moves_only_shard_totals(shape, spec, axis):
    x = np.random.default_rng(1).normal(size=shape)

    def f(x):
        return (np.cumsum(x, axis=axis), np.cumprod(0.1 * x + 1, axis=axis),
                np.maximum.accumulate(x, axis=axis), np.minimum.accumulate(x, axis=axis))

    jf = spmd.jit(f, in_shardings=(MESH.sharding(*spec),), out_shardings=MESH.sharding(*spec))
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # a gather would warn
        got = jf(x)
    for g, w in zip(got, f(x)):
        np.testing.assert_allclose(g.numpy(), w, rtol=1e-12)
        assert g.sharding.spec == MESH.sharding(*spec).spec
    split = MESH.sharding(*spec).dim_axes(axis)
    rep = jf.lower(x).report()
    if not split:
        assert rep["collectives"] == []
        return
    k = MESH.axes_size(split)
    other = MESH.sharding(*spec).local_shape(shape)[1 - axis]
    for c in rep["collectives"]:
        # each device receives the k shard totals of its rows, nothing more
        assert c["op"] == "all_gather" and c["bytes"] <= k * other * 8, c
    assert len(rep["collectives"]) == 4


def test_cumsum_numpy_forms_and_grad():
    x = np.arange(12, dtype=np.int32).reshape(3, 4)
    f = spmd.jit(lambda x: (np.cumsum(x), x.cumsum(1), np.cumprod(x + 1, 0), np.add.accumulate(x, axis=1)))
    for g, w in zip(f(x), (np.cumsum(x), x.cumsum(1), np.cumprod(x + 1, 0), np.add.accumulate(x, axis=1))):
        assert g.dtype == w.dtype and np.array_equal(g, w)
    # d/dx sum(w * cumsum(x)) = reverse cumsum of w
    w = np.random.default_rng(0).normal(size=7)
    g = spmd.jit(spmd.grad(lambda x: np.sum(w * np.cumsum(x))))(np.ones(7))
    np.testing.assert_allclose(g, np.cumsum(w[::-1])[::-1])
    b = np.array([[False, True, False], [True, False, False]])
    got = spmd.jit(lambda b: (np.maximum.accumulate(b, axis=1), np.minimum.accumulate(b)))(b)
    for g_, w_ in zip(got, (np.maximum.accumulate(b, axis=1), np.minimum.accumulate(b))):
        assert g_.dtype == w_.dtype and np.array_equal(g_, w_)
    with pytest.raises(spmd.TraceError, match="cumulative prod"):
        spmd.jit(spmd.grad(lambda x: np.sum(np.cumprod(x))))(np.ones(3))
