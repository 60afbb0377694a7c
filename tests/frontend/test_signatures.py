"""Every documented parameter of every numpy function in spmd's API table, generated from
`inspect.signature` of numpy's own function: each parameter (axis=, out=, where=,
dtype=, keepdims=, ddof=, ...) is given values numpy accepts on the table's sample
inputs, and the call runs under spmd.jit (arrays traced and split over 2 devices) and
eagerly on spmd.Arrays. The result must be numpy's in value, shape, dtype and type (and
for out=, the out array holds it), or spmd must refuse with an error naming the
parameter. Nothing may differ silently.

A parameter that has no value below is listed by test_every_parameter_is_covered, so a
new numpy parameter cannot go untested unnoticed."""
import inspect
import warnings

import numpy as np
import pytest

import spmd
from spmd.frontend import numpy_api as npx
from api_samples import M, copies, describe, eager_numpy_backend, is_array, placed, sample

# values to try per parameter name; numpy itself decides which it accepts for a function
VALUES = {
    "axis": [0, -1, None, (0, 1)], "axes": [(1, 0), [(0,), (0,)]], "keepdims": [True],
    "dtype": [np.float32, np.int64, np.complex128], "ddof": [1], "correction": [1], "initial": [0.25],
    "n": [2, 5], "k": [1, -1], "decimals": [1], "prepend": [0.0], "append": [2.0], "order": ["F"],
    "casting": ["unsafe"], "kind": ["stable"], "side": ["right"], "ord": [1, 2, np.inf, "fro"],
    "bins": [3], "range": [(0.0, 2.0)], "density": [True], "equal_nan": [True], "rtol": [0.5], "atol": [0.5],
    "nan": [0.5], "posinf": [9.0], "neginf": [-9.0], "repeats": [2], "fill_value": [0.5],
    "method": ["nearest", "lower", "midpoint"], "endpoint": [False], "num": [3], "norm": ["ortho", "forward"],
    "minlength": [7], "right": [True], "invert": [True], "assume_unique": [True], "rowvar": [False],
    "bias": [True], "overwrite_input": [True], "mode": ["reflect", "wrap", "edge", "same", "valid", "full"],
    "return_index": [True], "return_inverse": [True], "return_counts": [True], "return_counts_": [True],
    "offset": [1], "axis1": [1], "axis2": [0], "shift": [2], "start": [1], "stop": [3], "step": [2],
    "copy": [True], "subok": [False], "indexing": ["ij"], "sparse": [True], "weights": ["like_input"],
    "where": ["mask"], "out": ["out"], "reps": [(2, 1)], "to_begin": [0.0], "to_end": [1.0],
    "deg": [True], "period": [np.pi], "discont": [1.0], "constant_values": [3.0], "hermitian": [False],
    "upper": [False], "UPLO": ["U"], "full_matrices": [False], "compute_uv": [False], "rcond": [1e-3],
    "tol": [1e-3], "stable": [True], "descending": [False], "sorted": [True], "a_min": [0.7], "a_max": [1.1],
    "min": [0.7], "max": [1.1], "interpolation": [None], "ndmin": [2], "like": [None], "device": [None],
    "newshape": [None], "shape": [(4, 3)], "strict": [True], "left": [-1.0], "xp": [None], "fp": [None],
    "s": [(2, 3)], "wrap": [True], "edge_order": [2], "p": [1, "fro"], "mean": ["mean"],
    "sorter": ["argsort"], "default": [-1.0], "ndmax": [2], "y": ["like_input"],
    "fweights": ["observation_counts"], "aweights": ["observation_weights"], "returned": [True], "axisa": [0], "axisb": [0], "axisc": [0], "optimize": [True, "greedy"],
    "N": [3], "increasing": [True], "full": [True], "w": ["like_input"], "cov": [True], "bitorder": ["little"],
    "return_indices": [True], "writeable": [True], "retstep": [True], "base": [2.0], "dx": [0.5],
    "x": ["like_input"], "trim": ["f", "b"],
}
# functions whose result's values numpy leaves uninitialised: only the kind, shape and dtype count
UNINITIALISED = {"empty", "empty_like"}
# numpy functions that write into their first argument and return None: that argument is
# what they give
IN_PLACE = {"copyto", "put", "put_along_axis", "place", "putmask", "fill_diagonal"}
# numpy 2.4's documentation says the result is placed in out=, but on real input these
# return a new array and leave out as it was; spmd follows the documentation, so only
# the returned value is compared
OUT_NOT_WRITTEN_BY_NUMPY = {"fft.hfft", "fft.ifft2", "fft.irfft2"}
# parameters that are not numpy's documented behaviour to test here: array-API plumbing,
# arguments the sample supplies, deprecated aliases
SKIP = {"like", "device", "interpolation", "newshape", "signature", "extobj", "subok", "copy", "xp", "fp"}


def functions():
    out = []
    for name, _, surfaces, _ in npx.API:
        f = npx._np_attr(name)
        if "function" not in surfaces or f is None or isinstance(f, np.ufunc):
            continue
        try:
            inspect.signature(f)
        except (TypeError, ValueError):
            continue
        out.append(name)
    return sorted(set(out))


def cases():
    """(function name, parameter, value) for every value numpy accepts on the sample."""
    out = []
    for name in functions():
        f = npx._np_attr(name)
        args = sample(name, "function", f)
        params = list(inspect.signature(f).parameters.values())
        for i, p in enumerate(params):
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) or p.name in SKIP:
                continue
            if i < len(args) and p.kind != p.KEYWORD_ONLY:
                continue                      # the sample passes it positionally
            for v in VALUES.get(p.name, []):
                if _numpy(name, args, p.name, v) is not None:
                    out.append((name, p.name, v))
    return out


def _value(v, args, want=None):
    if v == "mask":
        return np.broadcast_to(M[tuple(slice(0, s) for s in M.shape)], np.shape(args[0])).copy() \
            if np.ndim(args[0]) == 2 and np.shape(args[0]) == M.shape else None
    if v == "like_input":
        return np.abs(np.asarray(args[0], dtype=float)) + 0.5 if is_array(args[0]) else None
    if v == "mean":           # var / std given the mean numpy would compute (keepdims)
        return np.mean(args[0], axis=None, keepdims=True) if is_array(args[0]) else None
    if v in ("observation_counts", "observation_weights"):     # np.cov's, one per column
        n = np.shape(args[0])[-1] if is_array(args[0]) else 0
        return np.arange(1, n + 1) if v == "observation_counts" else np.linspace(0.5, 2.0, n)
    if v == "argsort":
        return np.argsort(args[0]) if is_array(args[0]) and np.ndim(args[0]) == 1 else None
    if v == "out":
        if want is None:
            return None
        return tuple(np.zeros_like(w) for w in want) if isinstance(want, tuple) else np.zeros_like(want)
    return v


def _numpy(name, args, p, v):
    """numpy's result for np.<name>(*args, p=v), or None where numpy refuses the value."""
    f = npx._np_attr(name)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            if v == "out":
                want = f(*copies(args))
                if not isinstance(want, (np.ndarray, tuple)) or (isinstance(want, tuple) and not all(
                        isinstance(w, np.ndarray) for w in want)):
                    return None
                o = _value(v, args, want)
                r = f(*copies(args), **{p: o})
                return r, o
            val = _value(v, args)
            if val is None and v in ("mask", "like_input", "mean", "argsort"):
                return None
            full = copies(args)
            r = f(*full, **{p: val})
            return (full[0] if r is None and name in IN_PLACE else r), None
        except Exception:
            return None


def _kind(r, jitted):
    """describe(r); under jit a Python scalar result comes back as a 0-d array."""
    if jitted and isinstance(r, (bool, int, float, complex)):
        r = np.asarray(r)
    if isinstance(r, (tuple, list)) and not hasattr(r, "_fields"):
        return (type(r).__name__, tuple(_kind(x, jitted) for x in r))
    return describe(r)


def _same(got, want, what, values=True):
    assert _kind(got, what.startswith("jit")) == _kind(want, what.startswith("jit")), \
        (what, describe(got), describe(want))
    for g, w in zip(_leaves(got), _leaves(want)) if values else ():
        g = np.asarray(g.numpy() if hasattr(g, "numpy") else g)
        # float32 results: numpy's and spmd's sums may round in another order
        single = np.asarray(w).dtype in (np.float32, np.complex64)
        np.testing.assert_allclose(g, w, rtol=1e-5 if single else 1e-9, atol=1e-6 if single else 1e-12,
                                   equal_nan=True, err_msg=what)


def _leaves(r):
    if isinstance(r, (tuple, list)):
        return [x for e in r for x in _leaves(e)]
    return [r]


def _refuses(e, p):
    return isinstance(e, (NotImplementedError, TypeError, ValueError, spmd.errors.TraceError)) and p in str(e)


CASES = cases()


@pytest.mark.parametrize("name,param,value", CASES, ids=[f"{n}-{p}={v!r}" for n, p, v in CASES])
def test_each_documented_parameter_gives_numpys_result_or_names_itself(name, param, value):
    f = npx._np_attr(name)
    args = sample(name, "function", f)
    want, want_out = _numpy(name, args, param, value)
    arrays = [i for i, a in enumerate(args) if is_array(a)]

    def call(*xs, extra=None):
        full = list(args)
        for i, x in zip(arrays, xs):
            full[i] = x
        r = f(*full, **{param: extra if value == "out" else _value(value, args)})
        return full[0] if r is None and name in IN_PLACE else r

    # under jit: the arrays traced (split over 2 devices where they divide), out= traced too
    outs = _value("out", args, want) if value == "out" else None
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if value == "out":
                def g(*xs):
                    o = xs[len(arrays):]
                    o = o if isinstance(outs, tuple) else o[0]
                    return call(*xs[:len(arrays)], extra=o), o
                got, got_out = spmd.jit(g, backend="numpy")(*copies([args[i] for i in arrays]),
                                                             *(outs if isinstance(outs, tuple) else (outs,)))
            else:
                got = spmd.jit(lambda *xs: call(*xs), backend="numpy")(*copies([args[i] for i in arrays]))
    except Exception as e:
        assert _refuses(e, param), f"jit: {type(e).__name__}: {e}"
    else:
        _same(got, want, "jit", name not in UNINITIALISED)
        if value == "out" and name not in OUT_NOT_WRITTEN_BY_NUMPY:
            _same(got_out, want_out, "jit out")

    # eagerly on spmd.Arrays
    try:
        with eager_numpy_backend():
            xs = [placed(a) for a in copies([args[i] for i in arrays])]
            if value == "out":
                o = tuple(placed(x) for x in outs) if isinstance(outs, tuple) else placed(outs.copy())
                got = call(*xs, extra=o)
                got_out = o
            else:
                got = call(*xs)
    except Exception as e:
        assert _refuses(e, param), f"eager: {type(e).__name__}: {e}"
    else:
        _same(got, want, "eager", name not in UNINITIALISED)
        if value == "out" and name not in OUT_NOT_WRITTEN_BY_NUMPY:
            _same(got_out, want_out, "eager out")
            assert got is o, "numpy returns the out array itself"


def test_every_parameter_is_covered():
    """A parameter of a table function with no values to try is either in SKIP or
    passed by the sample: so a new numpy parameter is seen here."""
    missing = set()
    for name in functions():
        f = npx._np_attr(name)
        args = sample(name, "function", f)
        for i, p in enumerate(inspect.signature(f).parameters.values()):
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) or p.name in SKIP or p.name in VALUES:
                continue
            if i < len(args) and p.kind != p.KEYWORD_ONLY:
                continue
            missing.add((name, p.name))
    assert not missing, sorted(missing)


def test_the_generated_cases_cover_the_common_parameters():
    params = {p for _, p, _ in CASES}
    assert {"axis", "keepdims", "dtype", "out", "where", "ddof"} <= params and len(CASES) > 300, len(CASES)

