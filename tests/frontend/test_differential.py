"""The differential test: random numpy programs run by numpy and by spmd -- under spmd.jit
and eagerly on spmd.Arrays, on 1, 2, 4 and 2x2 devices, split evenly and unevenly --
must leave every array they made or wrote (the argument included) as numpy leaves it.

A program is a list of steps over a pool of arrays whose first entry is the argument:
views (basic indexing, .T, transpose, reshape / ravel, atleast_1d/2d/3d, rot90, flip /
flipud / fliplr, .real / .imag, .view(), swapaxes, moveaxis, squeeze, expand_dims, and
the read-only broadcast_to and diagonal), writes through them (x[key] = v with basic and
advanced keys, in-place operators, fill, copyto with where=, ufuncs with out= and where=,
in-place sort), boolean masks (x[m] = f(x[m]), x[m] op= v, x[m, k] op= v, reductions of
x[m]), reductions into out= of another dtype, and new values (cumsum, sort, partition,
einsum with repeated indices, fft, linalg), some in Python loops. Programs are made by
running them on numpy arrays, keeping the steps numpy accepts. Data are small integers
(or halves), so most results are exact; sums, ffts and solves are compared to 1e-9.

Each hypothesis example runs a batch of programs (one jitted function, or one eager
run, each program on its own argument); CI replays the same examples (conftest's
derandomized profile)."""
import contextlib
import warnings

import numpy as np
from hypothesis import HealthCheck, example, given, settings, strategies as st

import spmd
from backend_env import numpy_compiler

SHAPES = [(4, 6), (5, 6), (6,), (7,), (4, 4, 3), (3, 5, 2)]
MESHES = {"1": None, "2": (2,), "4": (4,), "2x2": (2, 2)}
UFUNCS = [np.add, np.subtract, np.multiply, np.maximum, np.minimum]
REDUCTIONS = ["sum", "max", "min", "mean", "prod", "any", "all", "cumsum"]
# (bool ** 2 is an int8 in numpy, a dtype spmd refuses with an error: squares of bools are v * v)
MASKED_F = [lambda v: v * 2 - 1, lambda v: v ** 2 if v.dtype != np.bool_ else v * v, lambda v: np.abs(v) + 0.5,
            lambda v: -v]
MASK_REDUCE = [lambda v: v.sum(), lambda v: np.max(v, initial=-100.0), lambda v: np.min(v, initial=100.0),
               lambda v: np.any(v > 1), lambda v: np.all(v > -5), lambda v: np.count_nonzero(v > 0),
               lambda v: v.size, lambda v: np.sum(v * 2.0)]


# -- the generator -------------------------------------------------------------------------
def _basic_key(rng, shape):
    key = []
    for n in shape:
        r = rng.random()
        if r < 0.2 and n:
            key.append(int(rng.integers(-n, n)))
        elif r < 0.8:
            a, b = sorted(rng.integers(-n - 1, n + 2, size=2).tolist())
            step = int(rng.choice([1, 1, 2, -1, -2, 3]))
            key.append(slice(a, b, step) if step > 0 else slice(b, a, step))
        else:
            key.append(slice(None))
    return tuple(key)


def _view_step(rng, a, i):
    """A step whose result is a view of pool[i] (numpy's own choice where it copies)."""
    nd = a.ndim
    kinds = ["key", "T", "reshape", "ravel", "atleast", "flip", "view", "expand", "squeeze"]
    if nd >= 2:
        kinds += ["rot90", "swapaxes", "moveaxis", "transpose", "flipud", "fliplr", "diagonal"]
    if nd >= 1:
        kinds += ["broadcast", "flipud"]
    if a.dtype.kind == "c":
        kinds += ["real", "imag", "real"]
    k = kinds[int(rng.integers(len(kinds)))]
    if k == "key":
        return ("key", i, _basic_key(rng, a.shape))
    if k == "reshape":
        shapes = [(-1,), tuple(a.shape[::-1])] + ([(a.shape[0] * a.shape[1],) + a.shape[2:]] if nd >= 2 else [])
        return ("reshape", i, shapes[int(rng.integers(len(shapes)))])
    if k == "atleast":
        return ("atleast", i, int(rng.integers(1, 4)))
    if k == "flip":
        return ("flip", i, None if nd == 0 or rng.random() < 0.3 else int(rng.integers(nd)))
    if k == "rot90":
        ax = rng.permutation(nd)[:2].tolist()
        return ("rot90", i, (int(rng.integers(-1, 4)), tuple(ax)))
    if k == "swapaxes":
        return ("swapaxes", i, tuple(rng.integers(-nd, nd, 2).tolist()))
    if k == "moveaxis":
        return ("moveaxis", i, (int(rng.integers(nd)), int(rng.integers(nd))))
    if k == "transpose":
        return ("transpose", i, tuple(rng.permutation(nd).tolist()))
    if k == "expand":
        return ("expand", i, int(rng.integers(-nd - 1, nd + 1)))
    if k == "diagonal":
        return ("diagonal", i, int(rng.integers(-1, 2)))
    if k == "broadcast":
        return ("broadcast", i, (int(rng.integers(1, 3)),) + a.shape)
    return (k, i, None)


def _write_step(rng, pool, i):
    a = pool[i]
    r = rng.random()
    real = a.dtype.kind != "c"
    if r < 0.16:
        return ("setitem", i, (_basic_key(rng, a.shape), float(rng.integers(-9, 9))))
    if r < 0.24 and a.ndim and a.shape[0]:
        idx = rng.integers(-a.shape[0], a.shape[0], size=int(rng.integers(1, 4))).tolist()
        return ("setadv", i, (idx, float(rng.integers(-9, 9))))
    if r < 0.34:
        return ("iop", i, (int(rng.integers(3)), float(rng.integers(1, 4))))
    if r < 0.40:
        return ("fill", i, float(rng.integers(-5, 5)))
    if r < 0.48:
        same = [j for j, b in enumerate(pool) if b.shape == a.shape and b.dtype == a.dtype]
        return ("copyto", i, (int(rng.choice(same)), float(rng.integers(-3, 3)) if real else None))
    if r < 0.58:
        same = [j for j, b in enumerate(pool) if b.shape == a.shape and (b.dtype.kind != "c" or not real)]
        j = int(rng.choice(same))
        where = float(rng.integers(-3, 3)) if pool[j].dtype.kind != "c" and rng.random() < 0.6 else None
        # (numpy orders complex numbers lexicographically; spmd refuses to: no maximum / minimum)
        return ("ufunc_out", i, (j, int(rng.integers(len(UFUNCS) if real else 3)), where))
    if r < 0.64 and real and a.ndim:
        return ("sort_inplace", i, int(rng.integers(-a.ndim, a.ndim)))
    if real:
        t = float(rng.integers(-4, 4))
        if r < 0.80:
            return ("mask_set", i, (t, int(rng.integers(len(MASKED_F)))))
        if r < 0.90:
            return ("mask_iop", i, (t, float(rng.integers(1, 4))))
        if a.ndim >= 2:
            return ("mask_rows", i, (t, float(rng.integers(1, 4))))
    return ("iop", i, (0, 1.0))


def _new_step(rng, pool, i):
    a = pool[i]
    real = a.dtype.kind != "c"
    kinds = ["mask_reduce", "reduce_out", "cumsum", "sort", "partition", "fft", "norm", "einsum", "scale",
             "npcopy"]
    k = kinds[int(rng.integers(len(kinds)))]
    axis = int(rng.integers(-a.ndim, a.ndim)) if a.ndim else None
    if k == "mask_reduce" and real:
        return ("mask_reduce", i, (float(rng.integers(-4, 4)), int(rng.integers(len(MASK_REDUCE)))))
    if k == "reduce_out" and real and a.ndim:
        name = REDUCTIONS[int(rng.integers(len(REDUCTIONS)))]
        dt = ["int64", "float32", "float64", "int32"][int(rng.integers(4))]
        return ("reduce_out", i, (name, axis, dt))
    if k == "cumsum" and a.ndim:
        return ("cumsum", i, axis)
    if k in ("sort", "partition") and real and a.ndim:
        return (k, i, (axis, int(rng.integers(a.shape[axis])) if a.shape[axis] else 0))
    if k == "fft" and a.ndim and a.shape[axis]:
        return ("fft", i, axis)
    if k == "norm" and a.ndim:
        return ("norm", i, axis)
    if k == "einsum" and a.ndim == 2:
        spec = ["ij->ji", "ii->i", "ii", "ij,ij->i", "ij->"][int(rng.integers(5))]
        # (numpy takes 'ii->i' of a (0, n) array, reading n elements beyond it: spmd refuses)
        return ("einsum", i, spec if "ii" not in spec or a.shape[0] == a.shape[1] else "ij->ji")
    if k == "scale":        # a new array laid out as numpy lays out its operand (a later reshape copies)
        return ("scale", i, float(rng.integers(-3, 4)))
    if k == "npcopy":
        return ("npcopy", i, None)
    return ("cumsum", i, axis) if a.ndim else ("copy", i, None)


def make_program(seed, shape, steps, complex_base):
    """(steps, the number the generator kept): made by running on numpy arrays."""
    rng = np.random.default_rng(seed)
    x = base(seed, shape, complex_base)
    pool = [x]
    prog = []
    while len(prog) < steps:
        i = int(rng.integers(len(pool)))
        r = rng.random()
        writable = [j for j, b in enumerate(pool) if b.flags.writeable and b.size]
        if r < 0.35 and len(pool) < 8:
            step = _view_step(rng, pool[i], i)
        elif r < 0.8 and writable:
            step = _write_step(rng, pool, int(rng.choice(writable)))
            if rng.random() < 0.12:
                step = ("loop", int(rng.integers(2, 4)), step)
        else:
            step = _new_step(rng, pool, i)
        n = len(pool)
        saved = [(b, b.copy()) for b in pool if b.flags.writeable]
        try:
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("error")          # a step numpy warns about (deprecated, ...): not kept
                apply(pool, step)
        except Exception:
            del pool[n:]
            for b, c in saved:                          # undo what the step wrote before numpy raised
                b[...] = c
            continue
        prog.append(step)
    return prog


def base(seed, shape, complex_base):
    rng = np.random.default_rng(seed + 1)
    x = rng.integers(-6, 7, shape).astype(np.float64) / 2
    if complex_base:
        x = x + 1j * rng.integers(-6, 7, shape) / 2
    return x


# -- running a program ------------------------------------------------------------------------
def apply(pool, step):
    kind, i, p = step
    if kind == "loop":
        for _ in range(i):
            apply(pool, p)
        return
    a = pool[i]
    new = None
    if kind == "key":
        new = a[p]
    elif kind == "T":
        new = a.T
    elif kind == "reshape":
        new = a.reshape(p)
    elif kind == "ravel":
        new = np.ravel(a)
    elif kind == "atleast":
        new = (np.atleast_1d, np.atleast_2d, np.atleast_3d)[p - 1](a)
    elif kind == "flip":
        new = np.flip(a, p)
    elif kind == "flipud":
        new = np.flipud(a)
    elif kind == "fliplr":
        new = np.fliplr(a)
    elif kind == "rot90":
        new = np.rot90(a, p[0], p[1])
    elif kind == "swapaxes":
        new = np.swapaxes(a, *p)
    elif kind == "moveaxis":
        new = np.moveaxis(a, *p)
    elif kind == "transpose":
        new = np.transpose(a, p)
    elif kind == "expand":
        new = np.expand_dims(a, p)
    elif kind == "squeeze":
        new = np.squeeze(a[None])
    elif kind == "view":
        new = a.view()
    elif kind == "real":
        new = a.real
    elif kind == "imag":
        new = np.imag(a)
    elif kind == "diagonal":
        new = np.diagonal(a, p)
    elif kind == "broadcast":
        new = np.broadcast_to(a, p)
    elif kind == "setitem":
        a[p[0]] = p[1]
    elif kind == "setadv":
        a[p[0]] = p[1]
    elif kind == "iop":
        if p[0] == 0:
            a += p[1]
        elif p[0] == 1:
            a *= p[1]
        else:
            a -= a[::-1] * p[1] if a.ndim else p[1]
    elif kind == "fill":
        a.fill(p)
    elif kind == "copyto":
        src = pool[p[0]]
        if p[1] is None:
            np.copyto(a, src * 2)
        else:
            np.copyto(a, src * 2, where=src > p[1])
    elif kind == "ufunc_out":
        j, u, t = p
        if t is None:
            UFUNCS[u](pool[j], a, out=a)
        else:
            UFUNCS[u](pool[j], 1.5, out=a, where=pool[j] > t)
    elif kind == "sort_inplace":
        a.sort(axis=p)
    elif kind == "mask_set":
        m = a > p[0]
        a[m] = MASKED_F[p[1]](a[m])
    elif kind == "mask_iop":
        a[a > p[0]] *= p[1]
    elif kind == "mask_rows":
        a[a[:, 0] > p[0], 1:] += p[1]
    elif kind == "mask_reduce":
        new = MASK_REDUCE[p[1]](a[a < p[0]])
    elif kind == "reduce_out":
        name, axis, dt = p
        shape = a.shape if name == "cumsum" else a.shape[:axis % a.ndim] + a.shape[axis % a.ndim + 1:]
        new = np.zeros_like(a, shape=shape, dtype=dt)
        getattr(np, name)(a, axis=axis, out=new)
    elif kind == "cumsum":
        new = np.cumsum(a, axis=p)
    elif kind == "sort":
        new = np.sort(a, axis=p[0])
    elif kind == "partition":
        part = np.partition(a, p[1], axis=p[0])
        pool.append(np.sort(part, axis=p[0]))
        new = np.take(part, p[1], axis=p[0])            # the kth element: in its sorted place
    elif kind == "fft":
        new = np.fft.fft(a, axis=p)
    elif kind == "norm":
        new = np.linalg.norm(a, axis=p)
    elif kind == "einsum":
        new = np.einsum(p, a, a) if "," in p else np.einsum(p, a)
    elif kind == "copy":
        new = a.copy()
    elif kind == "npcopy":
        new = np.copy(a)               # order="K", where a.copy() is C order
    elif kind == "scale":
        new = a * p + 1
    else:
        raise AssertionError(kind)
    if isinstance(new, (bool, int, float)):       # eager x[m].size: numpy's scalar of it
        new = np.asarray(new)[()]
    if new is not None:
        pool.append(new)


def run(progs, xs):
    """Each program on its own argument: the pools, one list."""
    out = []
    for prog, x in zip(progs, xs):
        pool = [x]
        for step in prog:
            apply(pool, step)
        out.append(tuple(pool))
    return out


# -- the test -------------------------------------------------------------------------------
def _mesh(name, shape):
    ms = MESHES[name]
    if ms is None:
        return None, None
    mesh = spmd.Mesh(ms, ("a", "b")[:len(ms)])
    spec = [None] * len(shape)
    for d, ax in enumerate(mesh.axis_names[:len(shape)]):
        spec[d] = ax
    return mesh, mesh.sharding(*spec)


@contextlib.contextmanager
def quiet_numpy_backend():
    with numpy_compiler(), np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def compare(got, want, progs, mode):
    for k, (gp, wp, prog) in enumerate(zip(got, want, progs)):
        assert len(gp) == len(wp), (mode, k, prog)
        for j, (g, w) in enumerate(zip(gp, wp)):
            g = np.asarray(g.numpy() if hasattr(g, "numpy") else g)
            w = np.asarray(w)
            msg = f"{mode}: program {k}, pool[{j}] after {prog}"
            assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, w.shape, g.dtype, w.dtype, msg)
            tol = 1e-6 if w.dtype in (np.float32, np.complex64) else 1e-9    # (float32 sums: an ulp)
            np.testing.assert_allclose(g, w, rtol=tol, atol=tol, equal_nan=True, err_msg=msg)


BATCH = 8


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2 ** 24), shape=st.sampled_from(SHAPES), mesh=st.sampled_from(sorted(MESHES)),
       steps=st.integers(1, 12))
@example(seed=519, shape=(4, 4, 3), mesh="1", steps=9)      # np.copy of a broadcast, then reshaped
def test_random_programs_under_jit(seed, shape, mesh, steps):
    progs = [make_program(seed + k, shape, steps, complex_base=(seed + k) % 4 == 0) for k in range(BATCH)]
    xs = [base(seed + k, shape, (seed + k) % 4 == 0) for k in range(BATCH)]
    want = run(progs, [x.copy() for x in xs])
    m, sh = _mesh(mesh, shape)
    f = spmd.jit(lambda *xs: run(progs, xs), in_shardings=(sh,) * BATCH if m else None, backend="numpy")
    args = [x.copy() for x in xs]
    with quiet_numpy_backend():
        got = f(*args)
    compare(got, want, progs, f"jit on {mesh}")
    compare([[a] for a in args], [[w[0]] for w in want], progs, f"jit on {mesh}, the arguments written")


@settings(max_examples=36, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2 ** 24), shape=st.sampled_from(SHAPES), mesh=st.sampled_from(sorted(MESHES)),
       steps=st.integers(1, 12))
def test_random_programs_eagerly(seed, shape, mesh, steps):
    progs = [make_program(seed + k, shape, steps, complex_base=(seed + k) % 4 == 0) for k in range(BATCH)]
    xs = [base(seed + k, shape, (seed + k) % 4 == 0) for k in range(BATCH)]
    want = run(progs, [x.copy() for x in xs])
    m, sh = _mesh(mesh, shape)
    if m is None:
        m = spmd.Mesh((1,), ("a",))
        sh = m.sharding(*([None] * len(shape)))
    with quiet_numpy_backend():
        got = run(progs, [spmd.device_put(x.copy(), sh) for x in xs])
    compare(got, want, progs, f"eager on {mesh}")


def test_the_generator_covers_every_kind_of_step():
    kinds = set()
    for seed in range(60):
        for shape in SHAPES:
            for s in make_program(seed, shape, 9, seed % 2 == 0):
                kinds.add(s[0] if s[0] != "loop" else s[2][0])
                kinds.add(s[0])
    assert kinds >= {"key", "view", "T", "reshape", "ravel", "atleast", "flip", "flipud", "fliplr", "rot90", "swapaxes",
                     "moveaxis", "transpose", "expand", "squeeze", "real", "imag", "diagonal", "broadcast",
                     "setitem", "setadv", "iop", "fill", "copyto", "ufunc_out", "sort_inplace", "mask_set",
                     "mask_iop", "mask_rows", "mask_reduce", "reduce_out", "cumsum", "sort", "partition", "fft",
                     "norm", "einsum", "scale", "npcopy", "loop"}, kinds
