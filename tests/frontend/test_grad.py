"""Reverse-mode autodiff: every differentiable registry op against central finite
differences in float64, second derivatives of the elementwise ops, and the public
grad / value_and_grad API on pytrees, argnums, has_aux, inside jit and eagerly."""
import warnings

import numpy as np
import pytest

import spmd
from opinfo import TABLE, ops_to_test, samples
from spmd.frontend.autodiff import vjp_graph
from spmd.backends.numpy_backend import compile_numpy
from spmd.ir import REGISTRY, Graph
from spmd.ir.ops.names import ADD, BROADCAST_IN_DIM, CONSTANT, MULTIPLY, REAL, REDUCE

EPS = 1e-6


def _is_f64(x):
    return np.asarray(x).dtype in (np.float64, np.complex128)


def grad_samples(name, rng):
    """float64 (and complex128) samples at smooth points, with something to differentiate."""
    out = []
    for operands, attrs in samples(name, rng):
        floats = [i for i, x in enumerate(operands) if np.asarray(x).dtype.kind in "fc"]
        if not floats or not all(_is_f64(operands[i]) for i in floats):
            continue
        if not any(np.size(operands[i]) for i in floats):
            continue
        if not TABLE[name].grad_ok(operands, attrs):
            continue
        out.append((operands, attrs, floats))
    return out


def loss_graph(name, operands, attrs, floats, rng, order=1):
    """Graph: inputs = operands; loss = sum(w * op(...)); outputs = [loss, d loss/d floats...].
    With order=2, the loss is sum_i sum(v_i * d loss/d x_i) and the gradient is of that."""
    g = Graph(name)
    ins = [g.add_input(np.shape(x), np.asarray(x).dtype) for x in operands]
    out = g.emit(name, *ins, **attrs)

    def weighted_sum(v):
        if v.dtype.startswith("complex"):     # a real loss of a complex value: Re(sum(w * v))
            w = rng.standard_normal(v.shape) + 1j * rng.standard_normal(v.shape)
            v = g.emit(REAL, g.emit(MULTIPLY, v, g.emit(CONSTANT, value=np.asarray(w, v.dtype))))
        w = g.emit(CONSTANT, value=rng.standard_normal(v.shape))
        p = g.emit(MULTIPLY, v, w)
        return g.emit(REDUCE, p, kind="sum", axes=tuple(range(v.ndim))) if v.ndim else p

    def grads(loss, start=0):
        one = g.emit(CONSTANT, value=np.ones(()))
        cts = vjp_graph(g, start, [ins[i] for i in floats], loss, one)
        zeros = [g.emit(BROADCAST_IN_DIM, g.emit(CONSTANT, value=np.zeros((), ins[i].dtype)),
                        shape=ins[i].shape, broadcast_dimensions=()) for i in floats]
        return [c if c is not None else z for c, z in zip(cts, zeros)]

    loss = weighted_sum(out)
    gs = grads(loss)
    if order == 2:
        terms = [weighted_sum(d) for d in gs]
        loss = terms[0]
        for t in terms[1:]:
            loss = g.emit(ADD, loss, t)
        gs = grads(loss)
    g.outputs = [loss] + gs
    return compile_numpy(g)


def finite_differences(exe, operands, floats):
    """Central differences of output 0 of exe wrt every element of the float operands.
    A complex operand's gradient is d/d re - i d/d im (JAX's convention)."""
    base = [np.array(x, copy=True) for x in operands]
    out = []
    for i in floats:
        d = np.zeros(base[i].shape, base[i].dtype)
        for step in ((1.0, 1.0), (1j, -1j)) if base[i].dtype.kind == "c" else ((1.0, 1.0),):
            for idx in np.ndindex(*base[i].shape):
                hi = [b.copy() for b in base]
                lo = [b.copy() for b in base]
                hi[i][idx] += EPS * step[0]
                lo[i][idx] -= EPS * step[0]
                d[idx] += (exe(hi)[0] - exe(lo)[0]) / (2 * EPS) * step[1]
        out.append(d)
    return out


def differentiable_ops():
    return [n for n in ops_to_test() if REGISTRY[n].vjp is not None]


@pytest.mark.parametrize("name", differentiable_ops())
def test_vjp_matches_finite_differences(name):
    rng = np.random.default_rng(1)
    cases = grad_samples(name, rng)
    if name in ("constant", "iota"):
        assert not cases          # nothing to differentiate; their vjp returns no cotangents
        return
    assert cases, f"{name}: no float64 sample to differentiate"
    for operands, attrs, floats in cases:
        exe = loss_graph(name, operands, attrs, floats, np.random.default_rng(2))
        got = exe([np.asarray(x) for x in operands])[1:]
        want = finite_differences(exe, operands, floats)
        for i, gv, wv in zip(floats, got, want):
            np.testing.assert_allclose(gv, wv, rtol=1e-5, atol=1e-6,
                                       err_msg=f"{name} d/d operand {i}: {[np.shape(x) for x in operands]} {attrs}")


ELEMENTWISE = [n for n in differentiable_ops() if REGISTRY[n].family == "elementwise"]


@pytest.mark.parametrize("name", ELEMENTWISE)
def test_second_derivatives_of_elementwise_ops(name):
    rng = np.random.default_rng(3)
    cases = [c for c in grad_samples(name, rng) if 0 < max(np.size(x) for x in c[0]) <= 6]
    assert cases, name
    for operands, attrs, floats in cases[:4]:
        exe = loss_graph(name, operands, attrs, floats, np.random.default_rng(4), order=2)
        got = exe([np.asarray(x) for x in operands])[1:]
        want = finite_differences(exe, operands, floats)
        for i, gv, wv in zip(floats, got, want):
            np.testing.assert_allclose(gv, wv, rtol=1e-5, atol=1e-6,
                                       err_msg=f"{name} d2/d operand {i}: {[np.shape(x) for x in operands]}")


# ------------------------------------------------------------------------ the public API
def numeric_grad(f, x, eps=EPS):
    """Central differences of a plain numpy scalar function f at the float64 array x."""
    x = np.asarray(x, dtype=np.float64)
    d = np.zeros_like(x)
    for idx in np.ndindex(*x.shape):
        hi, lo = x.copy(), x.copy()
        hi[idx] += eps
        lo[idx] -= eps
        d[idx] = (f(hi) - f(lo)) / (2 * eps)
    return d


RNG = np.random.default_rng(5)
X = RNG.standard_normal((3, 4))
W = RNG.standard_normal((4, 2))

COMPOSITES = {
    "mlp": lambda x: np.mean((np.maximum(x @ W, 0) - 1.0) ** 2),
    "indexing": lambda x: np.sum(x[::-1, None, 1:3] * x[1, 1:3]) + x[-1, -1] + x[:, [0, 0, 2]].sum(),
    "softmax": lambda x: np.sum(np.exp(x) / np.exp(x).sum(axis=1, keepdims=True) * np.arange(4)),
    "reductions": lambda x: x.max() + np.min(x, axis=0).sum() + x.mean() + np.prod(x[0]) + x.var(),
    "shapes": lambda x: np.sum(np.concatenate([x, x.T.reshape(3, 4)], axis=1) ** 2 * np.arange(8)),
    "where_clip": lambda x: np.sum(np.where(x > 0, np.sin(x), x ** 3) + np.clip(x, -0.5, 0.5)),
    "einsum": lambda x: np.einsum("ij,jk,ik->", x, W, x @ W),
    "broadcast": lambda x: np.sum(np.tanh(x[:, :, None] + x[:, None, :]) * np.broadcast_to(x[0], (3, 4)).sum()),
    "stack_dot": lambda x: np.dot(np.stack([x[0], x[1]]).ravel(), np.ones(8) * x[2, 0]),
    "division": lambda x: np.sum(np.abs(x) / (1.0 + x ** 2) + np.sqrt(x ** 2 + 1) + np.log1p(x ** 2)),
}


@pytest.mark.parametrize("name", sorted(COMPOSITES))
def test_grad_of_numpy_programs(name):
    f = COMPOSITES[name]
    got = spmd.jit(spmd.grad(f))(X)
    assert got.dtype == np.float64 and got.shape == X.shape
    tol = 1e-4 if name == "mixed_precision" else 1e-6
    np.testing.assert_allclose(got, numeric_grad(f, X), rtol=tol, atol=tol)


def test_grad_through_a_float32_cast():
    """Cotangents convert back to each value's own dtype."""
    f = lambda x: np.sum(x.astype(np.float32) ** 2 * np.float32(2)).astype(np.float64) * 1.5  # noqa: E731
    g = spmd.grad(f)(X)
    assert g.dtype == np.float64
    np.testing.assert_allclose(g, 6 * X, rtol=1e-6)


def test_grad_of_float32_input_is_float32():
    x = X.astype(np.float32)
    g = spmd.grad(lambda x: np.sum(np.tanh(x) * 2))(x)
    assert g.dtype == np.float32
    np.testing.assert_allclose(g, 2 * (1 - np.tanh(x) ** 2), rtol=1e-5)


def test_grad_wrt_pytrees():
    params = {"w": W, "layers": [X[0], (X[1, :2], None)], "t": (np.float64(0.5),)}

    def f(p):
        a = np.sum(np.tanh(X @ p["w"]))
        b = np.sum(p["layers"][0] ** 2) * p["t"][0]
        return a + b + np.prod(p["layers"][1][0])
    g = spmd.grad(f)(params)
    assert set(g) == {"w", "layers", "t"} and isinstance(g["layers"], list)
    assert isinstance(g["layers"][1], tuple) and g["layers"][1][1] is None and isinstance(g["t"], tuple)
    np.testing.assert_allclose(g["w"], X.T @ (1 - np.tanh(X @ W) ** 2), rtol=1e-10)
    np.testing.assert_allclose(g["layers"][0], 2 * X[0] * 0.5, rtol=1e-12)
    np.testing.assert_allclose(g["layers"][1][0], X[1, :2][::-1], rtol=1e-12)
    np.testing.assert_allclose(g["t"][0], np.sum(X[0] ** 2), rtol=1e-12)


def test_argnums_has_aux_and_value_and_grad():
    def f(a, b, c):
        loss = np.sum(a * b) + np.sum(c ** 3)
        return loss, {"a_sum": a.sum()}
    a, b, c = X[0], X[1], X[2]
    ga, gc = spmd.grad(lambda a, b, c: f(a, b, c)[0], argnums=(0, 2))(a, b, c)
    np.testing.assert_allclose(ga, b)
    np.testing.assert_allclose(gc, 3 * c ** 2)
    (gb,) = spmd.grad(lambda a, b, c: f(a, b, c)[0], argnums=(1,))(a, b, c)
    np.testing.assert_allclose(gb, a)
    g, aux = spmd.grad(f, argnums=1, has_aux=True)(a, b, c)
    np.testing.assert_allclose(g, a)
    np.testing.assert_allclose(aux["a_sum"], a.sum())
    (v, aux), (ga, gb) = spmd.value_and_grad(f, argnums=(0, 1), has_aux=True)(a, b, c)
    np.testing.assert_allclose(v, f(a, b, c)[0])
    np.testing.assert_allclose(gb, a)
    v, g = spmd.value_and_grad(lambda x: np.sum(np.sin(x)))(a)
    np.testing.assert_allclose(v, np.sum(np.sin(a)))
    np.testing.assert_allclose(g, np.cos(a))
    # argnums=-1 counts from the end, like JAX
    np.testing.assert_allclose(spmd.grad(lambda a, b, c: f(a, b, c)[0], argnums=-1)(a, b, c), 3 * c ** 2)


def test_grad_inside_jit_and_eagerly_agree():
    def loss(w, x):
        return np.mean(np.tanh(x @ w) ** 2)
    eager = spmd.grad(loss)(W, X)
    step = spmd.jit(lambda w, x: w - 0.1 * spmd.grad(loss)(w, x))
    np.testing.assert_allclose(step(W, X), W - 0.1 * eager, rtol=1e-12)
    np.testing.assert_allclose(eager, numeric_grad(lambda w: loss(w, X), W), rtol=1e-6, atol=1e-8)


def test_eager_grad_traces_once_per_signature():
    count = []

    def f(x):
        count.append(1)
        return np.sum(x ** 2)
    df = spmd.grad(f)
    for _ in range(3):
        df(X)
    assert len(count) == 1
    df(X[:2])
    assert len(count) == 2


def test_grad_closing_over_an_outer_traced_value():
    def outer(x, y):
        # the inner function closes over y, a value traced by the outer jit
        g = spmd.grad(lambda a: np.sum(np.sin(a * y)))(x)
        return g, np.sum(g)
    x, y = X[0], X[1]
    g, _ = spmd.jit(outer)(x, y)
    np.testing.assert_allclose(g, y * np.cos(x * y), rtol=1e-12)
    # differentiate the whole thing wrt y, through the inner gradient
    dy = spmd.grad(lambda y: outer(x, y)[1])(y)
    want = numeric_grad(lambda yy: np.sum(yy * np.cos(x * yy)), y)
    np.testing.assert_allclose(dy, want, rtol=1e-6, atol=1e-8)


def test_grad_of_grad():
    f = lambda x: np.sin(x) * x ** 3            # noqa: E731
    d1 = spmd.grad(lambda x: np.sum(f(x)))
    d2 = spmd.grad(lambda x: np.sum(d1(x)))
    d3 = spmd.jit(spmd.grad(lambda x: np.sum(d2(x))))
    x = X[0]
    np.testing.assert_allclose(d1(x), np.cos(x) * x ** 3 + 3 * x ** 2 * np.sin(x), rtol=1e-10)
    want2 = -np.sin(x) * x ** 3 + 6 * x ** 2 * np.cos(x) + 6 * x * np.sin(x)
    np.testing.assert_allclose(d2(x), want2, rtol=1e-10)
    want3 = numeric_grad(lambda v: np.sum(-np.sin(v) * v ** 3 + 6 * v ** 2 * np.cos(v) + 6 * v * np.sin(v)), x)
    np.testing.assert_allclose(d3(x), want3, rtol=1e-6, atol=1e-6)


def test_grad_of_constant_function_is_zero():
    g = spmd.grad(lambda x, y: np.sum(y ** 2))(X, X)
    assert np.array_equal(g, np.zeros_like(X))
    g = spmd.grad(lambda x: np.sum((x > 0).astype(np.float64)))(X)   # through a comparison: zero
    assert np.array_equal(g, np.zeros_like(X))


def test_grad_errors():
    with pytest.raises(spmd.TraceError, match="float scalar"):
        spmd.grad(lambda x: x * 2)(X)
    with pytest.raises(spmd.TraceError, match="float"):
        spmd.grad(lambda x: np.sum(x))(np.arange(3))
    with pytest.raises(spmd.TraceError, match="argnums"):
        spmd.grad(lambda x: np.sum(x), argnums=2)(X)
    with pytest.raises(spmd.TraceError, match="pair"):
        spmd.grad(lambda x: np.sum(x), has_aux=True)(X)


def test_backward_ops_carry_the_grad_line():
    def f(x):
        return spmd.grad(lambda v: np.sum(np.exp(v)))(x)
    text = spmd.jit(f).lower(X).as_text("traced")
    assert "test_grad.py" in text and "loc(None)" not in text
    # every op has a location
    assert all(" loc(" in line for line in text.splitlines()[1:-2]), text


def test_grad_of_prod_with_zeros():
    """The product rule holds where elements are zero (no 0/0)."""
    x = np.array([[2.0, 0.0, 3.0], [0.0, 0.0, 5.0], [1.5, -2.0, 4.0]])
    g = spmd.grad(lambda x: np.sum(np.prod(x, axis=1) * np.array([1.0, 2.0, 3.0])))(x)
    want = np.array([[0.0, 6.0, 0.0], [0.0, 0.0, 0.0], [3 * -8.0, 3 * 6.0, 3 * -3.0]])
    np.testing.assert_array_equal(g, want)
    np.testing.assert_allclose(spmd.grad(lambda v: np.prod(v))(np.array([0.0])), [1.0])


W2 = np.array([1.0, 2.0])
# f(w) of [w0**2, 3 w1] and its derivative at W2, by hand
LIST_REDUCTIONS = [("sum", [2.0, 3.0]), ("mean", [1.0, 1.5]), ("prod", [12.0, 3.0]), ("max", [0.0, 3.0]),
                   ("min", [2.0, 0.0])]


@pytest.mark.parametrize("name, want", LIST_REDUCTIONS)
def test_reductions_of_a_list_of_traced_arrays(name, want):
    """numpy's functions dispatch on a list, not on the arrays in it: while tracing, spmd
    stacks a list holding traced values first, as numpy would (frontend/numpy_buffers.py),
    so np.sum([x, y]) is traced and differentiated to numpy's derivative, and runs
    compiled under jit with numpy's value. (np.NAME is looked up when called, as user code
    does: spmd's np.sum stands in numpy's module only while a function is traced.)"""
    def red(*a, **k):
        return getattr(np, name)(*a, **k)
    for form in (lambda w: red([w[0] ** 2, w[1] * 3.0]), lambda w: red(np.stack([w[0] ** 2, w[1] * 3.0]))):
        g = spmd.grad(form)(W2)
        assert isinstance(g, np.ndarray) and g.dtype == np.float64 and g.shape == (2,)
        np.testing.assert_allclose(g, want)
    with warnings.catch_warnings():
        warnings.simplefilter("error", spmd.FallbackWarning)
        v = spmd.jit(lambda w: red([w[0] ** 2, w[1] * 3.0]))(W2)
    np.testing.assert_allclose(np.asarray(v), red([W2[0] ** 2, W2[1] * 3.0]))


def test_a_list_given_to_a_function_spmd_does_not_stack_names_the_fix():
    """np.linalg.norm of a list of traced arrays: numpy converts the list itself; without a
    graph break (fallback=False) the error names the function, the line and np.stack."""
    with pytest.raises(spmd.ConcreteValueError, match=r"np\.norm of a Python list of traced arrays at "
                                                      r"test_grad\.py:\d+.*np\.stack"):
        spmd.grad(lambda w: np.linalg.norm([w[0] ** 2, w[1] * 3.0]))(W2)
