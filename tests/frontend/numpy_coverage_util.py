"""The check the numpy-coverage tests share: a function of arrays run by plain numpy, under
spmd.jit on a mesh of 2 and of 4 with each array replicated or split along its first dim,
and eagerly on split spmd.Arrays, must give numpy's results (values, shapes, dtypes);
functions whose result's size depends on the data must make a graph break (a
FallbackWarning) and, under fallback=False, raise an error naming the user's line."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import spmd
from spmd.errors import ConcreteValueError, FallbackWarning

MESHES = (spmd.Mesh((2,), ("x",)), spmd.Mesh((4,), ("x",)))


def _leaves(r):
    if isinstance(r, (tuple, list)):
        return [v for x in r for v in _leaves(x)]
    return [r]


def same(got, want, what, rtol=1e-12, atol=1e-12):
    gs, ws = _leaves(got), _leaves(want)
    assert len(gs) == len(ws), f"{what}: {len(gs)} results, numpy gives {len(ws)}"
    for k, (g, w) in enumerate(zip(gs, ws)):
        g = np.asarray(g.numpy() if hasattr(g, "numpy") else g)
        w = np.asarray(w)
        assert g.shape == w.shape, f"{what} [{k}]: shape {g.shape}, numpy {w.shape}"
        assert g.dtype == w.dtype, f"{what} [{k}]: dtype {g.dtype}, numpy {w.dtype}"
        if w.dtype.kind in "fc":
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, equal_nan=True, err_msg=f"{what} [{k}]")
        else:
            assert np.array_equal(g, w), f"{what} [{k}]:\n got {g}\nwant {w}"


def _spec(a, split):
    return (("x" if split else None),) + (None,) * (a.ndim - 1) if a.ndim else ()


def numpy_of(fn, args):
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return fn(*[a.copy() for a in args])


def check(fn, *args, breaks=False, rtol=1e-12, atol=1e-12, meshes=MESHES, eager=True):
    """fn(*args) (arrays) under spmd.jit on each mesh, replicated and split, and eagerly,
    equal to numpy's. With breaks, each jit run warns of a graph break."""
    want = numpy_of(fn, args)
    for mesh in meshes:
        for split in (False, True):
            shard = tuple(mesh.sharding(*_spec(a, split and a.ndim > 0)) for a in args)
            f = spmd.jit(fn, in_shardings=shard, backend="numpy")
            with warnings.catch_warnings(record=True) as rec, np.errstate(all="ignore"):
                warnings.simplefilter("always")
                got = f(*[a.copy() for a in args])
            what = f"jit on {mesh.text()} {'split' if split else 'replicated'}"
            same(got, want, what, rtol, atol)
            broke = any(issubclass(w.category, FallbackWarning) for w in rec)
            assert broke == breaks, f"{what}: graph break {broke}, expected {breaks}"
    if eager:
        mesh = meshes[0]
        placed = [spmd.device_put(a, mesh.sharding(*_spec(a, a.ndim > 0 and a.shape[0] % 2 == 0)))
                  for a in args]
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            got = fn(*placed)
        same(got, want, "eager", rtol, atol)
    return want


def check_refuses_without_break(fn, *args, name):
    """Under fallback=False the data-sized function raises naming itself and the line."""
    f = spmd.jit(fn, backend="numpy", fallback=False)
    with pytest.raises(ConcreteValueError, match=rf"np\.{name} at .*test_numpy_coverage.*\.py:\d+"):
        f(*args)
