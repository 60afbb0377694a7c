"""Random programs of numpy views and writes, for the property tests of numpy's write
semantics under jit (tests/frontend/test_writes_random.py) and in eager mode
(tests/eager/test_eager.py): views (basic indexing with any steps, .T, transpose,
reshape / ravel -- views or copies as numpy decides) and writes through them (setitem
with basic and advanced keys, in-place operators), over a pool of arrays whose first
entry is the base. The same program runs on numpy arrays, Tracers or spmd.Arrays.
Also `per_point`, a per-point Python double loop of element reads and writes (the fusion
depth and batched element-read tests)."""
import numpy as np


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


def _reshape(rng, shape):
    """A shape of the same size: flat, reversed, or the first two dims merged."""
    r = rng.random()
    if r < 0.4 or len(shape) < 2:
        return (-1,)
    if r < 0.7:
        return tuple(shape[::-1])
    return (shape[0] * shape[1],) + tuple(shape[2:])


def make_program(seed, shape, steps):
    """A list of (kind, args) over a pool of arrays (pool[0] is the base), built by
    running it on a concrete array so each step knows the shapes it acts on."""
    rng = np.random.default_rng(seed)
    pool = [np.zeros(shape)]
    prog = []
    for _ in range(steps):
        i = int(rng.integers(len(pool)))
        a = pool[i]
        r = rng.random()
        if r < 0.35 and len(pool) < 6:
            v = rng.random()
            if v < 0.5 or a.ndim == 0:
                step = ("view", i, _basic_key(rng, a.shape))
            elif v < 0.7:
                step = ("T", i, None)
            elif v < 0.8 and a.ndim:
                step = ("transpose", i, tuple(rng.permutation(a.ndim).tolist()))
            elif v < 0.9:
                step = ("reshape", i, _reshape(rng, a.shape))
            else:
                step = ("ravel", i, None)
        elif r < 0.55:
            step = ("setitem", i, (_basic_key(rng, a.shape), float(rng.integers(1, 9))))
        elif r < 0.7 and a.ndim and a.shape[0]:
            idx = rng.integers(-a.shape[0], a.shape[0], size=int(rng.integers(1, 4))).tolist()
            step = ("setadv", i, (idx, float(rng.integers(1, 9))))
        elif r < 0.85:
            step = ("iadd", i, float(rng.integers(1, 5)))
        else:
            step = ("imul_rev", i, None)
        apply(pool, step)
        prog.append(step)
    return prog


def apply(pool, step):
    kind, i, p = step
    a = pool[i]
    if kind == "view":
        pool.append(a[p])
    elif kind == "T":
        pool.append(a.T)
    elif kind == "transpose":
        pool.append(np.transpose(a, p))
    elif kind == "ravel":
        pool.append(a.ravel())
    elif kind == "reshape":
        pool.append(a.reshape(p))
    elif kind == "setitem":
        a[p[0]] = p[1] * np.ones(np.shape(a[p[0]]))
    elif kind == "setadv":
        a[p[0]] = p[1]
    elif kind == "iadd":
        a += p
    elif kind == "imul_rev":
        a *= 1.0 + 0.5 * (a[::-1] if a.ndim else a)
    if pool[-1] is not a and np.ndim(pool[-1]) == 0 and not isinstance(pool[-1], np.ndarray):
        pool.pop()               # x[i, j] is a scalar, not a view: nothing to keep


def run(prog, x):
    pool = [x]
    for step in prog:
        apply(pool, step)
    return tuple(pool)


# numpy functions whose result is a view of their argument: a write through it reaches
# the argument (name, function of a 4 x 6 array)
VIEW_FUNCTIONS = [
    ("atleast_1d", np.atleast_1d), ("atleast_2d", np.atleast_2d), ("atleast_3d", np.atleast_3d),
    ("rot90", np.rot90), ("rot90_2", lambda x: np.rot90(x, 2)), ("rot90_3", lambda x: np.rot90(x, 3)),
    ("rot90_0", lambda x: np.rot90(x, 0)), ("flip", np.flip), ("fliplr", np.fliplr),
    ("split", lambda x: np.split(x, 2)[1]), ("hsplit", lambda x: np.hsplit(x, 3)[2]),
    ("transpose", np.transpose), ("ravel", np.ravel), ("reshape", lambda x: np.reshape(x, (3, 8))),
    ("squeeze", lambda x: np.squeeze(x[None])), ("expand_dims", lambda x: np.expand_dims(x, 1)),
    ("swapaxes", lambda x: np.swapaxes(x, 0, 1)), ("moveaxis", lambda x: np.moveaxis(x, 0, 1)),
]


def write_through(view_function):
    """x after its view `view_function(x)` is written (its first row / element negated
    plus 100), and the view."""
    def f(x):
        v = view_function(x)
        v[0] = -v[0] - 100.0
        return x, v
    return f


def per_point(n):
    """A 4-point average written one element at a time, as a per-point Python loop does:
    (n - 2)**2 element writes, each of four element reads."""
    def step(u):
        out = np.zeros_like(u)
        for i in range(1, n - 1):
            for j in range(1, n - 1):
                out[i, j] = 0.25 * (u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1])
        return out
    return step
