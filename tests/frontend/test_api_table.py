"""One systematic check of the numpy-API table (spmd/frontend/numpy_api.py): for every
row and every surface it has (ufunc, function, ndarray method, Python operator), on sample
inputs numpy accepts, the result's Python type, named-tuple class and fields, shape and
dtype equal numpy's -- while tracing under spmd.jit and in eager mode on spmd.Arrays.
(Values are the other tests' business.) A numpy scalar stands as a 0-d array; the rows in
DATA_DEPENDENT return a Python bool in numpy and in eager mode, a 0-d bool array while
tracing (its value is not known until the program runs)."""
import contextlib
import operator
import warnings

import numpy as np
import pytest

import spmd
from spmd.frontend import numpy_api as npx
from spmd.frontend.trace import Tracer
from spmd.staging import trace_function
from backend_env import numpy_compiler

rng = np.random.default_rng(0)
A = rng.random((3, 4)) + 0.5
B = rng.random((3, 4)) + 0.5
S = rng.random((4, 4))
S = S @ S.T + 4 * np.eye(4)
V = rng.random(4) + 0.5
I = rng.integers(0, 4, (3, 4))
M = rng.random((3, 4)) > 0.5
# numpy accepts the first of these for most rows; the others are in SAMPLES
CANDIDATES = [(A,), (A, B), (A, 1), (A, 2.0), (S,), (S, S), (S, V), (V,), (V, V), (I,), (I, I), (M,),
              (M, A, B), (A, 0, 1), (A, 0.5)]
SAMPLES = {
    "einsum": ("ij,jk->ik", A, B.T), "dsplit": (rng.random((2, 3, 4)), 2), "cross": (V[:3], A[0, :3]),
    "digitize": (A, np.array([0.6, 0.9, 1.2])), "bincount": (np.array([0, 2, 2, 5]),),
    "interp": (V, np.array([0.4, 0.8, 1.6]), np.array([1.0, -1.0, 2.0])), "linalg.matrix_power": (S, 3),
    "linalg.multi_dot": ([A, B.T, A],), "reshape": (A, (4, 3)), "broadcast_to": (V, (3, 4)),
    "astype": (A, np.float32), "put_along_axis": (A, np.zeros((3, 1), np.int64), 9.0, 1),
    "searchsorted": (np.sort(V), A), "take": (A, [2, 0]), "put": (A, [1, 5], [7.0, 8.0]),
    "fill": (A, 3.0), "take_along_axis": (A, np.argsort(A, 1), 1), "linalg.lstsq": (A.T, V),
    "partition": (A, 1), "argpartition": (A, 1), "select": ([M, ~M], [A, B]), "repeat": (A, 2),
    "split": (A, 2, 1), "array_split": (A, 3), "pad": (A, 1), "roll": (A, 1), "tile": (A, 2),
    "quantile": (A, 0.5), "nanquantile": (A, 0.5), "percentile": (A, 50), "nanpercentile": (A, 50),
    "histogram": (V,), "clip": (A, 0.6, 1.1), "expand_dims": (A, 1), "swapaxes": (A, 0, 1),
    "moveaxis": (A, 0, 1), "full_like": (A, 3.0), "linalg.solve": (S, V), "ix_": (np.array([0, 2]), V),
    "fill_diagonal": (S, 1.0), "where": (M, A, B),
}
METHOD_SAMPLES = {"reshape": (A, 4, 3), "astype": (A, np.float32), "take": (A, [2, 0])}
DATA_DEPENDENT = {"allclose", "array_equal"}
# rows whose result's size depends on the data: traced under spmd.jit, which takes the size
# from the data (a graph break)
DATA_SIZED = {"nonzero", "flatnonzero", "argwhere", "unique", "bincount"}
RAISE_WHILE_TRACING = {}


def rows():
    out = []
    for name, _, surfaces, ops in npx.API:
        out += [(name, s) for s in surfaces]
        out += [(name, "operator " + o) for o in ops]
    return sorted(set(out))


def numpy_callable(name, surface):
    if surface == "method":
        return lambda x, *a: getattr(x, name)(*a)
    if surface.startswith("operator "):
        o = surface.split()[1]
        if o == "getitem":
            return lambda x: x[1, ::2]
        if o == "divmod":
            return divmod
        o = o.lstrip("-=")
        return getattr(operator, o + "_" if o in ("and", "or") else o)
    # looked up when called: while tracing, np.array and the other creation functions are
    # spmd's (frontend/numpy_buffers.py)
    return lambda *a, **k: npx._np_attr(name)(*a, **k)


def sample(name, surface, fn):
    if surface == "method" and name in METHOD_SAMPLES:
        return METHOD_SAMPLES[name]
    if name in SAMPLES and not surface.startswith("operator "):
        return SAMPLES[name]
    for c in CANDIDATES:
        try:
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                fn(*copies(c))
            return c
        except Exception:
            pass
    raise AssertionError(f"no sample numpy accepts for {name} ({surface})")


def copies(args):
    return [a.copy() if isinstance(a, np.ndarray) else [b.copy() for b in a] if isinstance(a, list) and a and
            isinstance(a[0], np.ndarray) else a for a in args]


def describe(r):
    """What the check compares of a result: its kind, named-tuple class and fields, shapes, dtypes."""
    if isinstance(r, (np.ndarray, np.generic, Tracer, spmd.Array)):
        return ("array", tuple(r.shape), np.dtype(r.dtype).name)
    if isinstance(r, tuple) and hasattr(r, "_fields"):
        return (type(r), r._fields, tuple(describe(x) for x in r))
    if isinstance(r, (tuple, list)):
        return (type(r).__name__, tuple(describe(x) for x in r))
    if isinstance(r, np.dtype):
        return ("dtype", r.name)
    return (type(r).__name__,)


def is_array(a):
    return isinstance(a, np.ndarray) or (isinstance(a, list) and a and all(isinstance(b, np.ndarray) for b in a))


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


@contextlib.contextmanager
def eager_numpy_backend():
    with numpy_compiler(), np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


MESH = spmd.Mesh((2,), ("a",))


def placed(a):
    if isinstance(a, list):
        return [placed(b) for b in a]
    return spmd.device_put(a, MESH.sharding(*(["a"] + [None] * (a.ndim - 1)) if a.ndim and a.shape[0] % 2 == 0
                                            else [None] * a.ndim))


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
    if (name, surface) in RAISE_WHILE_TRACING:
        with pytest.raises((TypeError, NotImplementedError), match=RAISE_WHILE_TRACING[name, surface]):
            traced(fn, args)
        return
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
