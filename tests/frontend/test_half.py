"""float16 and bfloat16 (ml_dtypes) as storage dtypes: 2 bytes an element in memory, in
collectives, checkpoints and spmd.Array; native kernels compute in float32 and round each
op's result to the storage type (numpy and ml_dtypes compute these in float32 and round
per op too, so elementwise results agree to the last bit but for libm differences);
sums and dots accumulate in float32. Compared with numpy / ml_dtypes on several meshes."""
import os
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import spmd
from spmd.backends.llvm import scalar
from spmd.ir import dtypes
from spmd.ir.ops.names import ADD, CONVERT, EXP
from paths import SCRIPTS, TESTS

BF16 = np.dtype(ml_dtypes.bfloat16)
F16 = np.dtype(np.float16)
HALFS = [F16, BF16]
EPS = {F16: float(np.finfo(np.float16).eps), BF16: float(ml_dtypes.finfo(ml_dtypes.bfloat16).eps)}
MESHES = [None, (2,), (4,), (2, 2)]


def _mesh_jit(f, mesh, ndims, backend=None):
    kw = {} if backend is None else {"backend": backend}
    if mesh is None:
        return spmd.jit(f, **kw)
    m = spmd.Mesh(mesh, ("a", "b")[:len(mesh)])
    shs = tuple(m.sharding(*(m.axis_names + (None,) * 4)[:nd]) for nd in ndims)
    return spmd.jit(f, in_shardings=shs, **kw)


def close(got, want, dt, ulps=2, what=""):
    """|got - want| within `ulps` units of dt's precision at want's magnitude."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == dt, f"{what}: dtype {got.dtype} != {dt}"
    g, w = got.astype(np.float64), want.astype(np.float64)
    tol = ulps * EPS[dt] * np.maximum(np.abs(w), np.float64(np.finfo(np.float16).tiny if dt == F16 else 1e-30))
    bad = ~((np.abs(g - w) <= tol) | (np.isnan(g) & np.isnan(w)) | (g == w))
    assert not bad.any(), f"{what}: {g[bad][:5]} vs {w[bad][:5]}"


# -- dtypes and promotion ------------------------------------------------------------------
def test_dtype_names_and_text_round_trip():
    assert spmd.bfloat16 is ml_dtypes.bfloat16
    assert dtypes.canon("bfloat16") == dtypes.canon(ml_dtypes.bfloat16) == dtypes.canon(BF16) == "bfloat16"
    assert dtypes.canon(np.float16) == "float16"
    assert dtypes.SHORT["float16"] == "f16" and dtypes.SHORT["bfloat16"] == "bf16"
    from spmd.ir import parse_graph
    from spmd.ir.text import print_graph
    for dt in HALFS:
        x = np.array([[1.5, -0.0, np.inf], [np.nan, 3.140625, -2.0]]).astype(dt)
        big = (np.arange(40) / 7).astype(dt)
        low = spmd.jit(lambda a: a * x[0, 0] + np.sum(big)).lower(x)
        text = low.as_text("traced")
        assert ("bf16[2,3]" if dt == BF16 else "f16[2,3]") in text
        g = parse_graph(text)
        assert print_graph(g) == text


@pytest.mark.parametrize("a,b,want", [
    ("float16", "float32", "float32"), ("float16", "float64", "float64"), ("float16", "int32", "float64"),
    ("float16", "bool", "float16"), ("float16", 1.5, "float16"), ("float16", 3, "float16"),
    ("bfloat16", "float32", "float32"), ("bfloat16", "float64", "float64"), ("bfloat16", "int32", "float64"),
    ("bfloat16", "int64", "float64"), ("bfloat16", "bool", "bfloat16"), ("bfloat16", 1.5, "bfloat16"),
    ("bfloat16", 3, "bfloat16"), ("bfloat16", "float16", "float32"), ("bfloat16", "bfloat16", "bfloat16")])
def test_promotion(a, b, want):
    """numpy's NEP 50 rules (np.result_type) for float16; bfloat16 promotes as float16 does
    (ml_dtypes' arithmetic with arrays, jax), Python scalars are weak and keep it (jax;
    ml_dtypes' own result_type says float64 there), and float16 with bfloat16 is float32."""
    x = np.ones(3, a)
    y = b if not isinstance(b, str) else np.ones(3, b)
    got = spmd.jit(lambda x: x + y)(x)
    assert np.asarray(got).dtype == np.dtype(want)
    if a == "float16" or isinstance(b, str):         # what numpy / ml_dtypes' arithmetic gives
        assert (x + y).dtype == np.dtype(want)
    if not isinstance(b, str):                       # Python scalars are weak: the array's dtype
        assert want == a


# -- the conversions in native kernels -----------------------------------------------------
@pytest.fixture(params=["hardware", "software"])
def f16_path(request):
    """float16 conversions with the CPU's F16C instructions, and the integer code used where
    there are none (also checked where there are)."""
    old = scalar.HARD_F16["on"]
    if request.param == "software":
        scalar.HARD_F16["on"] = False
    elif not scalar.hard_f16():
        pytest.skip("no F16C on this CPU")
    yield request.param
    scalar.HARD_F16["on"] = old


@pytest.mark.parametrize("dt", HALFS, ids=["f16", "bf16"])
def test_every_half_value_converts_exactly(dt, f16_path):
    h = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(dt)
    up = np.asarray(spmd.jit(lambda a: a.astype(np.float32))(h))
    want = h.astype(np.float32)
    assert np.array_equal(up.view(np.uint32)[~np.isnan(want)], want.view(np.uint32)[~np.isnan(want)])
    assert np.isnan(up[np.isnan(want)]).all()
    # float32 -> half: random bit patterns, and exact ties and near-ties at every half value
    u = np.arange(65536, dtype=np.uint32)
    shift = 16 if dt == BF16 else 13
    half_ulp = 1 << (shift - 1)
    bits = np.concatenate([np.random.default_rng(0).integers(0, 2 ** 32, 100000, dtype=np.uint64).astype(np.uint32),
                           (u << shift) + half_ulp, (u << shift) + half_ulp - 1, (u << shift) + half_ulp + 1,
                           (u << 13) + 0x1000, ((u & 0x3FF) << 13) + 0x33000000])      # float16 subnormals
    f = bits.view(np.float32)
    with np.errstate(all="ignore"):
        want = f.astype(dt)
    got = np.asarray(spmd.jit(lambda a: a.astype(dt))(f))
    nan = np.isnan(want.astype(np.float32))
    assert np.isnan(got.astype(np.float32)[nan]).all()
    bad = got.view(np.uint16)[~nan] != want.view(np.uint16)[~nan]
    assert not bad.any(), (f[~nan][bad][:5], got[~nan][bad][:5], want[~nan][bad][:5])


@pytest.mark.parametrize("dt", HALFS, ids=["f16", "bf16"])
def test_float64_and_int_to_half_round_as_numpy_and_ml_dtypes(dt, f16_path):
    """float64 -> float16 rounds once, as numpy (a float32 step would round twice at ties);
    bfloat16 rounds through float32, as ml_dtypes does."""
    rng = np.random.default_rng(1)
    sh = np.uint64(42 if dt == F16 else 45)                 # the float64 bits the half drops
    base = rng.uniform(-70000, 70000, 5000)
    b = base.view(np.uint64)
    ties = ((b >> sh) << sh) | (np.uint64(1) << (sh - np.uint64(1)))
    f = np.concatenate([base, ties.view(np.float64), (ties + np.uint64(1)).view(np.float64),
                        rng.uniform(-1e-7, 1e-7, 500), [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e300, 65519.99]])
    with np.errstate(all="ignore"):
        want = f.astype(dt)
    got = np.asarray(spmd.jit(lambda a: a.astype(dt))(f))
    nan = np.isnan(want.astype(np.float32))
    assert np.isnan(got.astype(np.float32)[nan]).all()
    assert np.array_equal(got.view(np.uint16)[~nan], want.view(np.uint16)[~nan])
    i = np.concatenate([rng.integers(-2 ** 40, 2 ** 40, 1000), np.arange(-3000, 3000)])
    with np.errstate(all="ignore"):
        assert np.array_equal(np.asarray(spmd.jit(lambda a: a.astype(dt))(i)).view(np.uint16), i.astype(dt).view(np.uint16))


def test_kernels_call_no_conversion_libcall(f16_path):
    """The JIT resolves only symbols of this process: no __extendhfsf2 / __truncsfhf2."""
    from spmd.backends.llvm.codegen import kernel_ir
    from spmd.backends.llvm.fuse import fuse
    from spmd.backends.llvm.lowering_table import fusible
    from spmd.ir import Graph
    g = Graph("k")
    x = g.add_input((8,), "float16")
    y = g.add_input((8,), "bfloat16")
    r = g.emit(ADD, g.emit(EXP, g.emit(CONVERT, x, dtype="float32")), g.emit(CONVERT, y, dtype="float32"))
    g.outputs = [g.emit(CONVERT, r, dtype="float16"), g.emit(CONVERT, r, dtype="bfloat16")]
    text = ""
    for i, k in enumerate(fuse(g, fusible, frozenset()).kernels()):
        ir, decls, _ = kernel_ir(k, f"k{i}", 1)
        text += ir + "\n".join(decls)
        assert all("@llvm." in d for d in decls), decls
    assert "hf2" not in text
    assert ("half" in text) == (f16_path == "hardware")


# -- programs under jit on meshes ----------------------------------------------------------
def _ref_chain(ops, x, y, dt):
    """The chain in numpy on dt arrays (float16: numpy; bfloat16: ml_dtypes, per-op rounding).
    Constants are dt scalars so ml_dtypes keeps bfloat16 (it would give float32 for a Python
    float, where spmd keeps bfloat16 as jax does)."""
    c = lambda v: dt.type(v)  # noqa: E731
    for op in ops:
        if op == "add":
            x = x + y
        elif op == "mul":
            x = x * y
        elif op == "sub_c":
            x = x - c(0.75)
        elif op == "div":
            x = x / (np.abs(y) + c(1))
        elif op == "exp":
            x = np.exp(np.minimum(x, c(4)))
        elif op == "tanh":
            x = np.tanh(x)
        elif op == "max":
            x = np.maximum(x, y)
        elif op == "sqrt":
            x = np.sqrt(np.abs(x))
        elif op == "where":
            x = np.where(x > c(0), x, y * c(0.5))
        elif op == "square":
            x = x * x
    return x


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(st.sampled_from(["add", "mul", "sub_c", "div", "exp", "tanh", "max", "sqrt", "where", "square"]),
                    min_size=1, max_size=6),
       dt=st.sampled_from(HALFS), mesh=st.sampled_from(MESHES), shape=st.sampled_from([(8, 6), (7, 5), (4, 3)]),
       seed=st.integers(0, 1000))
def test_elementwise_chains_match_numpy_per_op(ops, dt, mesh, shape, seed):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-2, 2, shape).astype(dt)
    y = rng.uniform(-2, 2, shape).astype(dt)
    want = _ref_chain(ops, x, y, dt)
    got = _mesh_jit(lambda a, b: _ref_chain(ops, a, b, dt), mesh, (2, 2))(x, y)
    # one rounding per op, as numpy: only exp/tanh (polynomials vs libm) may be an ulp off,
    # and that ulp can grow through the chain
    n = sum(op in ("exp", "tanh", "div", "sqrt") for op in ops)
    close(got, want, dt, ulps=1 + 3 * n, what=f"{ops}")


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dt=st.sampled_from(HALFS), mesh=st.sampled_from(MESHES), shape=st.sampled_from([(16, 6), (9, 5), (4, 33)]),
       axis=st.sampled_from([None, 0, 1]), kind=st.sampled_from(["sum", "mean", "max", "min"]), seed=st.integers(0, 1000))
def test_reductions_accumulate_in_float32(dt, mesh, shape, axis, kind, seed):
    """Sums are at least as accurate as float32 accumulation, rounded once: within half an
    ulp (plus float32's error) of the exact sum of the half inputs."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-4, 4, shape).astype(dt)
    f = getattr(np, kind)
    got = _mesh_jit(lambda a: f(a, axis=axis), mesh, (2,))(x)
    exact = f(x.astype(np.float64), axis=axis)
    assert np.asarray(got).dtype == dt
    if kind in ("max", "min"):
        np.testing.assert_array_equal(np.asarray(got).astype(np.float64), exact)
        return
    n = x.size if axis is None else x.shape[axis]
    scale = np.abs(x.astype(np.float64)).sum(axis=axis) / (n if kind == "mean" else 1)
    err = np.abs(np.asarray(got).astype(np.float64) - exact)
    tol = EPS[dt] * np.abs(exact) / 2 + 1e-6 * n * scale + 1e-30
    if mesh is not None and kind == "sum":
        # a sum over a split dim: each device's partial sum is rounded to dt before the
        # all_reduce (2 bytes an element on the wire), half an ulp of each partial more
        tol = tol + EPS[dt] * scale / 2
    assert np.all(err <= tol), (err, exact)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dt=st.sampled_from(HALFS), mesh=st.sampled_from(MESHES), mkn=st.sampled_from([(8, 6, 4), (5, 7, 3), (16, 32, 8)]),
       seed=st.integers(0, 1000))
def test_matmul_in_float32_rounded_once(dt, mesh, mkn, seed):
    m, k, n = mkn
    rng = np.random.default_rng(seed)
    a = rng.uniform(-2, 2, (m, k)).astype(dt)
    b = rng.uniform(-2, 2, (k, n)).astype(dt)
    got = _mesh_jit(lambda a, b: a @ b, mesh, (2, 2))(a, b)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    scale = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))
    g = np.asarray(got)
    assert g.dtype == dt
    tol = EPS[dt] * np.abs(exact) / 2 + 1e-6 * k * scale
    if mesh is not None:          # a split contraction: partial products rounded to dt, then summed
        tol = tol + EPS[dt] * scale / 2
    assert np.all(np.abs(g.astype(np.float64) - exact) <= tol)


@pytest.mark.parametrize("mesh", MESHES)
def test_mlp_training_step_bf16_params_f32_master(mesh):
    """bfloat16 weights and activations, float32 master weights updated by bfloat16 grads:
    the gradients are bfloat16 (as in jax), the loss goes down, and it tracks a float32
    reference step to bfloat16's precision."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((16, 8)).astype(np.float32)
    y = rng.standard_normal((16, 2)).astype(np.float32)
    master = {"w1": rng.standard_normal((8, 16)).astype(np.float32) * 0.3,
              "w2": rng.standard_normal((16, 2)).astype(np.float32) * 0.3}

    def loss(p, x, y):
        h = np.maximum(x @ p["w1"], 0)
        return np.mean((h @ p["w2"] - y) ** 2)

    def step(master, x, y):
        p = {k: v.astype(spmd.bfloat16) for k, v in master.items()}
        lval, g = spmd.value_and_grad(loss)(p, x.astype(spmd.bfloat16), y.astype(spmd.bfloat16))
        return lval, {k: master[k] - 0.05 * g[k].astype(np.float32) for k in master}, g

    if mesh is None:
        f = spmd.jit(step)
    else:
        m = spmd.Mesh(mesh, ("a", "b")[:len(mesh)])
        row = m.sharding(m.axis_names[0], None)
        f = spmd.jit(step, in_shardings=(None, row, row))
    losses, p = [], master
    for _ in range(5):
        lval, p, g = f(p, x, y)
        assert np.asarray(lval).dtype == BF16 and all(np.asarray(v).dtype == BF16 for v in g.values())
        losses.append(float(np.asarray(lval).astype(np.float32)))
        p = {k: np.asarray(v) for k, v in p.items()}
    assert losses[-1] < losses[0]
    # the same step in float32 from the same start
    ref = spmd.jit(lambda m, x, y: spmd.value_and_grad(loss)(m, x, y))(master, x, y)
    assert abs(float(np.asarray(ref[0])) - losses[0]) <= 4 * EPS[BF16] * abs(losses[0]) + 1e-3


def test_grad_cotangents_keep_the_dtype():
    for dt in HALFS:
        x = np.linspace(-1, 1, 12).reshape(3, 4).astype(dt)
        g = spmd.jit(spmd.grad(lambda a: np.sum(np.tanh(a) * a)))(x)
        xx = x.astype(np.float64)
        want = np.tanh(xx) + xx * (1 - np.tanh(xx) ** 2)
        close(g, want.astype(dt), dt, ulps=4)


# -- bytes: memory, wire, checkpoints, eager -----------------------------------------------
@pytest.mark.parametrize("dt", HALFS, ids=["f16", "bf16"])
def test_collectives_move_two_bytes_an_element(dt):
    mesh = spmd.Mesh((4,), ("x",))
    x = np.ones((8, 6), dt)
    f = spmd.jit(lambda a: np.sum(a, axis=0), in_shardings=(mesh.sharding("x", None),))
    cols = f.lower(x).report()["collectives"]
    assert [c["op"] for c in cols] == ["all_reduce"] and cols[0]["dtype"] == dt.name
    assert cols[0]["bytes"] == 6 * 2
    assert "all_reduce" in f.lower(x).as_text("partitioned") and (
        "bf16[6]" if dt == BF16 else "f16[6]") in f.lower(x).as_text("partitioned")
    np.testing.assert_array_equal(np.asarray(f(x)), np.full(6, 8, dt))
    g = spmd.jit(lambda a: a.T @ a, in_shardings=(mesh.sharding(None, "x"),))     # an all_gather
    assert all(c["bytes"] % 2 == 0 and c["dtype"] == dt.name for c in g.lower(x).report()["collectives"])
    a = spmd.device_put(x, mesh.sharding("x", None))
    assert a.dtype == dt and a.local.dtype == dt and a.local.nbytes == 2 * 6 * 2      # a (2, 6) shard


@pytest.mark.parametrize("mesh", [(2,), (4,), (2, 2)])
def test_every_local_collective_on_half_dtypes(mesh):
    from collective_checks import CheckHalfCollectives
    from spmd.transports.local.local_runtime import LocalRuntime
    m = spmd.Mesh(mesh, ("a", "b")[:len(mesh)])
    out = LocalRuntime().run(CheckHalfCollectives(), m, {d: [] for d in range(m.size)})
    counts = {int(v[0]) for v in out.values()}
    assert len(counts) == 1 and counts.pop() >= 20


def test_local_collectives_sum_in_float32():
    from spmd.transports.communicator import reduce_arrays
    for dt in HALFS:
        xs = [np.full(3, 1.0, dt)] + [np.full(3, EPS[dt] / 4, dt)] * 8     # float16 adds would drop each
        got = reduce_arrays("sum", xs)
        assert got.dtype == dt and float(got[0]) == float(np.asarray(1 + 2 * EPS[dt], dt).astype(np.float32))


def test_checkpoint_round_trip(tmp_path):
    mesh = spmd.Mesh((2, 2), ("a", "b"))
    x = (np.arange(35).reshape(7, 5) / 3).astype(BF16)
    y = (np.arange(35).reshape(7, 5) / 3).astype(F16)
    tree = {"a": spmd.device_put(x, mesh.sharding("a", "b")), "b": y, "c": spmd.device_put(y, mesh.sharding(None, "b"))}
    spmd.save(str(tmp_path / "ck"), tree)
    r = spmd.load(str(tmp_path / "ck"))
    for k, want in (("a", x), ("b", y), ("c", y)):
        got = np.asarray(r[k].numpy() if hasattr(r[k], "numpy") else r[k])
        assert got.dtype == want.dtype and np.array_equal(got.view(np.uint16), want.view(np.uint16)), k
    files = [f for f in os.listdir(tmp_path / "ck") if f.endswith(".npy")]
    assert files and sum(os.path.getsize(tmp_path / "ck" / f) for f in files) <= 3 * 35 * 2 + 128 * len(files)     # 2 bytes an element


@pytest.mark.parametrize("dt", HALFS, ids=["f16", "bf16"])
def test_eager_ops_on_sharded_arrays(dt):
    mesh = spmd.Mesh((2, 2), ("a", "b"))
    x = np.linspace(0.5, 3, 48).reshape(8, 6).astype(dt)
    a = spmd.device_put(x, mesh.sharding("a", "b"))
    c = dt.type(2)
    r = (a * c + a).sum(axis=0)
    assert isinstance(r, spmd.Array) and r.dtype == dt
    close(r.numpy(), (x.astype(np.float32) * 3).sum(axis=0).astype(dt), dt, ulps=3)   # partial sums rounded
    e = np.exp(a)
    assert isinstance(e, spmd.Array) and e.dtype == dt
    close(e.numpy(), np.exp(x), dt, ulps=2)


@pytest.mark.slow
@pytest.mark.mpi
@pytest.mark.timeout(240)
def test_mpi_bf16_all_reduce():
    from spmd.transports.mpi.mpi_launch import find_mpiexec
    mpiexec = find_mpiexec()
    if mpiexec is None:
        pytest.skip("no mpiexec")
    root = os.path.dirname(TESTS)
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("SPMD_BACKEND", None)
    p = subprocess.run([mpiexec, "-n", "4", sys.executable, os.path.join(SCRIPTS, "half.py")],
                       capture_output=True, text=True, timeout=200, env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.count("OK") == 4, p.stdout
