"""The all_reduce of a group spanning two hosts (ranks 0, 1 on the first, 2, 3 on the
second), against numpy: every dtype and reduction, a length no block size divides
(elements left over within the host and across the hosts), blocking and started (with
other collectives in flight), on every axis group of three meshes. A float sum or
product and every integer or bool reduction over a group with two members on each host
goes host by host: each element is the sum over the hosts, in host order, of its
host's sum in group order; the others (max and min of floats, 2-byte floats, groups with
one member a host) reduce in group order. Rank 0 prints OK with the number of checks."""
import os
import socket
import sys

import ml_dtypes
import numpy as np

import spmd
from spmd.transports.mpi.mpi_communicator import MPICommunicator

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from collective_checks import axis_groups, reduce_in_order, value  # noqa: E402

rt = spmd.init()
assert spmd.process_count() == 4
host = rt.allgather_object(socket.gethostname())
assert host[0] == host[1] != host[2] == host[3], host

N = 70003                  # 2 x 35001 + 1 within a host; 35001 = 2 x 17500 + 1 across
DTYPES = ("float64", "float32", "complex128", "complex64", "int64", "int32", "bool", "float16", "bfloat16")


def inputs(group, dtype, k):
    if dtype in ("float16", "bfloat16"):
        return [np.random.default_rng(d + k).uniform(-4, 4, N).astype(getattr(ml_dtypes, dtype, dtype))
                for d in group]
    return [value(d + k, (N,), dtype) for d in group]


def expected(op, xs, group, dtype):
    by = {}
    for x, d in zip(xs, group):
        by.setdefault(host[d], []).append(x)
    halfs = dtype in ("float16", "bfloat16")
    hosts_way = len(by) > 1 and all(len(v) == 2 for v in by.values()) and not halfs and \
        (dtype in ("int64", "int32", "bool") or op in ("sum", "prod"))
    if hosts_way:
        return reduce_in_order(op, [reduce_in_order(op, v) for v in by.values()]), True
    if halfs:
        return reduce_in_order(op, [x.astype(np.float32) for x in xs]).astype(xs[0].dtype), False
    return reduce_in_order(op, xs), False


checked = 0
meshes = [spmd.Mesh((4,), ("x",)), spmd.Mesh((2, 2), ("a", "b")), spmd.Mesh((2, 2), ("a", "b"), devices=[[2, 0], [3, 1]])]
for mesh in meshes:
    comm = MPICommunicator(mesh)
    me = comm.rank
    for k, (axes, dtype) in enumerate((a, d) for a in axis_groups(mesh) for d in DTYPES):
        group = mesh.group(me, axes)
        i = mesh.index_in_group(me, axes)
        xs = inputs(group, dtype, k)
        ops = {"bool": ["sum", "min"], "complex128": ["sum", "prod"], "complex64": ["sum", "prod"]}
        flights = []
        for op in ops.get(dtype, ["sum", "max", "min", "prod"]):
            want, hosts_way = expected(op, xs, group, dtype)
            case = (mesh.text(), axes, dtype, op)
            assert (comm._plan(xs[i], axes, op) == "hosts") == hosts_way, (case, comm._plan(xs[i], axes, op))
            got = comm.all_reduce(xs[i], axes, op)
            assert got.dtype == want.dtype and np.array_equal(got, want), case
            x = xs[i].copy()
            flights.append((comm.all_reduce_start(x, axes, op), x, want, case))
            comm.all_gather(np.array([me]), axes, 0)          # a blocking collective while it flies
            checked += 1
        for h, x, want, case in reversed(flights):
            got = comm.wait(h)
            assert np.array_equal(got, want), (case, "started")
            assert np.array_equal(x, xs[i]), (case, "the started all_reduce changed its input")
            checked += 1
    assert comm.in_flight() == 0
if me == 0:
    print(f"OK {checked}", flush=True)
