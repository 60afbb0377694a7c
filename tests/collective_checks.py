"""Every Communicator method against numpy, run by each rank with its own communicator.

Shared by the MPI script (tests/mpi_scripts/collectives.py) and the Ray tests: each
rank can compute every device's input (seeded by device id), so it checks its own
result against the numpy answer without any extra communication. Returns how many
checks passed; a wrong result raises AssertionError naming the case.
"""
import itertools

import numpy as np

DTYPES = ("float64", "float32", "int64", "bool", "complex128", "complex64")
# the small and unsigned ints: sums and products wrap as numpy's (MPI's own reductions)
SMALL_INTS = ("int8", "int16", "uint8", "uint16", "uint32", "uint64")
_F = {"sum": np.add, "max": np.maximum, "min": np.minimum, "prod": np.multiply}


def value(dev, shape, dtype):
    rng = np.random.default_rng(dev)
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype in SMALL_INTS:           # wrapping past the ends: -50 as uint8 is 206
        return rng.integers(-50, 50, shape).astype(dtype)
    if dtype.startswith("complex"):
        return (rng.standard_normal(shape) * 10 + 1j * rng.standard_normal(shape)).astype(dtype)
    return (rng.standard_normal(shape) * 10).astype(dtype)


def axis_groups(mesh):
    """Every ordered choice of mesh axes: ("a",), ("b",), ("a","b"), ("b","a")..."""
    return [ax for k in range(1, mesh.ndim + 1) for ax in itertools.permutations(mesh.axis_names, k)]


def reduce_in_order(op, xs):
    want = xs[0].copy()
    for x in xs[1:]:
        want = _F[op](want, x)
    return want


def reduced_alike(got, want, op, regrouped=False) -> bool:
    """got is an all_reduce's answer for want (reduce_in_order's). Exact, unless the group
    spans hosts and the backend sums host by host (regrouped): then float sums and
    products are in another order (the same on every run), close to want's."""
    if got.dtype != want.dtype or got.shape != want.shape:
        return False
    if regrouped and op in ("sum", "prod") and want.dtype.kind in "fc" and want.dtype.itemsize > 2:
        eps = np.finfo(want.dtype).eps
        # another order's rounding: a few ulps of the largest partial sum, at any element
        return np.allclose(got, want, rtol=16 * eps, atol=16 * eps * float(np.abs(want).max(initial=0)))
    return np.array_equal(got, want)


def check_collectives(comm, dtypes=DTYPES, big=False, regrouped=False):
    """All collectives over every axis group of comm.mesh. big: also one all_reduce of
    a few MB (the object-store / blockwise path). regrouped: groups span hosts and the
    backend may sum host by host (reduced_alike)."""
    mesh, me = comm.mesh, comm.rank
    checked = 0
    for axes, dtype in itertools.product(axis_groups(mesh), dtypes):
        group = mesh.group(me, axes)
        G, i = len(group), mesh.index_in_group(me, axes)
        xs = [value(d, (G * 2, 3), dtype) for d in group]
        case = (mesh.text(), axes, dtype)
        ops = {"bool": ["sum", "min"], "complex128": ["sum", "prod"], "complex64": ["sum", "prod"]}
        for op in ops.get(dtype, ["sum", "max", "min", "prod"]):
            # every backend reduces in group order: the bits of reduce_in_order
            want = reduce_in_order(op, xs)
            got = comm.all_reduce(xs[i], axes, op)
            assert reduced_alike(got, want, op, regrouped), (case, "all_reduce", op)
            rs = comm.reduce_scatter(xs[i], axes, 0, op)
            assert np.array_equal(rs, np.split(want, G)[i]), (case, "reduce_scatter", op)
            checked += 2
        for dim in (0, 1):
            got = comm.all_gather(xs[i], axes, dim)
            assert np.array_equal(got, np.concatenate(xs, axis=dim)), (case, "all_gather", dim)
        ys = [value(d + 100, (3, G * 2), dtype) for d in group]
        rs1 = comm.reduce_scatter(ys[i], axes, 1, "sum")
        assert np.array_equal(rs1, np.split(reduce_in_order("sum", ys), G, axis=1)[i]), (case, "reduce_scatter dim 1")
        # into the caller's buffer, as the memory plan places them
        buf = np.empty((G * G * 2, 3), xs[i].dtype)
        got = comm.all_gather(xs[i], axes, 0, out=buf)
        assert got is buf and np.array_equal(buf, np.concatenate(xs)), (case, "all_gather out=")
        buf = np.empty((3, 2), ys[i].dtype)
        got = comm.reduce_scatter(ys[i], axes, 1, "sum", out=buf)
        assert got is buf and np.array_equal(buf, rs1), (case, "reduce_scatter out=")
        buf = np.empty((3 * G, 2), ys[i].dtype)
        got = comm.all_to_all(ys[i], axes, 1, 0, out=buf)
        want = np.concatenate([np.split(y, G, 1)[i] for y in ys], axis=0)
        assert got is buf and np.array_equal(buf, want), (case, "all_to_all out=")
        checked += 3
        for split, concat, zs in ((0, 1, xs), (1, 0, ys)):
            got = comm.all_to_all(zs[i], axes, split, concat)
            want = np.concatenate([np.split(z, G, split)[i] for z in zs], axis=concat)
            assert np.array_equal(got, want), (case, "all_to_all", split, concat)
        pairs = [(k, (k + 1) % G) for k in range(G - 1)]          # a shift; member 0 gets nothing
        got = comm.permute(xs[i], axes, pairs)
        src = {d: s for s, d in pairs}.get(i)
        assert np.array_equal(got, xs[src] if src is not None else np.zeros_like(xs[i])), (case, "permute")
        got = comm.permute(xs[i], axes, [(0, k) for k in range(G)])   # one src, every dst (itself too)
        assert np.array_equal(got, xs[0]), (case, "permute fan-out")
        assert np.array_equal(comm.broadcast(xs[i], axes, root=G - 1), xs[G - 1]), (case, "broadcast")
        scalar = comm.all_reduce(np.array(float(me)), axes)
        assert scalar.shape == () and scalar == sum(group), (case, "0-d all_reduce")
        comm.barrier(axes)
        checked += 9
    if big:
        for axes in axis_groups(mesh):
            group = mesh.group(me, axes)
            xs = [value(d, (512, 1024), "float32") for d in group]      # 2 MB each
            got = comm.all_reduce(xs[mesh.index_in_group(me, axes)], axes)
            want = reduce_in_order("sum", xs)
            assert reduced_alike(got, want, "sum", regrouped), (mesh.text(), axes, "big all_reduce")
            xs = [value(d, (10007,), "float64") for d in group]        # not a multiple of the group
            got = comm.all_reduce(xs[mesh.index_in_group(me, axes)], axes)
            want = reduce_in_order("sum", xs)
            assert reduced_alike(got, want, "sum", regrouped), (mesh.text(), axes, "uneven all_reduce")
            checked += 1
    checked += check_started_all_reduces(comm, dtypes, big, regrouped)
    comm.barrier()
    return checked + 1


def check_started_all_reduces(comm, dtypes=DTYPES, big=False, regrouped=False):
    """all_reduce_start / wait: several started at once over every axis group (small, and
    big enough for the local backend's block-wise path), other collectives run while
    they are in flight, waited for in another order than started; each result equals
    the blocking all_reduce's answer. The inputs are left as they were."""
    mesh, me = comm.mesh, comm.rank
    groups = axis_groups(mesh)
    checked = 0
    for dtype in dtypes:
        ops = ["sum", "max", "min", "prod"] if dtype != "bool" else ["sum", "min"]
        flights, wants = [], []
        for k, (axes, op) in enumerate(itertools.product(groups, ops)):
            group = mesh.group(me, axes)
            i = mesh.index_in_group(me, axes)
            shape = (300, 70) if k % 3 == 0 else (5, 3)       # 84 / 168 KB: past local's SMALL_BYTES
            if dtype == "bool":
                shape = (5, 3)
            xs = [value(d + 7 * k, shape, dtype) for d in group]
            x = xs[i].copy()
            flights.append((comm.all_reduce_start(x, axes, op), x, xs[i], (mesh.text(), axes, dtype, op, shape)))
            wants.append(reduce_in_order(op, xs))
            # a blocking collective over another group while the others are in flight
            other = groups[(k + 1) % len(groups)]
            got = comm.all_gather(np.array([me]), other, 0)
            assert got.tolist() == list(mesh.group(me, other)), ("all_gather between starts", other)
        order = list(range(len(flights)))[1::2] + list(range(len(flights)))[0::2]   # not the start order
        for j in order:
            h, x, x0, case = flights[j]
            got = comm.wait(h)
            want = wants[j]
            assert got.dtype == want.dtype and got.shape == want.shape, (case, "started all_reduce type")
            assert reduced_alike(got, want, case[3], regrouped), (case, "started all_reduce")
            assert np.array_equal(x, x0), (case, "started all_reduce changed its input")
            checked += 1
    if big:
        for axes in groups:
            group = mesh.group(me, axes)
            xs = [value(d, (512, 1024), "float32") for d in group]
            h = comm.all_reduce_start(xs[mesh.index_in_group(me, axes)], axes)
            blocking = comm.all_reduce(xs[mesh.index_in_group(me, axes)] * 2, axes)
            got = comm.wait(h)
            want = reduce_in_order("sum", xs)
            assert reduced_alike(got, want, "sum", regrouped), (mesh.text(), axes, "big started all_reduce")
            assert reduced_alike(blocking, reduce_in_order("sum", [x * 2 for x in xs]), "sum", regrouped), \
                (mesh.text(), axes, "blocking in between")
            checked += 1
    assert comm.in_flight() == 0
    return checked


class CheckCollectives:
    """A per-device 'program' for a runtime's run(): runs check_collectives with the
    rank's communicator and returns [number of checks]."""
    num_outputs = 1

    def __init__(self, dtypes=DTYPES, big=False):
        self.dtypes, self.big = dtypes, big

    def __call__(self, inputs, comm):
        return [np.array(check_collectives(comm, self.dtypes, self.big))]


def check_half_collectives(comm):
    """The collectives on float16 and bfloat16 over every axis group: 2 bytes an element,
    sums and products in float32 in group order rounded once, so every backend gives the
    same bits. Returns how many checks passed."""
    import ml_dtypes
    mesh, me = comm.mesh, comm.rank
    checked = 0
    for axes, dt in itertools.product(axis_groups(mesh), (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))):
        group = mesh.group(me, axes)
        G, i = len(group), mesh.index_in_group(me, axes)
        xs = [np.random.default_rng(d).uniform(-4, 4, (G * 2, 3)).astype(dt) for d in group]
        case = (mesh.text(), axes, dt.name)
        for op in ("sum", "max", "min", "prod"):
            want = reduce_in_order(op, [x.astype(np.float32) for x in xs]).astype(dt)
            got = comm.all_reduce(xs[i], axes, op)
            assert got.dtype == dt and np.array_equal(got.view(np.uint16), want.view(np.uint16)), (case, op)
            rs = comm.reduce_scatter(xs[i], axes, 0, op)
            assert rs.dtype == dt and np.array_equal(rs.view(np.uint16), np.split(want, G)[i].view(np.uint16)), \
                (case, "reduce_scatter", op)
            h = comm.all_reduce_start(xs[i], axes, op)
            comm.all_gather(xs[i], axes, 0)
            got = comm.wait(h)
            assert got.dtype == dt and np.array_equal(got.view(np.uint16), want.view(np.uint16)), \
                (case, "started all_reduce", op)
            checked += 3
        big = [np.random.default_rng(d).uniform(-4, 4, (256, 256)).astype(dt) for d in group]   # block-wise
        want = reduce_in_order("sum", [x.astype(np.float32) for x in big]).astype(dt)
        for got in (comm.all_reduce(big[i], axes), comm.wait(comm.all_reduce_start(big[i], axes))):
            assert got.dtype == dt and np.array_equal(got.view(np.uint16), want.view(np.uint16)), (case, "big sum")
        got = comm.all_gather(xs[i], axes, 1)
        assert got.dtype == dt and np.array_equal(got.view(np.uint16), np.concatenate(xs, axis=1).view(np.uint16))
        got = comm.all_to_all(xs[i], axes, 0, 1)
        want = np.concatenate([np.split(z, G)[i] for z in xs], axis=1)
        assert got.dtype == dt and np.array_equal(got.view(np.uint16), want.view(np.uint16)), (case, "all_to_all")
        got = comm.permute(xs[i], axes, [(j, (j + 1) % G) for j in range(G)])
        assert got.dtype == dt and np.array_equal(got.view(np.uint16), xs[(i - 1) % G].view(np.uint16)), \
            (case, "permute")
        checked += 3
    return checked


class CheckHalfCollectives:
    """check_half_collectives as a per-device program for a runtime's run()."""
    num_outputs = 1

    def __call__(self, inputs, comm):
        return [np.array(check_half_collectives(comm))]


def rejections(mesh):
    """(call, the CollectiveError message every transport must raise) for calls wrong on
    their face, on a mesh whose first axis has G >= 2 devices: the Communicator base
    checks them (spmd/transports/collective_args.py) before any rank waits for another."""
    a = mesh.axis_names[0]
    G = mesh.shape[0]
    x = np.zeros((2 * G, 3))
    odd = np.zeros((2 * G + 1, 2 * G + 1))
    names = tuple(mesh.axis_names)
    return [
        (lambda c: c.all_reduce(x, ("nope",)),
         f"all_reduce over ('nope',): axes ('nope',) must be distinct axes of the mesh, which has {names}"),
        (lambda c: c.all_reduce(x, (a, a)),
         f"all_reduce over {(a, a)!r}: axes {(a, a)} must be distinct axes of the mesh, which has {names}"),
        (lambda c: c.all_reduce(x, a, op="mean"),
         f"all_reduce over ('{a}',): unknown reduction 'mean' (takes sum, max, min, prod)"),
        (lambda c: c.all_reduce_start(x, a, op="avg"),
         f"all_reduce over ('{a}',): unknown reduction 'avg' (takes sum, max, min, prod)"),
        (lambda c: c.all_reduce(x, a, out=np.zeros(3)),
         f"all_reduce over ('{a}',): out is float64[3], the result is float64[{2 * G}, 3]"),
        (lambda c: c.all_reduce(x, a, out=np.zeros((2 * G, 3), np.float32)),
         f"all_reduce over ('{a}',): out is float32[{2 * G}, 3], the result is float64[{2 * G}, 3]"),
        (lambda c: c.all_reduce(np.array([None, 1]), a),
         f"all_reduce over ('{a}',): an array of dtype object cannot travel; collectives take arrays of "
         f"numbers or bools"),
        (lambda c: c.all_gather(x, a, dim=2),
         f"all_gather over ('{a}',): dim 2 is not a dim of a rank-2 array [{2 * G}, 3]"),
        (lambda c: c.all_gather(x, a, dim=0, out=np.zeros((2 * G, 3))),
         f"all_gather over ('{a}',): out is float64[{2 * G}, 3], the result is float64[{2 * G * G}, 3]"),
        (lambda c: c.reduce_scatter(odd, a, dim=0),
         f"reduce_scatter over ('{a}',): dim 0 of [{2 * G + 1}, {2 * G + 1}] does not split into {G} equal blocks"),
        (lambda c: c.reduce_scatter(x, a, dim=-1),
         f"reduce_scatter over ('{a}',): dim -1 is not a dim of a rank-2 array [{2 * G}, 3]"),
        (lambda c: c.all_to_all(odd, a, 1, 0),
         f"all_to_all over ('{a}',): dim 1 of [{2 * G + 1}, {2 * G + 1}] does not split into {G} equal blocks"),
        (lambda c: c.all_to_all(x, a, 0, 5),
         f"all_to_all over ('{a}',): dim 5 is not a dim of a rank-2 array [{2 * G}, 3]"),
        (lambda c: c.permute(x, a, [(0, G)]),
         f"permute over ('{a}',): pairs ((0, {G}),) must be (src, dst) group indices in [0, {G}) naming each "
         f"dst at most once"),
        (lambda c: c.permute(x, a, [(0, 1), (1, 1)]),
         f"permute over ('{a}',): pairs ((0, 1), (1, 1)) must be (src, dst) group indices in [0, {G}) naming "
         f"each dst at most once"),
        (lambda c: c.broadcast(x, a, root=G),
         f"broadcast over ('{a}',): root {G} is not a group index in [0, {G})"),
        (lambda c: c.barrier(("nope",)),
         f"barrier over ('nope',): axes ('nope',) must be distinct axes of the mesh, which has {names}"),
    ]


def check_rejections(comm):
    """Every call of rejections(comm.mesh) raises CollectiveError with its message, also
    naming the user's line when the executable set it; then a valid all_reduce still
    works (the bad calls left nothing behind). Returns how many checks passed."""
    from spmd.errors import CollectiveError
    checked = 0
    for call, message in rejections(comm.mesh):
        try:
            call(comm)
        except CollectiveError as e:
            assert str(e) == message, (str(e), message)
            checked += 1
        else:
            raise AssertionError(f"no error for: {message}")
    comm.loc = "prog.py:7"
    try:
        comm.all_reduce(np.zeros(2), comm.mesh.axis_names[0], op="mean")
    except CollectiveError as e:
        want = f"all_reduce over ('{comm.mesh.axis_names[0]}',) at prog.py:7: unknown reduction 'mean'"
        assert str(e).startswith(want), (str(e), want)
        checked += 1
    finally:
        comm.loc = None
    G = comm.mesh.shape[0]
    got = comm.all_reduce(np.full(3, comm.rank + 1.0), comm.mesh.axis_names[0])
    group = comm.mesh.group(comm.rank, (comm.mesh.axis_names[0],))
    assert np.array_equal(got, np.full(3, sum(d + 1.0 for d in group))) and len(group) == G
    return checked + 1


def overwritten_operand(kind, shape, **attrs):
    """A program whose collective `kind` (its attrs) reads a = x * 3, which dies there:
    the kernel right after, a * 5, may take its buffer. What the drain after a read of
    the operand where it lies guards (backends/llvm/exchange_reduce.py). Its outputs:
    the collective's result, a * 5; -> (the program compiled for the native backend)."""
    from spmd.backends.llvm import compile_llvm
    from spmd.ir import Graph
    from spmd.ir.ops.names import CONSTANT, MULTIPLY
    g = Graph("overwritten")
    x = g.add_input(shape, "float32")
    a = g.emit(MULTIPLY, x, g.emit(CONSTANT, value=np.full(shape, 3, "float32")))
    moved = g.emit(kind, a, **attrs)
    g.outputs = [moved, g.emit(MULTIPLY, a, g.emit(CONSTANT, value=np.full(shape, 5, "float32")))]
    return compile_llvm(g)


def independent_collectives(emit, rt, mesh):
    """A program of two inputs, x float64[8, 6] and y float64[2, 6], whose outputs are
    the independent collectives `emit(g, x, y)` makes (they share their group's region
    in the native schedule); -> (its schedule for one process of the mesh's devices,
    each device's inputs xs and ys (value(d), value(10 + d)), and `run`: each device's
    results from `rt` on `mesh`, a run on fresh copies of the inputs)."""
    from spmd.backends.llvm import compile_llvm
    from spmd.ir import Graph
    g = Graph("independent")
    x = g.add_input((8, 6), "float64")
    y = g.add_input((2, 6), "float64")
    g.outputs = emit(g, x, y)
    exe = compile_llvm(g)
    xs = {d: value(d, (8, 6), "float64") for d in range(mesh.size)}
    ys = {d: value(10 + d, (2, 6), "float64") for d in range(mesh.size)}

    def run():
        return rt.run(exe, mesh, {d: [xs[d].copy(), ys[d].copy()] for d in range(mesh.size)})
    return exe.schedule(1, True, "process"), xs, ys, run
