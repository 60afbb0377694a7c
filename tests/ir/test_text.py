"""The IR text form: print -> parse -> print is identical, parsed graphs run the same,
and malformed text gets a ParseError (line, column, what was expected), nothing else."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from opinfo import ops_to_test, samples

import spmd
import spmd.ir.text
from spmd.backends.numpy_backend import compile_numpy
from spmd.errors import ParseError
from spmd.ir import Graph, parse_graph
from spmd.ir.ops.names import ADD, BROADCAST_IN_DIM, CONSTANT, NEGATE, REDUCE
from spmd.ir.text import print_graph
from spmd.sharding import Sharding
from spmd.tree import tree_leaves

MESH = spmd.Mesh((2, 2), ("data", "model"))


def round_trip(g):
    text = print_graph(g)
    g2 = parse_graph(text)
    assert print_graph(g2) == text
    return text, g2


def _programs():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 6)).astype(np.float32)
    w = rng.standard_normal((6, 3)).astype(np.float32)
    i = np.array([2, 0, 1], np.int64)
    c = np.float32([0.1, 1 / 3, 3.4028235e38, 1e-45])     # closed over: needs full precision
    yield "mlp", lambda x, w: np.tanh(x @ w).sum(axis=1).mean(), (x, w)
    yield "grad", spmd.grad(lambda w, x: np.mean(np.maximum(x @ w, 0) ** 2)), (w, x)
    yield "index", lambda x, i: (x[1:, ::-2][None, ..., 0], x[i], x[:, 2] > 0), (x, i)
    yield "ints", lambda a: (a // 3 + a % 5, np.argmax(a, axis=0), a.astype(np.float64).prod()), \
        (np.arange(12, dtype=np.int32).reshape(3, 4),)
    yield "concat", lambda x: np.concatenate([x, x * 2], axis=1).T.reshape(3, 16), (x,)
    yield "einsum", lambda x, w: np.einsum("ij,jk->ki", x, w) + np.where(w.T > 0, 1.0, -1.0).sum(), (x, w)
    yield "consts", lambda x: (x[:, :4] * c, x * np.arange(24.0).reshape(4, 6), x > np.float32(-0.0)), (x,)
    yield "unary", lambda x: (np.exp(-np.abs(x)) + np.log1p(x * x) + np.sqrt(np.square(np.sin(x)))
                              - np.clip(np.cos(x), -0.5, 0.5)), (x,)
    yield "stack", lambda x: np.stack([x.max(axis=0), x.min(axis=0)]).squeeze() @ np.ones((6, 2)), (x,)
    yield "value_and_grad", spmd.value_and_grad(lambda p, x: ((x @ p["w"] + p["b"]) ** 2).sum()), \
        ({"w": w, "b": np.zeros(3, np.float32)}, x)


PROGRAMS = list(_programs())


def _flat(args):
    return [np.asarray(a) for a in tree_leaves(args)]      # a traced graph takes the pytree's leaves


@pytest.mark.parametrize("name,f,args", PROGRAMS, ids=[p[0] for p in PROGRAMS])
def test_traced_programs_round_trip_and_run_the_same(name, f, args):
    g = spmd.jit(f).lower(*args).stages["traced"]
    _, g2 = round_trip(g)
    flat = _flat(args)
    a = compile_numpy(g)(flat)
    b = compile_numpy(g2)(flat)
    assert len(a) == len(b) > 0
    for u, v in zip(a, b):
        np.testing.assert_array_equal(u, v)


def test_every_registry_op_round_trips_and_runs_the_same():
    """One graph per OpInfo sample: every op, every dtype, 0-d / size-1 / empty shapes."""
    rng = np.random.default_rng(1)
    seen = set()
    for name in ops_to_test():
        for operands, attrs in samples(name, rng):
            g = Graph(name)
            ins = [g.add_input(o.shape, o.dtype.name) for o in operands]
            out = g.emit(name, *ins, loc="model.py:7", **attrs)
            g.outputs = list(out) if isinstance(out, tuple) else [out]
            _, g2 = round_trip(g)
            for u, v in zip(compile_numpy(g)(operands), compile_numpy(g2)(operands)):
                assert u.dtype == v.dtype
                np.testing.assert_array_equal(u, v)
            seen.add(name)
    assert seen == set(ops_to_test())


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64", "bool"])
@pytest.mark.parametrize("n", [0, 1, 7, 40])          # inline (<= 16 elements) and hex forms
def test_constants_round_trip_bit_exactly(dtype, n):
    rng = np.random.default_rng(n)
    if dtype.startswith("float"):
        info = np.finfo(dtype)
        vals = rng.standard_normal(n).astype(dtype) * 1e7
        special = np.array([np.nan, np.inf, -np.inf, -0.0, 0.1, 1 / 3, info.max, info.smallest_subnormal,
                            -info.tiny, np.nextafter(np.array(1, dtype), 2)], dtype)
        vals[: min(n, len(special))] = special[: min(n, len(special))]
    elif dtype == "bool":
        vals = rng.random(n) < 0.5
    else:
        info = np.iinfo(dtype)
        vals = rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
        vals[: min(n, 2)] = [info.min, info.max][: min(n, 2)]
    g = Graph("c")
    g.outputs = [g.emit(CONSTANT, value=vals.reshape(1, n)), g.emit(CONSTANT, value=vals[:1].reshape(()))
                 if n else g.emit(CONSTANT, value=np.zeros((), dtype))]
    text, g2 = round_trip(g)
    assert ("0x" in text) == (n > 16)
    for op, op2 in zip(g.ops, g2.ops):
        got, want = op2.attrs["value"], op.attrs["value"]
        assert got.dtype == want.dtype and got.shape == want.shape
        assert got.tobytes() == want.tobytes()                          # bit-exact, nan and -0.0 too


def test_shardings_and_mesh_round_trip():
    row = MESH.sharding("data", None)
    f = spmd.jit(lambda x, w: np.tanh(x @ w).sum(axis=1), in_shardings=(row, MESH.sharding(None, "model")))
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
    y = g.emit(NEGATE, x)
    y.sharding = m.sharding(None, "a", partial="b")
    s = g.emit(REDUCE, y, axes=(0, 1), kind="sum")
    s.sharding = Sharding(m, (), ("a", "b"))
    g.outputs = [y, s]
    text, g2 = round_trip(g)
    assert "devices=[3,1,0,2]" in text and "{(b,a), _}" in text and "partial(b)" in text
    assert g2.mesh == m and np.array_equal(g2.mesh.devices, m.devices)
    assert [v.sharding for v in g2.values()] == [v.sharding for v in g.values()]


AXES = ("x", "y", "z")


@st.composite
def sharded_graphs(draw):
    """A random mesh, and shardings set by hand on every value of a small graph."""
    k = draw(st.integers(1, 3))
    mesh = spmd.Mesh(tuple(draw(st.integers(1, 3)) for _ in range(k)), AXES[:k])

    def sharding(ndim):
        free = list(mesh.axis_names)
        spec = []
        for _ in range(ndim):
            n = draw(st.integers(0, min(2, len(free))))
            axes = tuple(free.pop(draw(st.integers(0, len(free) - 1))) for _ in range(n))
            spec.append(axes or None)
        partial = [a for a in free if draw(st.booleans())]
        return Sharding(mesh, spec, partial)

    g = Graph("sharded")
    g.mesh = mesh
    x = g.add_input((4, 6), "float32", sharding(2))
    w = g.add_input((6,), "float32", sharding(1))
    b = g.emit(BROADCAST_IN_DIM, w, broadcast_dimensions=(1,), shape=(4, 6))
    y = g.emit(ADD, x, b)
    z = g.emit(REDUCE, y, axes=(1,), kind="max")
    for v in (b, y, z):
        if draw(st.booleans()):
            v.sharding = sharding(v.ndim)
    g.outputs = [z, y]
    return g


@settings(max_examples=60, deadline=None)
@given(sharded_graphs())
def test_random_shardings_round_trip(g):
    _, g2 = round_trip(g)
    assert g2.mesh == g.mesh
    assert [v.sharding for v in g2.values()] == [v.sharding for v in g.values()]


def test_odd_function_names_and_crlf_line_ends():
    g = Graph("my step <v2>")
    g.outputs = [g.emit(NEGATE, g.add_input((2,), "float64"))]
    text, g2 = round_trip(g)
    assert g2.name == "my step <v2>"
    assert print_graph(parse_graph(text.replace("\n", "\r\n"))) == text


GOOD = "func @f(%0: f32[2]) -> (f32[2]) {\n  %1 = negate(%0) : f32[2]\n  return %1\n}\n"


def _op(line, args="%0: f32[2]", res="f32[2]", ret="%1", head="func @f"):
    return f"{head}({args}) -> ({res}) {{\n  {line}\n  return {ret}\n}}\n"


# (text, a phrase the message must hold, the line the error must name)
BAD = [
    ("", "expected 'func'", 1),
    ("\x00\xff garbage", "expected 'func'", 1),
    ("func @f() -> () {\n  return\n", "expected '}'", 3),
    (GOOD[:40], "", 2),                                                         # truncated
    (GOOD + "junk", "end of the text", 5),
    (_op("%1 = nosuchop(%0) : f32[2]"), "unknown op 'nosuchop'", 2),
    (_op("%1 = negate(%5) : f32[2]"), "%5 is used before it is defined", 2),
    (_op("%1 = add(%1, %0) : f32[2]"), "%1 is used before it is defined", 2),
    (_op("%0 = negate(%0) : f32[2]", ret="%0"), "%0 is defined twice", 2),
    (_op("%1 = negate(%0) : f32[2]", args="%0: f32[2], %0: f32[2]"), "%0 is defined twice", 1),
    (_op("%1 = negate(%0) : f32[3]"), "negate gives f32[2] but the line declares f32[3]", 2),
    (_op("%1 = negate(%0) : i32[2]"), "negate gives f32[2] but the line declares i32[2]", 2),
    (_op("%1 = add(%0) : f32[2]"), "add", 2),                                    # wrong operand count
    (_op("%1 = add(%0, %0, %0) : f32[2]"), "add", 2),
    (_op("%1, %2 = negate(%0) : f32[2], f32[2]"), "negate has 1 results", 2),
    (_op("%1 = negate(%0) : f32[2]", res="f64[2]"), "returned value 0 is f32[2]", 3),
    (_op("%1 = negate(%0) : f32[2]", res="f32[2], f32[2]"), "declares 2 results but return gives 1", 3),
    (_op("%1 = negate(%0) {loc=\"x\"} : f32[2]"), "'loc' is not an attribute name", 2),
    (_op("%1 = negate(%0) : f32[2] loc(\"\\q\")"), "bad escape", 2),
    (_op("%1 = transpose(%0) {permutation=[1.5]} : f32[2]"), "transpose", 2),
    ("func @f(%0: q8[2]) -> () {\n  return\n}", "unknown element type 'q8'", 1),
    ("func @f(%0: f32[2]{data}) -> () {\n  return\n}", "needs a mesh", 1),
    ("func @f mesh<a=2>(%0: f32[2]{b}) -> () {\n  return\n}", "unknown mesh axis 'b'", 1),
    ("func @f mesh<a=2>(%0: f32[2]{(a,}) -> () {\n  return\n}", "expected a mesh axis name", 1),
    ("func @f mesh<a=2>(%0: f32[2]{" + "(" * 10000 + "}) -> () {\n  return\n}", "expected a mesh axis", 1),
    ("func @f mesh<a=2>(%0: f32[2]{a, _}) -> () {\n  return\n}", "rank 1", 1),
    ("func @f mesh<a=2>(%0: f32[2]{a}) -> (f32[2]) {\n  return %0\n}", "returned value 0 is f32[2]{a}", 2),
    ("func @f mesh<a=2, a=2>() -> () {\n  return\n}", "distinct", 1),
    ("func @f mesh<a=1048576, b=1048576>() -> () {\n  return\n}", "larger than", 1),   # no allocation
    ("func @f mesh<a=2, devices=[0,0]>() -> () {\n  return\n}", "devices", 1),
    ("func @f mesh<a=2, devices=[0]>() -> () {\n  return\n}", "1 entries", 1),
    ("func @f(%0: f32[" + "9" * 5000 + "]) -> () {\n  return\n}", "too large", 1),
    ("func @f(%0: f32[4294967296,4294967296]) -> () {\n  return\n}", "elements", 1),
    ("func @f(%0: f32[-1]) -> () {\n  return\n}", "out of range", 1),
    (_op('%1 = constant() {value=dense<f32[2], [1.0]>} : f32[2]', args=""), "1 elements, f32[2] needs 2", 2),
    (_op('%1 = constant() {value=dense<f32[2], [1.0, 2.0, 3.0]>} : f32[2]', args=""), "more than", 2),
    (_op('%1 = constant() {value=dense<f32[1], [1e39]>} : f32[1]', args="", res="f32[1]"), "fit float32", 2),
    (_op('%1 = constant() {value=dense<f64[1], [1e999]>} : f64[1]', args="", res="f64[1]"), "float64", 2),
    (_op('%1 = constant() {value=dense<i32[1], [2147483648]>} : i32[1]', args="", res="i32[1]"), "int32", 2),
    (_op('%1 = constant() {value=dense<i32[1], [1.5]>} : i32[1]', args="", res="i32[1]"), "integer", 2),
    (_op('%1 = constant() {value=dense<pred[1], [1]>} : pred[1]', args="", res="pred[1]"), "true or false", 2),
    (_op('%1 = constant() {value=dense<f32[2], "0xzz">} : f32[2]', args=""), "hex", 2),
    (_op('%1 = constant() {value=dense<f32[2], "0x0000803f">} : f32[2]', args=""), "4 bytes", 2),
    (_op('%1 = constant() {value=dense<pred[1], "0x02">} : pred[1]', args="", res="pred[1]"), "00 or 01", 2),
    (_op('%1 = constant() {value=dense<f32[1]{a}, [1.0]>} : f32[1]', args="", res="f32[1]"), "sharding", 2),
    (_op('%1 = iota() {dimension=99999999999999999999999, dtype="float32", shape=[2]} : f32[2]', args=""),
     "int64", 2),
    (_op('%1 = iota() {dimension=0, shape=' + "[" * 100 + "]" * 100 + '} : f32[2]', args=""), "too deeply", 2),
]


@pytest.mark.parametrize("text,msg,line", BAD, ids=[f"bad{i}" for i in range(len(BAD))])
def test_malformed_text_is_a_clear_parse_error(text, msg, line):
    with pytest.raises(ParseError, match=r"^line \d+, column \d+: ") as e:
        parse_graph(text)
    assert msg in str(e.value)
    assert e.value.line == line, str(e.value)


def test_parse_error_points_at_the_column():
    with pytest.raises(ParseError) as e:
        parse_graph(_op("%1 = negate(%7) : f32[2]"))
    assert (e.value.line, e.value.column) == (2, 15)
    assert str(e.value).splitlines()[-1] == " " * 16 + "^"
    with pytest.raises(ParseError, match="takes a str"):
        parse_graph(b"func")


def _fuzz_texts():
    texts = [spmd.jit(f).lower(*a).as_text("traced") for _, f, a in PROGRAMS[:6]]
    g = Graph("k")
    g.outputs = [g.emit(CONSTANT, value=np.linspace(-1, 1, 20, dtype=np.float32)),
                 g.emit(CONSTANT, value=np.array([True, False]))]
    texts.append(print_graph(g))
    row = MESH.sharding("data", None)
    f = spmd.jit(lambda x, w: np.tanh(x @ w).sum(axis=0), in_shardings=(row, MESH.sharding(None, "model")))
    low = f.lower(np.ones((4, 6), np.float32), np.ones((6, 8), np.float32))
    texts += [low.as_text("propagated"), low.as_text("partitioned")]
    return texts


TEXTS = _fuzz_texts()
PIECES = list("%{}[](),:=<>\"0123456789-e.x_ \n\\") + [
    "nan", "inf", "func", "%99", "%1", "true", "none", "dense<", "mesh<", "partial(", "loc(", "f32[",
    "pred", "{data, _}", "0x", "\x00", "\u00e9", "9" * 30, "[" * 70]


@st.composite
def mutated(draw):
    text = draw(st.sampled_from(TEXTS))
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["delete", "insert", "replace", "truncate", "swap_lines", "dup_line"]))
        i = draw(st.integers(0, max(len(text) - 1, 0)))
        piece = draw(st.sampled_from(PIECES))
        if kind == "delete":
            text = text[:i] + text[i + draw(st.integers(1, 8)):]
        elif kind == "insert":
            text = text[:i] + piece + text[i:]
        elif kind == "replace":
            text = text[:i] + piece + text[i + 1:]
        elif kind == "truncate":
            text = text[:i]
        else:
            lines = text.split("\n")
            a, b = (draw(st.integers(0, len(lines) - 1)) for _ in range(2))
            if kind == "swap_lines":
                lines[a], lines[b] = lines[b], lines[a]
            else:
                lines.insert(b, lines[a])
            text = "\n".join(lines)
    return text


def _parses_consistently_or_raises_parse_error(text):
    try:
        g = parse_graph(text)
    except ParseError as e:
        assert str(e).startswith("line ")
        return
    again = print_graph(g)
    assert print_graph(parse_graph(again)) == again


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_mutated_text_parses_consistently_or_raises_parse_error(text):
    _parses_consistently_or_raises_parse_error(text)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300) | st.text(alphabet="func@%(){}[]<>=:,-0123456789 \nf32", max_size=300))
def test_random_garbage_raises_parse_error(text):
    with pytest.raises(ParseError):
        parse_graph(text)
