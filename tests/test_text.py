"""The IR text form: print -> parse -> print is identical, parsed graphs run the same,
and malformed text gets a ParseError (line, column, what was expected), nothing else."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import spmd
from spmd.compiler.backends.numpy import compile_numpy
from spmd.errors import ParseError
from spmd.ir import Graph, parse_graph
from spmd.ir.text import print_graph

MESH = spmd.Mesh((2, 2), ("data", "model"))


def _programs():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 6)).astype(np.float32)
    w = rng.standard_normal((6, 3)).astype(np.float32)
    i = np.array([2, 0, 1], np.int64)
    yield "mlp", lambda x, w: np.tanh(x @ w).sum(axis=1).mean(), (x, w)
    yield "grad", spmd.grad(lambda w, x: np.mean(np.maximum(x @ w, 0) ** 2)), (w, x)
    yield "index", lambda x, i: (x[1:, ::-2][None, ..., 0], x[i], x[:, 2] > 0), (x, i)
    yield "ints", lambda a: (a // 3 + a % 5, np.argmax(a, axis=0), a.astype(np.float64).prod()), \
        (np.arange(12, dtype=np.int32).reshape(3, 4),)
    yield "concat", lambda x: np.concatenate([x, x * 2], axis=1).T.reshape(3, 16), (x,)
    yield "einsum", lambda x, w: np.einsum("ij,jk->ki", x, w) + np.where(w.T > 0, 1.0, -1.0).sum(), (x, w)


PROGRAMS = list(_programs())


@pytest.mark.parametrize("name,f,args", PROGRAMS, ids=[p[0] for p in PROGRAMS])
def test_round_trip_and_same_results(name, f, args):
    g = spmd.jit(f).lower(*args).stages["traced"]
    text = print_graph(g)
    g2 = parse_graph(text)
    assert print_graph(g2) == text
    a = compile_numpy(g)([np.asarray(x) for x in args])
    b = compile_numpy(g2)([np.asarray(x) for x in args])
    for u, v in zip(a, b):
        np.testing.assert_array_equal(u, v)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64", "bool"])
@pytest.mark.parametrize("n", [1, 7, 40])          # inline and hex forms
def test_constants_round_trip_exactly(dtype, n):
    rng = np.random.default_rng(n)
    if dtype.startswith("float"):
        vals = rng.standard_normal(n).astype(dtype) * 1e7
        vals[: min(n, 4)] = np.array([np.nan, np.inf, -np.inf, -0.0], dtype)[: min(n, 4)]
    elif dtype == "bool":
        vals = rng.random(n) < 0.5
    else:
        info = np.iinfo(dtype)
        vals = rng.integers(info.min, info.max, n, dtype=dtype)
    g = Graph("c")
    g.outputs = [g.emit("constant", value=vals.reshape(1, n))]
    text = print_graph(g)
    g2 = parse_graph(text)
    assert print_graph(g2) == text
    got = g2.ops[0].attrs["value"]
    assert got.dtype == vals.dtype
    np.testing.assert_array_equal(got.view(np.uint8), vals.reshape(1, n).view(np.uint8))   # bit-exact


def test_shardings_and_mesh_round_trip():
    row = MESH.sharding("data", None)
    f = spmd.jit(lambda x, w: np.tanh(x @ w), in_shardings=(row, MESH.sharding(None, "model")))
    low = f.lower(np.ones((4, 6), np.float32), np.ones((6, 8), np.float32))
    for stage in ("propagated", "partitioned", "optimized"):
        text = low.as_text(stage)
        assert print_graph(parse_graph(text)) == text
    g = parse_graph(low.as_text("propagated"))
    assert g.mesh == MESH and g.inputs[0].sharding == row
    m = spmd.Mesh((2, 2), ("a", "b"), devices=[[3, 1], [0, 2]])
    g = Graph("p")
    g.mesh = m
    x = g.add_input((4, 4), "float32", m.sharding(("b", "a"), None))
    y = g.emit("negate", x)
    y.sharding = m.sharding(None, "a", partial="b")
    g.outputs = [y]
    text = print_graph(g)
    assert "devices=[3,1,0,2]" in text and "partial(b)" in text
    assert print_graph(parse_graph(text)) == text


BAD = [
    ("", "expected 'func'"),
    ("func @f() -> () {\n  return\n", "expected '}'"),
    ("func @f(%0: f32[2]) -> (f32[2]) {\n  %1 = nosuchop(%0) : f32[2]\n  return %1\n}", "unknown op"),
    ("func @f(%0: f32[2]) -> (f32[2]) {\n  %1 = negate(%5) : f32[2]\n  return %1\n}", "used before"),
    ("func @f(%0: f32[2]) -> (f32[2]) {\n  %0 = negate(%0) : f32[2]\n  return %0\n}", "defined twice"),
    ("func @f(%0: f32[2]) -> (f32[2]) {\n  %1 = negate(%0) : f32[3]\n  return %1\n}", "declares"),
    ("func @f(%0: f32[2]) -> (f32[2]) {\n  %1 = add(%0) : f32[2]\n  return %1\n}", "add"),
    ("func @f(%0: q8[2]) -> () {\n  return\n}", "unknown element type"),
    ("func @f(%0: f32[2]{data}) -> () {\n  return\n}", "needs a mesh"),
    ("func @f() -> (f32[2]) {\n  %1 = constant() {value=dense<f32[2], [1.0]>} : f32[2]\n  return %1\n}", "elements"),
    ("func @f() -> () {\n  %1 = iota() {dimension=0, dtype=\"float32\", shape=[[[[" + "[" * 100, "nested too deeply"),
    ("func @f(%0: f32[" + "9" * 5000 + "]) -> () {\n  return\n}", "too large"),
    ("\x00\xff garbage", "expected 'func'"),
]


@pytest.mark.parametrize("text,msg", BAD)
def test_malformed_text_is_a_clear_parse_error(text, msg):
    with pytest.raises(ParseError, match="line \\d+, column \\d+") as e:
        parse_graph(text)
    assert msg in str(e.value)


TEXTS = [spmd.jit(f).lower(*a).as_text("traced") for _, f, a in PROGRAMS]


@st.composite
def mutated(draw):
    text = draw(st.sampled_from(TEXTS))
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["delete", "insert", "replace", "truncate", "swap_lines"]))
        i = draw(st.integers(0, max(len(text) - 1, 0)))
        ch = draw(st.sampled_from(list("%{}[](),:=<>\"0123456789-e.xf _\n") + ["nan", "inf", "func", "%99"]))
        if kind == "delete":
            text = text[:i] + text[i + 1:]
        elif kind == "insert":
            text = text[:i] + ch + text[i:]
        elif kind == "replace":
            text = text[:i] + ch + text[i + 1:]
        elif kind == "truncate":
            text = text[:i]
        else:
            lines = text.split("\n")
            a, b = sorted(draw(st.lists(st.integers(0, len(lines) - 1), min_size=2, max_size=2)))
            lines[a], lines[b] = lines[b], lines[a]
            text = "\n".join(lines)
    return text


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_mutated_text_parses_consistently_or_raises_parse_error(text):
    try:
        g = parse_graph(text)
    except ParseError:
        return
    again = print_graph(g)
    assert print_graph(parse_graph(again)) == again


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_random_garbage_raises_parse_error(text):
    with pytest.raises(ParseError):
        parse_graph(text)
