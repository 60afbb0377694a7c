"""Multi-host correctness cases, one per argv[1] (tests/test_multihost.py runs them
under mpiexec -n 4): each prints OK lines or fails with an SpmdError naming the
ranks, the op and the user line."""
import os
import sys
import time

import numpy as np

import spmd

case = sys.argv[1]
spmd.init()
rank, n = spmd.process_index(), spmd.process_count()
mesh = spmd.Mesh((n,), ("x",))
row = mesh.sharding("x", None)
rep = mesh.sharding(None, None)


def fsum(x):
    return (x * 2.0).sum(axis=0)


if case == "hashseed":
    # iterating a set of strings: the order depends on PYTHONHASHSEED, which differs per rank
    def f(x):
        for name in {"tanh", "exp", "sin", "cos", "sqrt", "abs"}:
            x = getattr(np, name)(x) + 1.0                 # USER LINE set-order
        return x.sum(axis=0)
    out = spmd.jit(f, in_shardings=row)(np.arange(24.0).reshape(8, 3) / 24)
    print("RESULT", np.asarray(out).tolist())

elif case == "divergent":
    def g(x):
        return (x + 1.0).sum(axis=0)                        # USER LINE divergent
    fn = fsum if rank != 1 else g
    out = spmd.jit(fn, in_shardings=row)(np.ones((8, 3)))
    print("RESULT", np.asarray(out).tolist())

elif case == "ragged":
    rows = 8 if rank != 3 else 7                           # a ragged last batch on rank 3
    out = spmd.jit(fsum, in_shardings=row)(np.ones((rows, 3)))
    print("RESULT", np.asarray(out).tolist())

elif case == "replicated":
    w = np.full((3, 3), 1.0 if rank != 2 else 2.0)         # rank 2 loaded other weights
    out = spmd.jit(lambda x, p: (x @ p["w"]).sum(axis=0), in_shardings=(row, {"w": rep}))(np.ones((8, 3)),
                                                                                          {"w": w})
    print("RESULT", np.asarray(out).tolist())

elif case == "assemble":
    # each process loads its own rows of a 10 x 3 array (3, 3, 3, 1 rows: ragged last part)
    full = np.arange(30.0).reshape(10, 3)
    lo, hi = min(3 * rank, 10), min(3 * rank + 3, 10)
    a = spmd.make_array_from_process_local_data(row, full[lo:hi])
    assert a.shape == (10, 3), a.shape
    got = spmd.jit(lambda x: (x * x).sum(axis=0))(a)
    np.testing.assert_allclose(np.asarray(got), (full * full).sum(axis=0))
    np.testing.assert_array_equal(a.numpy(), full)
    b = spmd.make_array_from_process_local_data(row, full[lo:hi], (10, 3))
    np.testing.assert_array_equal(b.numpy(), full)
    g = spmd.process_allgather(np.array([rank, rank * 10]))
    np.testing.assert_array_equal(g, [[r, r * 10] for r in range(n)])
    print("OK assemble")

elif case == "mixed":
    # rank 1 goes on to the next step while the others read the (split: reading it is a
    # collective; a replicated result would be read locally) result
    f = spmd.jit(lambda x: x * 2.0, in_shardings=row, out_shardings=row)
    out = f(np.ones((8, 3)))
    if rank == 1:
        out = f(np.ones((8, 3)))                           # USER LINE mixed-run
    print("RESULT", out.numpy().tolist())                  # USER LINE mixed-read

elif case == "later":
    def double(x):
        return x * 2.0

    def inc(x):
        return x + 1.0
    f = spmd.jit(double, in_shardings=row, out_shardings=row)
    g = spmd.jit(inc, in_shardings=row, out_shardings=row)
    f(np.ones((8, 3)))
    g(np.ones((8, 3)))                                     # both compared on their first runs
    out = (g if rank == 1 else f)(np.ones((8, 3)))         # rank 1 diverges: not exchanged

    def total(x):
        return x.sum(axis=0)
    print("RESULT", np.asarray(spmd.jit(total, in_shardings=row)(out)).tolist())

elif case == "deadlock":
    # a cycle: 0 waits for 2 over "a", 2 for 3 over "b", 3 for 1 over "a", 1 for 0 over "b"
    from spmd.transports.mpi.mpi_communicator import MPICommunicator
    comm = MPICommunicator(spmd.Mesh((2, 2), ("a", "b")))
    comm.comm("a"), comm.comm("b")                          # the sub-communicators, made in one order
    order = ("a", "b") if rank in (0, 3) else ("b", "a")
    for ax in order:
        comm.all_reduce(np.ones(2), ax)
    print("UNREACHABLE")

elif case == "nan":
    x = np.arange(32.0).reshape(8, 4)
    x[5, 1] = np.nan
    x[0, 3] = np.nan
    for name, f in (("max", lambda v: v.max(axis=0)), ("min", lambda v: v.min(axis=0)),
                    ("argmax", lambda v: np.argmax(v, axis=0)), ("argmin", lambda v: np.argmin(v, axis=0)),
                    ("maximum_all", lambda v: np.max(v))):
        got = np.asarray(spmd.jit(f, in_shardings=row)(x))
        np.testing.assert_array_equal(got, f(x), err_msg=name)
    print("OK nan")

elif case == "busy":
    f = spmd.jit(fsum, in_shardings=row)
    for step in range(2):
        out = f(np.ones((8, 3)))
        if rank == 0 and step == 0:
            time.sleep(float(os.environ.get("BUSY", "5")))   # rank 0 evaluates, the others wait
    np.testing.assert_allclose(np.asarray(out), 16.0)
    print("OK busy")

elif case == "dead":
    f = spmd.jit(fsum, in_shardings=row)
    f(np.ones((8, 3)))
    if rank == 2:
        # dies without a word; "frozen": stopped, its process still there (as a hung host)
        os.kill(os.getpid(), 19 if os.environ.get("FROZEN") else 9)
    t0 = time.monotonic()
    f(np.ones((8, 3)))
    print("UNREACHABLE")
