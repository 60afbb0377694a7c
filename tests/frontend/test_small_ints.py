"""int8, int16, uint8, uint16, uint32 and uint64, compared with numpy 2 (its documented
behaviour is the spec): wrap-around arithmetic, floor division and modulo, unsigned
comparisons and shifts, NEP 50 promotion with Python scalars (uint8 + 1 stays uint8,
uint8 + 300 is an OverflowError), the platform-int accumulators of sum / prod / cumsum,
astype in every direction, over sharded arrays on meshes of 2 and 4, under jit and eager.
Each property is one program per dtype and mesh, so hypothesis' examples reuse it."""
import platform

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import spmd

SMALL = ["int8", "int16", "uint8", "uint16", "uint32", "uint64"]
OLD = ["int32", "int64", "bool", "float32", "float64"]
N = 6                  # on 4 devices: uneven shards, padding to mask
MODES = [(m, mode) for m in (2, 4) for mode in ("jit", "eager")]
SETTINGS = dict(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def mesh_of(n):
    return spmd.Mesh((n,), ("a",))


def run(f, args, n, mode):
    """f on args sharded over a mesh of n along their first dim, under jit or eagerly."""
    m = mesh_of(n)
    shs = tuple(m.sharding("a") for _ in args)
    if mode == "jit":
        out = spmd.jit(f, in_shardings=shs)(*args)
    else:
        out = f(*[spmd.device_put(a, s) for a, s in zip(args, shs)])
    return [np.asarray(o.numpy() if hasattr(o, "numpy") else o) for o in out]


def same(got, want, what, rtol=0.0):
    """The same dtype, shape and values (floats: NaN where numpy's; rtol for a float sum,
    whose rounding depends on the order of the shards)."""
    want = np.asarray(want)
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype}, numpy {want.dtype}"
    assert got.shape == want.shape, f"{what}: shape {got.shape}, numpy {want.shape}"
    if want.dtype.kind == "f":
        ok = np.isclose(got, want, rtol=rtol, atol=0, equal_nan=True) | (got == want)
    else:
        ok = got == want
    assert np.all(ok), f"{what}: {got} != numpy's {want}"


def values(dt):
    """Arrays of N values of dt, edge values (0, 1, max, min, max - 1, -1) among them."""
    info = np.iinfo(dt)
    lo, hi = int(info.min), int(info.max)
    edges = sorted({0, 1, hi, lo, hi - 1, lo + 1, max(lo, -1), 2, 7, hi // 2, hi // 2 + 1})
    one = st.one_of(st.sampled_from(edges), st.integers(lo, hi))
    return st.lists(one, min_size=N, max_size=N).map(lambda v: np.array(v, dtype=dt))


def binary_ops(a, b, e, s):
    """numpy's binary ops on two arrays of one dtype; e: small exponents, s: shift counts."""
    return (a + b, a - b, a * b, a // b, a % b, a / b, np.floor_divide(a, b), np.fmod(a, b),
            a < b, a <= b, a == b, a != b, a > b, a >= b,
            np.maximum(a, b), np.minimum(a, b), a & b, a | b, a ^ b, ~a, -a, np.abs(a), np.sign(a),
            a ** e, a << s, a >> s, np.where(a > b, a, b), np.square(a))


@pytest.mark.parametrize("n,mode", MODES)
@pytest.mark.parametrize("dt", SMALL)
@settings(**SETTINGS)
@given(data=st.data())
def test_elementwise_match_numpy(dt, n, mode, data):
    a, b = data.draw(values(dt)), data.draw(values(dt))
    bits = np.dtype(dt).itemsize * 8
    e = np.array(data.draw(st.lists(st.integers(0, 3), min_size=N, max_size=N)), dt)
    # shift counts past the width too (numpy: every bit shifted out)
    s = np.array(data.draw(st.lists(st.integers(0, bits + 2), min_size=N, max_size=N)), dt)
    with np.errstate(all="ignore"):
        want = binary_ops(a, b, e, s)
        got = run(binary_ops, (a, b, e, s), n, mode)
    for i, (g, w) in enumerate(zip(got, want)):
        same(g, w, f"{dt} op {i} of binary_ops, a={a}, b={b}")


def reductions(a):
    out = [np.sum(a), np.prod(a), np.min(a), np.max(a), np.cumsum(a), np.cumprod(a), np.mean(a),
           np.sum(a, dtype=a.dtype), np.prod(a, dtype=a.dtype), np.cumsum(a, dtype=a.dtype),
           np.sum(a, dtype=np.int64), np.sum(a, dtype=np.float64), np.argmax(a), np.argmin(a),
           np.sum(a[:, None] * a[None, :2], axis=0)]
    return out


@pytest.mark.parametrize("n,mode", MODES)
@pytest.mark.parametrize("dt", SMALL)
@settings(**SETTINGS)
@given(data=st.data())
def test_reductions_accumulate_as_numpy(dt, n, mode, data):
    """sum / prod / cumsum of a small int accumulate in int64 (signed) or uint64 (unsigned),
    with dtype= in that dtype (wrapping), min / max in the dtype, over uneven shards."""
    a = data.draw(values(dt))
    with np.errstate(all="ignore"):
        want = reductions(a)
        got = run(lambda x: reductions(x), (a,), n, mode)
    for i, (g, w) in enumerate(zip(got, want)):
        same(g, w, f"{dt} reduction {i}, a={a}", rtol=1e-15)


def convertible(src, dsts):
    """Values of src that convert exactly to every dst (numpy leaves a float outside an
    integer's range undefined): floats with fractions, inside the narrowest int's range."""
    src = np.dtype(src)
    if src == np.bool_:
        return st.lists(st.booleans(), min_size=N, max_size=N).map(lambda v: np.array(v))
    if src.kind in "iu":
        return values(src)
    ints = [np.iinfo(d) for d in dsts if np.dtype(d).kind in "iu"]
    lo, hi = max(int(i.min) for i in ints), min(int(i.max) for i in ints)
    x = st.one_of(st.sampled_from([0.0, -0.0, 0.5, -0.75, 1.0, 255.0, -128.0, 127.99]),
                  st.floats(-2.0 ** 40, 2.0 ** 40, width=32))
    return st.lists(x.filter(lambda v: lo <= v < hi + 1 and v > lo - 1), min_size=N, max_size=N) \
        .map(lambda v: np.array(v, src))


ALL = SMALL + OLD


@pytest.mark.parametrize("n,mode", [(2, "jit"), (4, "eager")])
@pytest.mark.parametrize("src", ALL)
@settings(**SETTINGS)
@given(data=st.data())
def test_astype_every_pair(src, n, mode, data):
    """x.astype(dst) for every pair: wrapping between ints (numpy's C casts: trunc, zext,
    sext), exact int -> float, floats truncated toward zero where the value fits."""
    dsts = ALL if np.dtype(src).kind != "f" else [d for d in ALL if d != "bool"] + ["bool"]
    a = data.draw(convertible(src, [d for d in dsts if np.dtype(src).kind != "f" or d != "bool"]))
    f = lambda x: [x.astype(d) for d in dsts]   # noqa: E731
    with np.errstate(all="ignore"):
        want = f(a)
    got = run(f, (a,), n, mode)
    for d, g, w in zip(dsts, got, want):
        same(g, w, f"{a!r}.astype({d})")


SCALARS = [1, -1, 128, 300, 2 ** 31, 2 ** 63, -0.5, True]


@pytest.mark.parametrize("n,mode", [(2, "jit"), (4, "eager")])
@pytest.mark.parametrize("dt", SMALL)
def test_python_scalars_are_weak(dt, n, mode):
    """NEP 50: a Python int takes the array's dtype (uint8 + 1 is uint8, wrapping) and one
    out of its range is numpy's OverflowError; a float makes the float dtype numpy gives.
    Comparisons take any Python int by value (uint8 < 300 is True)."""
    info = np.iinfo(dt)
    a = np.array([0, 1, info.max, info.min, 7, info.max - 1], dt)
    forms = [lambda x, c: (x + c, c * x, x - c, x // c if c else x, np.maximum(x, c)),
             lambda x, c: (x < c, c < x, x == c, c != x, x >= c, np.less_equal(x, c))]
    for c, form in ((c, form) for c in SCALARS for form in forms):
        f = lambda x: form(x, c)   # noqa: E731
        try:
            with np.errstate(all="ignore"):
                want = f(a)
        except OverflowError:
            with pytest.raises(OverflowError):
                run(f, (a,), n, mode)
            continue
        for i, (g, w) in enumerate(zip(run(f, (a,), n, mode), want)):
            same(g, w, f"{dt} with {c!r}, op {i}")


@pytest.mark.parametrize("n,mode", [(2, "jit"), (4, "eager")])
@pytest.mark.parametrize("dt", ALL)
def test_mixed_dtypes_promote_as_numpy(dt, n, mode):
    """np.result_type for every pair: uint8 + int8 is int16, uint64 + int64 is float64,
    uint32 + float32 is float64; the values too."""
    a = (np.arange(N) * 37 - 50).astype(dt) if dt != "bool" else np.arange(N) % 2 == 0
    others = [(np.arange(N) * 11 + 3).astype(d) if d != "bool" else np.arange(N) % 3 == 0 for d in ALL]
    f = lambda x, *ys: [x + y for y in ys] + [x < y for y in ys]   # noqa: E731
    with np.errstate(all="ignore"):
        want = f(a, *others)
    got = run(f, (a, *others), n, mode)
    for i, (g, w) in enumerate(zip(got, want)):
        same(g, w, f"{dt} with {ALL[i % len(ALL)]}")


@pytest.mark.parametrize("mode", ["jit", "eager"])
def test_indices_of_small_int_dtypes(mode):
    """Index arrays of any integer dtype select as numpy's (a uint8 label indexes a table)."""
    table = np.arange(24, dtype=np.float32).reshape(6, 4)
    labels = np.array([5, 0, 3, 3, 1, 2], np.uint8)

    def f(t, lab):
        return [t[lab], np.take(t, lab.astype(np.uint64), axis=0), np.take(t, lab.astype(np.int8) % 4, axis=1),
                np.take_along_axis(t, (lab % 4).astype(np.uint16)[:, None], axis=1)]
    for g, w in zip(run(f, (table, labels), 2, mode), f(table, labels)):
        same(g, w, "indexing by small ints")


def test_user_programs_on_uint8_images():
    """The programs of issue #31: a uint8 image's colours, its bits, its histogram."""
    rng = np.random.default_rng(0)
    img = rng.integers(0, 4, (8, 5, 3)).astype(np.uint8) * 60
    m = mesh_of(2)

    def colours(im):
        # the key's range comes from the uint8 dtype: bincount takes no size from the data
        q = (im >> 6).astype(np.int64)
        key = (q[..., 0] * 4 + q[..., 1]) * 4 + q[..., 2]
        return np.sum(np.bincount(key.ravel(), minlength=64) > 0), np.bincount(im.ravel(), minlength=256)

    def brighten(im):
        return np.clip(im.astype(np.int16) + 100, 0, 255).astype(np.uint8), (im // 2 + im // 2).max()

    for f in (colours, brighten):
        got = spmd.jit(f, in_shardings=(m.sharding("a"),), fallback=False)(img)
        want = f(img)
        for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
            same(np.asarray(g), w, f.__name__)


def test_dtype_names_in_the_text_form():
    from spmd.ir import parse_graph
    from spmd.ir.text import print_graph
    x = np.arange(6, dtype=np.uint8)
    low = spmd.jit(lambda a: (a.astype(np.int8), a.astype(np.uint16) * 3, a.astype(np.uint64)
                              >> np.uint64(1), a.astype(np.int16) - 1000, a.astype(np.uint32) + 7)).lower(x)
    text = low.as_text("traced")
    for short in ("ui8[6]", "i8[6]", "ui16[6]", "ui64[6]", "i16[6]", "ui32[6]"):
        assert short in text
    assert print_graph(parse_graph(text)) == text


@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"), reason="numpy's x86 results")
def test_float_out_of_range_converts_as_numpy_on_x86():
    """C leaves a float outside the integer's range undefined; numpy on x86 gives plain
    rules (-1.0 -> 255 as uint8, 300.0 -> 44, NaN -> 0 or the signed minimum's bits),
    which the fused kernels follow, so the LLVM and numpy backends agree."""
    x = np.array([-1.0, -3.7, 300.0, 1e10, -1e10, np.nan, np.inf, -np.inf, 2.0 ** 63, 2.0 ** 64, 1e20,
                  -129.0, 255.9, 2.0 ** 32 + 4, 2.0 ** 31 + 0.5, -2.0 ** 31])
    for src in ("float64", "float32"):
        a = x.astype(src)
        with np.errstate(all="ignore"):
            want = [a.astype(d) for d in SMALL]
        got = spmd.jit(lambda v: [(v * 1.0).astype(d) for d in SMALL])(a)
        for d, g, w in zip(SMALL, got, want):
            same(np.asarray(g), w, f"{src} {a} astype {d}")


BIT_FORMS = [
    ("unpackbits", lambda a: np.unpackbits(a)),
    ("unpackbits_axis_count", lambda a: np.unpackbits(a, axis=1, count=-3, bitorder="little")),
    ("unpackbits_pad", lambda a: np.unpackbits(a, axis=0, count=60)),
    ("packbits", lambda a: np.packbits(a > 100, axis=0)),
    ("packbits_flat_little", lambda a: np.packbits(a, bitorder="little")),
    ("round_trip", lambda a: np.packbits(np.unpackbits(a, axis=2), axis=2)),
]


@pytest.mark.parametrize("mode", ["jit", "eager"])
@pytest.mark.parametrize("name,f", BIT_FORMS, ids=[b[0] for b in BIT_FORMS])
def test_packbits_and_unpackbits(name, f, mode):
    img = np.random.default_rng(1).integers(0, 256, (6, 4, 3)).astype(np.uint8)
    same(run(lambda a: [f(a)], (img,), 2, mode)[0], f(img), name)


WRITES = [
    ("setitem", lambda b, v: b.__setitem__(0, v)),
    ("setitem_slice", lambda b, v: b.__setitem__(slice(None), v)),
    ("setitem_mask", lambda b, v: b.__setitem__(b > 5, v)),
    ("setitem_index", lambda b, v: b.__setitem__(np.array([0, 1]), v)),
    ("fill", lambda b, v: b.fill(v)),
    ("copyto", lambda b, v: np.copyto(b, v)),
    ("iadd", lambda b, v: b.__iadd__(v)),
]


@pytest.mark.parametrize("mode", ["jit", "eager"])
@pytest.mark.parametrize("name,w", WRITES, ids=[x[0] for x in WRITES])
def test_writing_python_ints_into_small_int_arrays(name, w, mode):
    """numpy 2: a Python int that does not fit the array's dtype is an OverflowError
    (300 or -1 into uint8), one that fits is stored (copyto of 7 into uint8 casts)."""
    img = (np.arange(12) * 20).astype(np.uint8).reshape(6, 2)

    def f(a, v):
        b = a.copy()
        w(b, v)
        return [b]
    for v in (7, 255, 300, -1):
        try:
            want = f(img, v)
        except OverflowError:
            with pytest.raises(OverflowError):
                run(lambda a: f(a, v), (img,), 2, mode)
            continue
        same(run(lambda a: f(a, v), (img,), 2, mode)[0], want[0], f"{name} {v}")


def test_value_ranges_of_small_ints():
    """A small int's dtype bounds it (a uint8 image is 0..255, any unsigned value >= 0),
    and shifting, dividing or masking a non-negative value keeps it bounded: bincount of
    such values takes no size from the data."""
    from spmd.ir.ops.value_ranges import int_range
    from spmd.jit.tracing import trace_function
    seen = {}

    def f(im, h, w):
        seen["u8"] = int_range(im.value)
        seen["i16"] = int_range((im.astype(np.int16) - 300).value)
        seen["shift"] = int_range((im.astype(np.int64) >> 4).value)
        seen["div"] = int_range((w // np.uint32(16)).value)
        seen["and"] = int_range((h.astype(np.int64) & 7).value)
        seen["u32"] = int_range(w.value)
        return 0.0
    trace_function(f, [np.zeros(4, np.uint8), np.zeros(4, np.int64), np.zeros(4, np.uint32)])
    assert seen == {"u8": (0, 255), "i16": (-300, -45), "shift": (0, 15), "div": (0, None), "and": (0, 7),
                    "u32": (0, None)}


def test_checkpoint_round_trip_of_small_ints(tmp_path):
    """spmd.save / spmd.load keep the small ints' dtypes and bits, resharded onto another mesh."""
    tree = {"img": (np.arange(40) * 7).astype(np.uint8).reshape(8, 5), "d": np.arange(-8, 8, dtype=np.int16),
            "h": np.array([2 ** 64 - 1, 2 ** 63, 5], np.uint64), "n": np.uint32(4000000000)}
    m = mesh_of(2)
    placed = {k: spmd.device_put(v, m.sharding("a")) if np.ndim(v) else v for k, v in tree.items()}
    path = spmd.save(tmp_path / "ck", placed)
    m4 = mesh_of(4)
    got = spmd.load(path, shardings={"img": m4.sharding("a"), "d": m4.sharding("a"), "h": m4.sharding(None),
                                     "n": None})
    for k, v in tree.items():
        g = np.asarray(got[k].numpy() if hasattr(got[k], "numpy") else got[k])
        same(g, np.asarray(v), k)


@pytest.mark.parametrize("dt", ["uint8", "int8", "int16", "uint16", "int32", "uint32"])
def test_python_int_argument_past_the_dtype_under_jit(dt):
    # numpy 2: arithmetic with a Python int the array's dtype cannot hold raises; a traced
    # one is checked on every call (the program would wrap it); comparisons are by value
    info = np.iinfo(dt)
    x = np.arange(4).astype(dt)
    add = spmd.jit(lambda x, c: x + c)
    cmp = spmd.jit(lambda x, c: (x < c, x == c, c >= x))
    for c in (0, int(info.max), int(info.min)):
        np.testing.assert_array_equal(np.asarray(add(x, c)), x + c)
    for c in (int(info.max) + 1, int(info.min) - 1, 2 ** 40):
        with pytest.raises(OverflowError):
            x + c
        with pytest.raises(OverflowError, match="out of bounds"):
            add(x, c)
        for got, want in zip(cmp(x, c), (x < c, x == c, c >= x)):
            np.testing.assert_array_equal(np.asarray(got), want)


@pytest.mark.parametrize("dt", ["uint8", "int8", "int16", "uint32"])
def test_int_computed_from_python_int_arguments_under_jit(dt):
    # `c + 1` or `3 * c - k` is a Python int in numpy, checked against the array's dtype
    # like the argument itself: traced, it is an int64 the program would wrap
    info = np.iinfo(dt)
    x = np.arange(4).astype(dt)
    f = spmd.jit(lambda x, c, k: x + (3 * c - k) // 2)
    g = spmd.jit(lambda x, c: x - (c + 1))
    for c, k in ((0, 0), (1, 2), (int(info.max) // 3, 0), (int(info.max), int(info.max)), (int(info.max), 0),
                 (int(info.min), 0), (int(info.min) // 3 - 1, 1)):
        for jitted, plain, args in ((f, lambda x, c, k: x + (3 * c - k) // 2, (c, k)),
                                    (g, lambda x, c: x - (c + 1), (c,))):
            try:
                want = plain(x, *args)
            except OverflowError:
                with pytest.raises(OverflowError, match="computed from argument leaves"):
                    jitted(x, *args)
                continue
            np.testing.assert_array_equal(np.asarray(jitted(x, *args)), want)


def _store_first(x, c):
    y = x.copy()
    y[0] = c
    return y


def _store_slice(x, c):
    y = x.copy()
    y[1:3] = c - 1
    return y


def _fill(x, c):
    y = x.copy()
    y.fill(c)
    return y


@pytest.mark.parametrize("write", [_store_first, _store_slice, _fill,
                                   lambda x, c: np.full(3, c, dtype=x.dtype)])
@pytest.mark.parametrize("dt", ["uint8", "int16"])
def test_python_int_argument_written_into_small_int_arrays_under_jit(write, dt):
    # numpy 2 raises where the stored Python int does not fit; traced, the store would wrap
    info = np.iinfo(dt)
    x = np.arange(4).astype(dt)
    jitted = spmd.jit(write)
    for c in (0, int(info.max), int(info.max) + 1, int(info.min) - 1, 2 ** 33):
        try:
            want = write(x, c)
        except OverflowError:
            with pytest.raises(OverflowError):
                jitted(x, c)
            continue
        np.testing.assert_array_equal(np.asarray(jitted(x, c)), want)
