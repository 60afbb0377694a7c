"""One systematic check of the numpy-API table (spmd/frontend/numpy_api.py): for every
row and every surface it has (ufunc, function, ndarray method, Python operator), on sample
inputs numpy accepts, the result's Python type, named-tuple class and fields, shape and
dtype equal numpy's -- while tracing under spmd.jit and in eager mode on spmd.Arrays.
(Values are the other tests' business.) A numpy scalar stands as a 0-d array; the rows in
DATA_DEPENDENT return a Python bool in numpy and in eager mode, a 0-d bool array while
tracing (its value is not known until the program runs)."""
import warnings

import numpy as np
import pytest

import spmd
from spmd.frontend import numpy_api as npx
from spmd.jit.tracing import trace_function
from api_samples import (copies, describe, eager_numpy_backend, is_array, numpy_callable, placed, rows,
                         sample)

DATA_DEPENDENT = {"allclose", "array_equal"}
# rows whose result's size (or dtype: eig's, real where every eigenvalue is) depends on the
# data: traced under spmd.jit, which takes it from the data (a graph break)
DATA_SIZED = {"nonzero", "flatnonzero", "argwhere", "unique", "bincount", "intersect1d", "union1d", "setdiff1d",
              "setxor1d", "extract", "compress", "trim_zeros", "linalg.eig", "linalg.eigvals"}


def traced(fn, args, sized=False):
    """describe(fn(*args)) with the array arguments traced (the others static); `sized`:
    under spmd.jit, which can take sizes from the data."""
    dyn = [a for a in args if is_array(a)]
    seen = []

    def f(*xs):
        it = iter(xs)
        r = fn(*[next(it) if is_array(a) else a for a in args])
        seen.append(describe(r))
        return 0.0
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if sized:
            spmd.jit(f)(*copies(dyn))
        else:
            trace_function(f, copies(dyn))
    return seen[0]


def expected(name, fn, args, traced=True):
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = describe(fn(*copies(args)))
    if name in DATA_DEPENDENT and traced:
        assert want == ("bool",)
        return ("array", (), "bool")
    return want


ROWS = rows()


@pytest.mark.parametrize("name,surface", ROWS, ids=[f"{n}-{s}" for n, s in ROWS])
def test_traced_results_have_numpys_types_shapes_and_dtypes(name, surface):
    fn = numpy_callable(name, surface)
    args = sample(name, surface, fn)
    assert traced(fn, args, name in DATA_SIZED) == expected(name, fn, args)


@pytest.mark.parametrize("name,surface", ROWS, ids=[f"{n}-{s}" for n, s in ROWS])
def test_eager_results_have_numpys_types_shapes_and_dtypes(name, surface):
    fn = numpy_callable(name, surface)
    args = sample(name, surface, fn)
    with eager_numpy_backend():
        got = describe(fn(*[placed(a) if is_array(a) else a for a in copies(args)]))
    assert got == expected(name, fn, args, traced=False)


def test_every_row_is_checked():
    """Each numpy name the table holds has a surface the checks above call."""
    names = {n for n, _, _, _ in npx.API}
    assert names == {n for n, _ in ROWS} and len(ROWS) > 250
