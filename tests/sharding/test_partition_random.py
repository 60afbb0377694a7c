"""Property tests: random programs of 5-30 ops (elementwise, dot, reductions, broadcasts,
transposes, reshapes, slices, pads, concatenations, stencils, dynamic slices, gathers,
iotas) on meshes of 2, 4, 8, 2x2 and 2x4 devices, with even and uneven dims, equal
single-device numpy: exactly for int64 programs, to 1e-9 for float64 ones.

Two kinds: (1) every value gets a random sharding (a pending sum sometimes), as if
propagation had chosen it: the partitioner must make any combination exact, whatever
it costs; (2) a few random annotations (sharding_constraint, what spmd.shard records,
and random in_shardings) go through jit's real stages: propagate, partition, optimise,
and the runtime's execute with spmd.Arrays.
"""
import warnings

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from partition_util import (check_random_jit_program, random_program, random_sharding, reference,
                            run_partitioned)
from spmd.sharding import Mesh

MESHES = [Mesh((2,), ("x",)), Mesh((4,), ("x",)), Mesh((8,), ("x",)),
          Mesh((2, 2), ("a", "b")), Mesh((2, 4), ("a", "b"))]


def _check(seed, even, permuted=False):
    rng = np.random.default_rng(seed)
    mesh = MESHES[seed % len(MESHES)]
    if permuted:    # devices placed on the mesh in a scrambled order
        mesh = Mesh(mesh.shape, mesh.axis_names, devices=rng.permutation(mesh.size).reshape(mesh.shape))
    dims = (4, 8, 16) if even else (3, 5, 7, 9)
    dtype = "int64" if seed % 3 == 0 else "float64"
    g, args = random_program(rng, dtype, dims, int(rng.integers(5, 31)))
    g.mesh = mesh
    for v in g.values():
        v.sharding = random_sharding(rng, mesh, v)
    want = reference(g, args)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got, pg = run_partitioned(g, args, rng)
    for k, (w, r) in enumerate(zip(want, got)):
        msg = f"output {k} of seed {seed} on {mesh.text()}:\n{g}"
        if dtype == "int64":
            np.testing.assert_array_equal(r, w, err_msg=msg)
        else:
            np.testing.assert_allclose(r, w, rtol=1e-9, atol=1e-9, err_msg=msg)


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 2 ** 31 - 1))
def test_random_programs_even_shapes(seed):
    _check(seed, even=True)


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 2 ** 31 - 1))
def test_random_programs_uneven_shapes(seed):
    _check(seed, even=False)


@pytest.mark.parametrize("seed", range(10))
def test_random_programs_fixed_seeds(seed):
    """A few fixed programs on each mesh, so a regression shows without hypothesis luck;
    half of them on meshes whose devices are not in row-major order."""
    _check(seed, even=seed % 2 == 0, permuted=seed % 4 < 2)


def _check_jit(seed, even):
    check_random_jit_program(seed, MESHES[seed % len(MESHES)], even)


@settings(max_examples=120, deadline=None)
@given(st.integers(0, 2 ** 31 - 1), st.booleans())
def test_random_annotated_programs_through_jit(seed, even):
    _check_jit(seed, even)
