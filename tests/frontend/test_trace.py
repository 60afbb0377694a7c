"""Tracing plain numpy code: the numpy API surface, numpy's dtype promotion, errors that
name the user's line, pytrees, constants, the retrace cache and lowering placeholders."""
import inspect
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import spmd
from spmd.tree import tree_flatten

RNG = np.random.default_rng(0)
A = RNG.standard_normal((3, 4))                      # float64
B = RNG.standard_normal((4, 5)).astype(np.float32)
C = RNG.standard_normal((3, 4)).astype(np.float32)
P = RNG.uniform(0.5, 2.0, (3, 4))                    # positive
V = RNG.standard_normal((4,))
I = RNG.integers(-5, 6, (3, 4)).astype(np.int32)
J = RNG.integers(1, 4, (3, 4)).astype(np.int64)      # non-zero
M = RNG.random((3, 4)) < 0.5                         # bool
T3 = RNG.standard_normal((2, 3, 4))


def assert_same(got, want, what=""):
    """Same tree, shapes and dtypes as numpy; values exact for ints/bools, close for floats."""
    gl, gt = tree_flatten(got)
    wl, wt = tree_flatten(want)
    assert gt == wt, f"{what}: tree {gt} != {wt}"
    for g, w in zip(gl, wl):
        if isinstance(w, (bool, int, float, complex)) and not isinstance(w, np.generic):
            # Python's operators on a Python number argument: numpy's result is a Python number
            assert type(g) is type(w), f"{what}: got a {type(g).__name__}, numpy's {type(w).__name__}"
            g = np.asarray(g)
        w = np.asarray(w)
        assert isinstance(g, np.ndarray), f"{what}: got a {type(g).__name__}"
        assert g.shape == w.shape, f"{what}: shape {g.shape} != numpy's {w.shape}"
        assert g.dtype == w.dtype, f"{what}: dtype {g.dtype} != numpy's {w.dtype}"
        if w.dtype.kind == "f":
            tol = {np.float32: 1e-5, np.float16: 2e-3}.get(w.dtype.type, 1e-12)
            np.testing.assert_allclose(g, w, rtol=tol, atol=tol, equal_nan=True, err_msg=what)
        else:
            assert np.array_equal(g, w), f"{what}: {g} != {w}"


def check(fn, *args):
    with np.errstate(all="ignore"):
        want = fn(*args)
    got = spmd.jit(fn)(*args)
    assert_same(got, want, getattr(fn, "__name__", ""))


# ------------------------------------------------------------------------ the API surface
OPERATORS = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b, "floordiv": lambda a, b: a // b, "mod": lambda a, b: a % b,
    "pow": lambda a, b: abs(a) ** b, "pow2": lambda a, b: a ** 2, "rpow": lambda a, b: 2.0 ** a,
    "radd": lambda a, b: 1 + a, "rsub": lambda a, b: 1.5 - a, "rdiv": lambda a, b: 2 / (b + 10),
    "eq": lambda a, b: a == b, "ne": lambda a, b: a != b, "lt": lambda a, b: a < b,
    "le": lambda a, b: a <= b, "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b,
    "neg": lambda a, b: -a, "pos": lambda a, b: +a, "abs": lambda a, b: abs(a),
    "matmul": lambda a, b: a @ b.T, "rmatmul": lambda a, b: np.ones((2, 3)) @ a,
}


@pytest.mark.parametrize("name", sorted(OPERATORS))
@pytest.mark.parametrize("args", [(A, C), (I, J), (A, I), (C, 2.5)], ids=["f64,f32", "i32,i64", "f64,i32", "f32,py"])
def test_operators(name, args):
    if name in ("matmul",) and np.ndim(args[1]) == 0:
        return
    check(lambda a, b: OPERATORS[name](a, b), *args)


@pytest.mark.parametrize("expr", ["~m", "m & n", "m | n", "m ^ n", "i & j", "i | j", "i ^ j", "~i",
                                  "m + n", "m * n", "np.maximum(m, n)", "np.minimum(m, n)", "m @ n.T",
                                  "np.logical_and(m, i)", "np.logical_not(i)", "np.logical_xor(m, n)"])
def test_bool_and_bitwise_operators(expr):
    def f(m, n, i, j):
        return eval(expr)
    check(f, M, ~M, I, J)


INDICES = [1, -1, (1, 2), (-1, -2), slice(1, 3), slice(None, None, -1), slice(3, 0, -2), (slice(None), 2),
           (Ellipsis, 1), (None, 1), (1, None, slice(None, None, 2)), (Ellipsis, None), np.array([1, 0, -1]),
           [0, 0, 1], (slice(None), np.array([[1, 2], [0, -3]])), (1, Ellipsis, np.array([0, 3])),
           (0, slice(None), np.array([1, 2])), (slice(None), 0, np.array([1, 2])), (np.array([1, 0]), None, 0),
           (slice(None, 0),), (slice(5, 1),), (np.array([], dtype=np.int64),), ()]


@pytest.mark.parametrize("key", INDICES, ids=[str(i) for i in range(len(INDICES))])
def test_indexing(key):
    check(lambda x: x[key], T3)


def test_indexing_with_traced_scalar():
    def f(x, i):
        return x[i], x[i, -1], x[:, i], x[-i]
    for i in (0, 2, -1):
        check(f, A, np.int64(i))


INDEX_ERRORS = [(5,), (0, 0, 0, 0), (slice(None), 9), (Ellipsis, Ellipsis), (np.array([0, 9]),),
                (np.array([0.5]),), (np.array([True, False, True]),)]


@pytest.mark.parametrize("key", INDEX_ERRORS, ids=[str(i) for i in range(len(INDEX_ERRORS))])
def test_indexing_errors(key):
    with pytest.raises((IndexError, NotImplementedError)):
        spmd.jit(lambda x: x[key])(T3)


METHODS = {
    "T": lambda x: x.T, "reshape": lambda x: x.reshape(4, 3), "reshape_tuple": lambda x: x.reshape((2, -1)),
    "sum": lambda x: x.sum(), "sum_axis": lambda x: x.sum(axis=0), "sum_keep": lambda x: x.sum(1, keepdims=True),
    "mean": lambda x: x.mean(), "mean_axis": lambda x: x.mean(axis=-1), "max": lambda x: x.max(),
    "max_axis": lambda x: x.max(axis=1), "min": lambda x: x.min(0), "prod": lambda x: x.prod(1),
    "astype_f32": lambda x: x.astype(np.float32), "astype_i32": lambda x: x.astype(np.int32),
    "astype_bool": lambda x: x.astype(bool), "transpose": lambda x: x.transpose(),
    "transpose_axes": lambda x: x.transpose(1, 0), "ravel": lambda x: x.ravel(), "flatten": lambda x: x.flatten(),
    "squeeze": lambda x: x[None].squeeze(0), "var": lambda x: x.var(0), "std": lambda x: x.std(),
    "any": lambda x: (x > 0).any(0), "all": lambda x: (x > 0).all(), "argmax": lambda x: x.argmax(1),
    "argmin": lambda x: x.argmin(), "clip": lambda x: x.clip(-0.5, 0.5), "dot": lambda x: x.dot(np.ones(4)),
    "swapaxes": lambda x: x.swapaxes(0, 1), "shape": lambda x: np.zeros(x.shape) + x.ndim + x.size,
    "len": lambda x: x[: len(x) - 1], "iter": lambda x: [r for r in x], "copy": lambda x: x.copy(),
    "take": lambda x: x.take([1, 0], axis=1),
}


@pytest.mark.parametrize("name", sorted(METHODS))
@pytest.mark.parametrize("x", [A, C, I], ids=["f64", "f32", "i32"])
def test_methods(name, x):
    check(METHODS[name], x)


FUNCTIONS = {
    "exp": lambda x: np.exp(x), "log": lambda x: np.log(np.abs(x) + 0.5), "log1p": lambda x: np.log1p(np.abs(x)),
    "tanh": np.tanh, "sin": np.sin, "cos": np.cos, "sqrt": lambda x: np.sqrt(np.abs(x)), "abs": np.abs,
    "sign": np.sign, "maximum": lambda x: np.maximum(x, 0), "minimum": lambda x: np.minimum(x, x.T.T * 0.5),
    "where": lambda x: np.where(x > 0, x, -1), "where_scalar": lambda x: np.where(x > 0, 1.5, 0),
    "sum": lambda x: np.sum(x, axis=(0, 1)), "mean": lambda x: np.mean(x, 0), "max": lambda x: np.max(x, 1),
    "min": lambda x: np.min(x), "prod": lambda x: np.prod(x, axis=0), "amax": lambda x: np.amax(x, 0),
    "matmul": lambda x: np.matmul(x, x.T), "matmul_vec": lambda x: np.matmul(x, np.arange(4.0)),
    "matmul_batch": lambda x: np.matmul(np.stack([x, x]), x.T), "dot": lambda x: np.dot(x, x.T),
    "dot_vec": lambda x: np.dot(x[0], x[1]),
    "einsum": lambda x: np.einsum("ij,kj->ik", x, x), "einsum_trace_free": lambda x: np.einsum("ij->j", x),
    "einsum_3": lambda x: np.einsum("ij,jk,k->i", x, x.T, np.ones(3)),
    "einsum_implicit": lambda x: np.einsum("ij,jk", x, x.T),
    "einsum_batch": lambda x: np.einsum("bij,bjk->bik", np.stack([x, x + 1]), np.stack([x.T, x.T])),
    "transpose": lambda x: np.transpose(x), "reshape": lambda x: np.reshape(x, (2, 6)),
    "reshape_neg": lambda x: np.reshape(x, (-1, 2)), "concatenate": lambda x: np.concatenate([x, x[:1]]),
    "concatenate_axis": lambda x: np.concatenate([x, np.ones((3, 2))], axis=1),
    "concatenate_none": lambda x: np.concatenate([x, x], axis=None), "stack": lambda x: np.stack([x, x + 1]),
    "stack_axis": lambda x: np.stack([x, x], axis=-1), "broadcast_to": lambda x: np.broadcast_to(x[0], (2, 4)),
    "broadcast_to_int": lambda x: np.broadcast_to(x[0, :1], 5),
    "expand_dims": lambda x: np.expand_dims(x, (0, 2)), "squeeze": lambda x: np.squeeze(x[:, None, :1]),
    "clip": lambda x: np.clip(x, -1, 1), "clip_min": lambda x: np.clip(x, 0, None), "square": np.square,
    "power": lambda x: np.power(np.abs(x), 1.5), "zeros_like": np.zeros_like, "ones_like": np.ones_like,
    "full_like": lambda x: np.full_like(x, 7), "zeros_like_dtype": lambda x: np.zeros_like(x, dtype=np.int32),
    "swapaxes": lambda x: np.swapaxes(x, 0, 1), "moveaxis": lambda x: np.moveaxis(x[None], 0, -1),
    "outer": lambda x: np.outer(x[0], x[1]), "tensordot": lambda x: np.tensordot(x, x, axes=([1], [1])),
    "inner": lambda x: np.inner(x, x), "var": lambda x: np.var(x, axis=1), "std": lambda x: np.std(x),
    "argmax": lambda x: np.argmax(x, axis=0), "any": lambda x: np.any(x > 1), "all": lambda x: np.all(x > -9, 1),
    "tile": lambda x: np.tile(x, (2, 1)), "take": lambda x: np.take(x, [0, 2]), "ravel": np.ravel,
    "add_reduce": lambda x: np.add.reduce(x, axis=1), "maximum_reduce": lambda x: np.maximum.reduce(x),
    "exp2ops": lambda x: np.expm1(x) + np.log2(np.abs(x) + 1) + np.floor(x) + np.ceil(x),
    "mixed_np_array": lambda x: x + np.arange(4), "shape_fns": lambda x: np.zeros(np.shape(x)) + np.ndim(x),
    "reciprocal": lambda x: np.reciprocal(x + 10.0), "result_type": lambda x: x.astype(np.result_type(x, 1.0)),
}


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
@pytest.mark.parametrize("x", [A, C, I], ids=["f64", "f32", "i32"])
def test_numpy_functions(name, x):
    check(FUNCTIONS[name], x)


def test_weak_python_scalar_arguments():
    """Python scalars passed to jit promote like Python scalars (NEP 50), not as float64."""
    f = spmd.jit(lambda x, s, k: (x * s, x + k, s + k))
    assert_same(f(C, 2.5, 3), (C * 2.5, C + 3, 2.5 + 3))
    assert_same(spmd.jit(lambda i, k: i * k)(I, 7), I * 7)


def test_python_int_overflow_raises_like_numpy():
    with pytest.raises(OverflowError):
        I + 2**40
    with pytest.raises(OverflowError):
        spmd.jit(lambda i: i + 2**40)(I)


# ------------------------------------------------------------------------ dtype promotion
DTYPES = ["float32", "float64", "int32", "int64", "bool", "float16"]


@st.composite
def operand(draw, shape):
    """An array of one of the dtypes, or a Python scalar (weak), or a numpy scalar."""
    kind = draw(st.sampled_from(["array"] * 4 + ["py", "npscalar"]))
    if kind == "py":
        return draw(st.one_of(st.booleans(), st.integers(-4, 4), st.floats(-4, 4, width=32)))
    dt = draw(st.sampled_from(DTYPES))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    vals = rng.integers(-4, 5, shape) if dt != "bool" else rng.random(shape) < 0.5
    x = np.asarray(vals).astype(dt)
    if dt.startswith("float"):
        x = (x + rng.uniform(-0.5, 0.5, shape)).astype(dt)
    return x[()] if kind == "npscalar" else x


BINARY = {
    "add": np.add, "subtract": np.subtract, "multiply": np.multiply, "true_divide": np.true_divide,
    "floor_divide": np.floor_divide, "mod": np.mod, "power": np.power, "maximum": np.maximum,
    "minimum": np.minimum, "equal": np.equal, "less": np.less, "greater_equal": np.greater_equal,
    "logical_and": np.logical_and, "bitwise_xor": np.bitwise_xor, "matmul": np.matmul,
    "where": lambda a, b: np.where(np.not_equal(a, 0), a, b), "arctan2": np.arctan2,
}


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(sorted(BINARY)), shapes=st.sampled_from([((2, 3), (2, 3)), ((3,), (2, 3)), ((), (3,))]),
       data=st.data())
def test_binary_promotion_matches_numpy(name, shapes, data):
    if name == "matmul":
        shapes = ((2, 3), (3, 2))
    x = data.draw(operand(shapes[0]), "x")
    y = data.draw(operand(shapes[1]), "y")
    if not any(isinstance(v, np.ndarray) for v in (x, y)):
        x = np.asarray(x)                   # at least one array, as a traced argument is
    fn = BINARY[name]
    if name == "power" and (np.asarray(y).dtype.kind in "iub" and np.any(np.asarray(y) < 0)):
        y = abs(y) if not isinstance(y, np.ndarray) else np.abs(y)
    try:
        with np.errstate(all="ignore"):
            want = fn(x, y)
    except Exception as e:
        want = e
    if not isinstance(want, Exception) and np.asarray(want).dtype.name not in spmd.ir.dtypes.DTYPES:
        want = TypeError(f"numpy gives {np.asarray(want).dtype}, which spmd does not support")
    # trace both as arguments (a Python scalar argument stays weak) and as closed-over constants
    for f in (lambda a, b: fn(a, b), lambda a: fn(a, y)):
        args = (x, y) if f.__code__.co_argcount == 2 else (x,)
        if isinstance(want, Exception):
            with pytest.raises(Exception):
                spmd.jit(f)(*args)
            continue
        assert_same(spmd.jit(f)(*args), want, f"{name}({x!r}, {y!r})")


REDUCTIONS = {
    "sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min, "prod": np.prod, "any": np.any,
    "all": np.all, "var": np.var, "argmax": np.argmax,
    "sum_i32": lambda x, axis, keepdims: np.sum(x, axis, dtype=np.int32, keepdims=keepdims),
    "mean_f32": lambda x, axis, keepdims: np.mean(x, axis, dtype=np.float32, keepdims=keepdims),
}


@settings(max_examples=500, deadline=None)
@given(name=st.sampled_from(sorted(REDUCTIONS)), dt=st.sampled_from(DTYPES),
       shape=st.sampled_from([(2, 3), (4,), (), (0, 3), (2, 0)]), axis_i=st.integers(0, 4),
       keepdims=st.booleans(), seed=st.integers(0, 100))
def test_reduction_dtypes_match_numpy(name, dt, shape, axis_i, keepdims, seed):
    axis = [None, 0, -1, (0, 1), ()][axis_i]
    nd = len(shape)
    if axis is not None and (nd == 0 and axis != () or nd == 1 and axis == (0, 1)):
        return
    if name == "argmax" and (axis in ((0, 1), ()) or shape != (2, 3)):
        return
    rng = np.random.default_rng(seed)
    x = (rng.random(shape) < 0.5) if dt == "bool" else rng.integers(-3, 4, shape).astype(dt)
    fn = REDUCTIONS[name]

    def f(a):
        return fn(a, axis=axis, keepdims=keepdims)
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")          # mean of empty: numpy warns and gives nan
            want = f(x)
    except Exception:
        with pytest.raises(Exception):
            spmd.jit(f)(x)
        return
    assert_same(spmd.jit(f)(x), want, f"{name}({dt}{list(shape)}, axis={axis}, keepdims={keepdims})")


# ------------------------------------------------------------------------ errors name the line
def line_of(fn, marker):
    src, start = inspect.getsourcelines(fn)
    return f"test_trace.py:{start + next(i for i, s in enumerate(src) if marker in s)}"


def uses_unwrap(x):
    return np.unwrap(x)                     # MARK


def uses_method(x):
    return x.byteswap()                     # MARK


def uses_linalg(x):
    return np.linalg.tensorinv(x)           # MARK


def uses_histogram2d(x):
    return np.histogram2d(x[0], x[1])       # MARK


@pytest.mark.parametrize("fn,name", [(uses_unwrap, "unwrap"),
                                     (uses_method, "byteswap"), (uses_linalg, "tensorinv"),
                                     (uses_histogram2d, "histogram2d")])
def test_unsupported_numpy_raises_not_implemented(fn, name):
    with pytest.raises(NotImplementedError) as e:
        spmd.jit(fn)(np.eye(3))
    msg = str(e.value)
    assert name in msg and line_of(fn, "MARK") in msg, msg


def branches(x):
    if x.sum() > 0:                         # MARK
        return x
    return -x


def converts(x):
    # (a bare `return float(x[0])` needs no value while tracing: frontend/returned_scalars.py)
    return float(x[0]) * 2                  # MARK


_OUTSIDE = np.zeros(3)


def assigns(x):
    buf = _OUTSIDE                          # an array made outside cannot hold a traced value
    buf[0] = x[0]                           # MARK
    return x


@pytest.mark.parametrize("fn", [branches, converts, assigns])
def test_python_control_on_traced_value_raises_trace_error(fn):
    with pytest.raises(spmd.TraceError) as e:
        spmd.jit(fn, fallback=False)(np.ones(3))
    assert line_of(fn, "MARK") in str(e.value), str(e.value)


def test_np_asarray_and_np_array_of_traced_values_trace():
    def f(x):
        a = np.asarray(x)
        b = np.array(x)                     # a copy: writing it leaves x alone
        b[0] = 5.0
        c = np.array([x[1], 2.0 * x[0]])
        return a + 1, b, c, x
    got = spmd.jit(f, fallback=False)(np.arange(1.0, 3.0))
    for g, w in zip(got, f(np.arange(1.0, 3.0))):
        np.testing.assert_array_equal(np.asarray(g), w)


def test_ops_record_the_user_line():
    def f(x):
        y = np.exp(x)                       # MARK
        return y
    text = spmd.jit(f).lower(np.ones(2)).as_text("traced")
    assert f'exp(%0) : f64[2] loc("{line_of(f, "MARK")}")' in text, text


# ------------------------------------------------------------------------ pytrees, constants, cache
def test_pytrees_in_and_out():
    def f(params, batch):
        (x, y), extra = batch
        h = np.tanh(x @ params["w"]) + params["b"]
        return {"loss": np.mean((h - y) ** 2), "parts": [h.sum(0), (x.T, None)], "extra": extra}
    params = {"w": RNG.standard_normal((4, 2)), "b": RNG.standard_normal(2)}
    batch = ((RNG.standard_normal((3, 4)), RNG.standard_normal((3, 2))), [np.arange(3), None])
    check(f, params, batch)


def test_closed_over_arrays_become_constants():
    w = RNG.standard_normal((4, 3)).astype(np.float32)
    k = np.arange(3)

    def f(x):
        return x @ w + k
    low = spmd.jit(f).lower(C)
    g = low.stages["traced"]
    assert len(g.inputs) == 1
    consts = [op.attrs["value"] for op in g.ops if op.name == "constant"]
    assert any(c.shape == (4, 3) and np.array_equal(c, w) for c in consts)
    assert_same(spmd.jit(f)(C), f(C))
    w_before = w.copy()
    w += 1                  # the constant was captured by value at trace time
    assert np.array_equal([c for c in consts if c.shape == (4, 3)][0], w_before)


def test_retrace_cache():
    count = []

    def f(x, y):
        count.append(1)
        return x * y["a"]
    jf = spmd.jit(f)
    x = np.ones((2, 3), np.float32)
    for _ in range(3):
        jf(x, {"a": 2.0})
    assert len(count) == 1
    jf(np.zeros((2, 3), np.float32), {"a": 3.0})       # same shapes, new values: no retrace
    assert len(count) == 1
    jf(np.ones((4, 3), np.float32), {"a": 2.0})        # new shape
    assert len(count) == 2
    jf(np.ones((4, 3), np.float64), {"a": 2.0})        # new dtype
    assert len(count) == 3
    jf(np.ones((4, 3), np.float64), {"a": np.ones(3)})  # new leaf type
    jf(np.ones((4, 3), np.float64), {"a": np.ones(3)})
    assert len(count) == 4


def test_lower_placeholders_without_allocating():
    def f(x, w):
        return np.tanh(x @ w).sum(axis=0) * 2.0
    n = 1 << 20          # a (n, n) float32 array would be 4 TiB: nothing may allocate it
    low = spmd.jit(f).lower(spmd.ShapeDtype((n, n), np.float32), spmd.ShapeDtype((n, 8), "float32"))
    text = low.as_text("traced")
    assert text.startswith("func @f(%0: f32[1048576,1048576], %1: f32[1048576,8]) -> (f32[8])"), text
    for op in ("dot_general", "tanh", "reduce", "multiply"):
        assert op in text
    with pytest.raises(ValueError, match="stage"):
        low.as_text("nonsense")


def test_jit_result_is_fresh_array():
    x = np.ones(3)
    y = spmd.jit(lambda a: a)(x)
    y[0] = 5
    assert x[0] == 1


def test_jit_inside_jit_inlines():
    inner = spmd.jit(lambda a, b: np.tanh(a) @ b)
    outer = spmd.jit(lambda a, b: inner(a, b).sum() + inner(a * 2, b))
    want = (np.tanh(A) @ B).sum() + np.tanh(A * 2) @ B
    assert_same(outer(A, B.astype(np.float64)), want)
    g = outer.lower(A, B.astype(np.float64)).stages["traced"]
    assert sum(op.name == "dot_general" for op in g.ops) == 2


def test_where_shape_error_and_traced_fill():
    with pytest.raises(spmd.ShapeError, match="where"):
        spmd.jit(lambda x: np.where(x > 0, x, np.ones(5)))(A)
    check(lambda x: np.full_like(x, x[0, 0]), A)
    check(lambda x: np.add.reduce(x, axis=0, dtype=np.float32), I)


def test_tree_utilities():
    tree = {"b": [1, (2, None)], "a": (np.ones(2),), "c": {}}
    leaves, td = spmd.tree_flatten(tree)
    assert leaves[0] is tree["a"][0] and leaves[1:] == [1, 2]       # dict keys in sorted order
    back = spmd.tree_unflatten(td, leaves)
    assert back.keys() == tree.keys() and back["b"] == [1, (2, None)] and back["c"] == {}
    assert td == spmd.tree_flatten({"a": (0,), "b": [0, (0, None)], "c": {}})[1]
    assert td != spmd.tree_flatten({"a": [0], "b": [0, (0, None)], "c": {}})[1]
    assert spmd.tree_map(lambda x, y: x + y, [1, (2, 3)], [10, (20, 30)]) == [11, (22, 33)]
    with pytest.raises(ValueError):
        spmd.tree_unflatten(td, leaves + [5])
    from spmd.tree import broadcast_prefix
    assert broadcast_prefix(("s", None), ({"w": 1, "b": 2}, 3)) == ["s", "s", None]
    with pytest.raises(ValueError):
        broadcast_prefix(("s", None, None), (1, 2))
