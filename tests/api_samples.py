"""Samples of numpy-API calls the table tests share: inputs numpy accepts for each row of
spmd/frontend/numpy_api.py's table, and how a result is described (kind, shape, dtype)
and placed on a small mesh."""
import contextlib
import operator
import warnings

import numpy as np

import spmd
from spmd.frontend import numpy_api as npx
from spmd.frontend.masked import Masked
from spmd.frontend.trace import Tracer
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
    "linalg.cross": (V[:3], A[:, :3]),
    "digitize": (A, np.array([0.6, 0.9, 1.2])), "bincount": (np.array([0, 2, 2, 5]),),
    "unpackbits": (np.array([[3, 200, 17], [255, 0, 128]], np.uint8), 1, 20, "little"),
    "packbits": (np.array([[1, 0, 1], [0, 0, 1]] * 3) > 0, 0),
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
    "fill_diagonal": (S, 1.0), "where": (M, A, B), "vander": (V,), "polyval": (V, A),
    "polyfit": (np.array([0.1, 0.5, 0.9, 1.4, 2.0]), np.array([1.0, 0.2, -0.3, 0.8, 2.5]), 2),
    "apply_along_axis": (np.sum, 1, A), "unravel_index": (np.array([1, 5, 7]), (3, 4)),
    "ravel_multi_index": ([I[0] % 3, I[1]], (3, 4)), "choose": (I % 2, [A, B]),
    "piecewise": (A, [M, ~M], [1.0, np.negative]), "lib.stride_tricks.sliding_window_view": (A, 2, 1),
}
METHOD_SAMPLES = {"reshape": (A, 4, 3), "astype": (A, np.float32), "take": (A, [2, 0]), "choose": (I % 2, [A, B])}


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
    if isinstance(r, Masked):         # numpy's x[mask] traced (np.nonzero's positions): its shape from the data
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
